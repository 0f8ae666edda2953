"""The training side of losing the launcher, on real horovodrun on this machine:

- one SIGTERM sent to the launcher's process group reaches the trainer twice (directly and
  forwarded by horovodrun) and must count once: the trainer commits and writes its checkpoint;
- a launcher SIGKILLed with its workers, started again with the same arguments, resumes from
  the newest committed state a worker kept on local storage, not from the last shared
  checkpoint (the start of the epoch here): at most a commit interval is trained again, and
  every sample of each epoch is still committed exactly once;
- a stale run (one that kept training after a newer run started in the same checkpoint
  directory) cannot write a checkpoint any more, and says so.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.training.trainhelp import (
    HOROVODRUN,
    Job,
    committed_samples,
    finals,
    train_args,
    workers,
    write_mnist,
)
from training import checkpoint, commits

pytestmark = [pytest.mark.timeout(900), pytest.mark.horovod]
ROOT = str(Path(__file__).parents[2])
TRAIN, BATCH = 400, 10


def samples_records(trace: Path, names: set[str] | None = None) -> list[dict]:
    """The committed samples records of the trace (``training.commits``; of the files in
    ``names`` only, when given)."""
    out = []
    for path in sorted(trace.glob("*.samples")):
        if names is None or path.name in names:
            out.extend(json.loads(line) for line in path.read_text().splitlines())
    return commits.committed(out)


def pids_gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            pass
    return True


def test_one_sigterm_to_the_process_group_counts_once_and_writes_the_checkpoint(tmp_path):
    data = write_mnist(tmp_path / "mnist", train=TRAIN, test=20)
    hold = tmp_path / "hold"
    hold.write_text("")
    ckpt = tmp_path / "ckpt"
    argv = [HOROVODRUN, "-np", "1", "-H", "localhost:1", "--network-interface", "lo",
            *train_args("mnist", data, tmp_path, 3, "--batch-size", str(BATCH),
                        "--commit-every", "2", "--checkpoint-dir", str(ckpt),
                        "--snapshot-dir", str(tmp_path / "snap"),
                        "--debug-step-delay", "0.05", "--debug-hold-file", str(hold))]
    job = Job(argv, tmp_path / "job.log", cwd=ROOT)
    try:
        job.wait_for(lambda: len(committed_samples(tmp_path / "trace").get(1, ())) >= 100,
                     "100 samples committed in epoch 2", timeout=300)
        # horovodrun (which forwards it) and the trainer at once, as `kill -- -PGID`,
        # `timeout` or a container stop do where they share a group
        (trainer,) = [w["pid"] for w in workers(tmp_path / "trace")]
        os.killpg(job.proc.pid, signal.SIGTERM)
        os.kill(trainer, signal.SIGTERM)
        job.finish(120)
    finally:
        job.stop()
    out = job.output()
    assert "second SIGTERM" not in out, out[-3000:]
    assert "SIGTERM: rank 0 leaves the job (exit 143)" in out, out[-3000:]
    (epoch, processed), _ = checkpoint.latest(ckpt)
    assert epoch == 1 and 100 <= processed < TRAIN, out[-3000:]


def launcher(tmp: Path, data: Path, log: str) -> Job:
    """Elastic horovodrun, two slots on this machine, slow motion while ``tmp/hold`` exists."""
    discover = tmp / "discover.sh"
    discover.write_text("#!/bin/sh\necho localhost:2\n")
    discover.chmod(0o755)
    argv = [HOROVODRUN, "-np", "2", "--min-np", "2", "--max-np", "2",
            "--host-discovery-script", str(discover), "--network-interface", "lo",
            *train_args("mnist", data, tmp, 2, "--batch-size", str(BATCH), "--commit-every", "2",
                        "--checkpoint-dir", str(tmp / "ckpt"), "--checkpoint-every", "1h",
                        "--snapshot-dir", str(tmp / "snap"), "--log-every", "0",
                        "--debug-step-delay", "0.1", "--debug-hold-file", str(tmp / "hold"))]
    return Job(argv, tmp / log, cwd=ROOT)


def test_a_launcher_killed_with_its_workers_resumes_from_the_local_snapshot(tmp_path):
    data = write_mnist(tmp_path / "mnist", train=TRAIN, test=20)
    trace = tmp_path / "trace"
    (tmp_path / "hold").write_text("")
    first = launcher(tmp_path, data, "first.log")
    try:
        first.wait_for(lambda: len(committed_samples(trace).get(1, ())) >= 160,
                       "160 samples committed in epoch 2", timeout=400)
        pids = [w["pid"] for w in workers(trace)]
        os.killpg(first.proc.pid, signal.SIGKILL)  # the launcher, with everything it runs
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        first.proc.wait(60)
        from tests.waiting import wait_for

        wait_for(lambda: pids_gone(pids), 60, "the first run's workers gone")
    finally:
        first.stop()
    before = {p.name for p in trace.glob("*.samples")}
    killed_at = max(r["processed"] for r in samples_records(trace) if r["epoch"] == 1)
    # the shared checkpoint is the end of epoch 1: that is where today's resume starts
    assert checkpoint.latest(tmp_path / "ckpt")[0] == (1, 0)

    (tmp_path / "hold").unlink()
    second = launcher(tmp_path, data, "second.log")
    try:
        assert second.finish(400) == 0, second.output()[-4000:]
    finally:
        second.stop()
    out = second.output()
    m = re.search(r"resuming from (?:rank \d+'s )?local snapshot \S+/snapshot-\S+ "
                  r"\(epoch 2, (\d+) samples done\)", out)
    assert m, out[-4000:]
    resumed_at = int(m.group(1))
    # rolled back at most one commit interval (2 steps of 2 x 10 samples), not to the epoch start
    assert 0 <= killed_at - resumed_at <= 2 * 2 * BATCH, (killed_at, resumed_at)
    assert resumed_at > 0
    # exactly once per epoch: the first run up to the resumed position, then the second run
    kept = [r for r in samples_records(trace, before)
            if r["epoch"] == 0 or r["processed"] <= resumed_at]
    again = samples_records(trace, {p.name for p in trace.glob("*.samples")} - before)
    for epoch in (0, 1):
        seen = [i for r in kept + again if r["epoch"] == epoch for i in r["indices"]]
        assert sorted(seen) == list(range(TRAIN)), f"epoch {epoch}: {len(seen)} samples"
    done = finals(trace)
    assert len(done) == 2 and len({f["params_sha256"] for f in done}) == 1, done
    assert checkpoint.latest_key(tmp_path / "ckpt")[0][1:] == (2, 0)


def test_a_stale_run_cannot_write_a_checkpoint_after_a_newer_one(tmp_path):
    """The old run pauses (``--debug-pause-file``) once its first checkpoint is written, until
    the new run has written its own: the new run then resumes early in the run, with
    checkpoints still to write, however long its start-up takes (without the pause, a start-up
    slowed by a loaded machine let the old run reach its last step first, and the new run
    resumed with no checkpoint left to write)."""
    data = write_mnist(tmp_path / "mnist", train=TRAIN, test=20)
    ckpt = tmp_path / "ckpt"
    hold = tmp_path / "hold"
    hold.write_text("")
    pause_old = tmp_path / "pause-old"

    def run(name: str, *extra: str) -> Job:
        tmp = tmp_path / name
        tmp.mkdir()
        argv = train_args("mnist", data, tmp, 3, "--batch-size", str(BATCH), "--commit-every", "2",
                          "--checkpoint-dir", str(ckpt), "--checkpoint-every", "4",
                          "--snapshot-every", "0", "--debug-step-delay", "0.1",
                          "--debug-hold-file", str(hold), *extra)
        return Job(argv, tmp_path / f"{name}.log", cwd=ROOT)

    def generations() -> set[int]:
        return {k[0] for n in os.listdir(ckpt) if (k := checkpoint.key(n))}

    old = run("old", "--debug-pause-file", str(pause_old))
    new = None
    try:
        old.wait_for(lambda: ckpt.exists() and generations() == {1}, "the old run's checkpoint",
                     timeout=300)
        pause_old.write_text("")  # the old run waits before its next step
        new = run("new")  # a retried launcher's run while the old one still runs
        new.wait_for(lambda: 2 in generations(), "the new run's checkpoint", timeout=300)
        pause_old.unlink()  # the old run trains on, and comes to its next checkpoint
        old.wait_for(lambda: "this run is stale" in old.output(), "the old run's refusal",
                     timeout=300)
        old_pos = checkpoint.latest_key(ckpt)
        assert old_pos is not None and old_pos[0][0] == 2
    finally:
        old.stop()
        if new is not None:
            new.stop()
    line = next(x for x in old.output().splitlines() if "this run is stale" in x)
    assert re.search(r"generation 2 in \S+ is newer than this run's \(1\)", line), line
    assert f"resuming from {ckpt}/ckpt-g000001-" in new.output()
