"""Which model-directory files an entrypoint needs (detlab/entrypoint.py, pure)."""

from __future__ import annotations

import io
import tarfile

from detlab.entrypoint import missing_file_message, needed_files, tar_names


def test_scripts_and_trial_classes_name_their_files() -> None:
    assert needed_files("python3 train.py --lr 0.1") == [("train.py", ("train.py",))]
    assert needed_files("python3 ./train.py") == [("./train.py", ("train.py",))]
    assert needed_files("bash run.sh") == [("run.sh", ("run.sh",))]
    assert needed_files("model_def:DigitsTrial") == [
        ("model_def.py", ("model_def.py", "model_def/__init__.py"))
    ]
    assert needed_files("pkg.mod:T") == [("pkg/mod.py", ("pkg/mod.py", "pkg/mod/__init__.py"))]
    launcher = "python3 -m harness.launch.torch_distributed -- python3 train.py"
    assert needed_files(launcher) == [("train.py", ("train.py",))]
    # nothing to check: the harness's own modules, absolute paths, variables, modules, quoting
    assert needed_files("harness.launch:Trial") == []
    assert needed_files("python3 /opt/app/train.py") == []
    assert needed_files("python3 $APP/train.py") == []
    assert needed_files("python3 -m mypkg.train") == []
    assert needed_files("python3 'unbalanced") == []


def test_the_message_names_the_file_and_a_close_match() -> None:
    assert missing_file_message("python3 train.py", {"train.py", "util.py"}) is None
    msg = missing_file_message("python3 trian.py", {"train.py", "util.py", "data/x.csv"})
    assert msg == (
        "the entrypoint names trian.py, which is not in the model directory "
        "(its scripts: train.py, util.py); did you mean train.py?"
    )
    msg = missing_file_message("python3 train.py", set())
    assert msg is not None and "(it has no scripts)" in msg


def test_tar_names() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("./pkg/a.py")
        tar.addfile(info, io.BytesIO(b""))
    assert tar_names(buf.getvalue()) == {"pkg/a.py"}
    assert tar_names(b"not a tarball") is None
