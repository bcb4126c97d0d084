"""`python3 -m harness.launch.wrap_rank RANK -- CMD ARGS...` (Determined's `wrap_rank`).

Runs CMD and prefixes every line it prints (stdout and stderr) with `[rank=N] `, N being the
value of the environment variable RANK names (or RANK itself when it is a number); exits with
CMD's exit code. For hand-written launchers whose workers share one log.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from typing import IO


def _pump(src: IO[bytes], dst: IO[bytes], prefix: bytes) -> None:
    for line in iter(src.readline, b""):
        dst.write(prefix + line)
        dst.flush()
    src.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.launch.wrap_rank")
    parser.add_argument("rank", help="an environment variable holding the rank, or the rank")
    parser.add_argument("--no-redirect-stdio", action="store_true", help="do not prefix lines")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("a command to run is required, e.g. -- python3 train.py")
    rank = args.rank if args.rank.isdigit() else os.environ.get(args.rank)
    if rank is None:
        parser.error(f"the environment variable {args.rank} is not set")
    if args.no_redirect_stdio:
        return subprocess.call(cmd)
    prefix = f"[rank={rank}] ".encode()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer, prefix)),
        threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer, prefix)),
    ]
    for t in pumps:
        t.start()
    code = proc.wait()
    for t in pumps:
        t.join()
    return code


if __name__ == "__main__":
    sys.exit(main())
