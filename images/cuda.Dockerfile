# The docker runtime's default image for GPU slots: detlab/pytorch:2.13.0-cuda.
#   scripts/build-images cuda      (= docker build -f images/cuda.Dockerfile -t detlab/pytorch:2.13.0-cuda images)
# Not built by the tests (it needs a registry and is ~5 GB). PyPI's Linux torch wheel brings the CUDA
# runtime, cuDNN and NCCL as nvidia-* wheels, so a plain Python base is enough; the host needs the
# NVIDIA driver and the NVIDIA container toolkit (docker's `--gpus`). The harness is not installed:
# det-agent injects it into every container. Keep the packages in step with agent/images/__init__.py.
FROM python:3.11-slim-bookworm
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 LANG=C.UTF-8
RUN pip install "torch==2.13.0" "numpy>=1.26,<3" "scikit-learn>=1.4,<2" "PyYAML>=6.0,<7" \
    "jupyterlab>=4.4,<4.5" "aiohttp>=3.12,<3.13" "tensorboard>=2.21,<2.22"
LABEL ai.detlab.image=cuda ai.detlab.torch=2.13.0
CMD ["python3"]
