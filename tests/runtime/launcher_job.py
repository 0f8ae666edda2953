"""The job tests/runtime/test_patch_launcher.py runs under plain horovodrun (no Horovod import:
what is tested is how horovodrun starts, relays and ends the processes). $LAUNCHER_DIR is a
directory; each rank writes rank<R>.pid, and what its mode ($LAUNCHER_MODE) says:

  exit      prints a line to stdout and one to stderr; rank 1 then kills itself with SIGKILL
            once rank 0 has printed its lines (rank0.said: else, on a loaded machine, rank 1
            can die before rank 0 has written anything), rank 0 waits for $LAUNCHER_DIR/stop
            (horovodrun ends it when rank 1 fails)
  hung      rank 1 records every SIGTERM in rank1.sigterm and ignores it, waiting forever;
            rank 0 exits 3 once rank 1 is running (horovodrun then terminates rank 1)
  wait      every rank waits for $LAUNCHER_DIR/stop, then exits 0
"""
import os
import signal
import sys
import time
from pathlib import Path

d = Path(os.environ["LAUNCHER_DIR"])
mode = os.environ["LAUNCHER_MODE"]
rank = int(os.environ["HOROVOD_RANK"])
deadline = time.monotonic() + 300


def wait_file(path: Path) -> None:
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


if mode == "hung" and rank == 1:
    def on_term(signum, frame):
        with open(d / "rank1.sigterm", "a") as f:
            f.write("SIGTERM\n")
    signal.signal(signal.SIGTERM, on_term)

(d / f"rank{rank}.pid").write_text(str(os.getpid()))

if mode == "exit":
    print(f"hello from {rank}", flush=True)
    print(f"complaint from {rank}", file=sys.stderr, flush=True)
    if rank == 0:
        (d / "rank0.said").write_text("")
    else:
        wait_file(d / "rank0.said")
        os.kill(os.getpid(), signal.SIGKILL)
    wait_file(d / "stop")
elif mode == "hung":
    if rank == 1:
        while time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        wait_file(d / "rank1.pid")
        sys.exit(3)
else:
    wait_file(d / "stop")
