"""Test helpers: small generated datasets, running jobs, and reading what the workers traced."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import struct
import subprocess
import sys
from pathlib import Path

from shared.metrics_record import MetricsRecord
from training import commits
from training.idx import UBYTE


def make_idx(array: bytes, dims: tuple[int, ...]) -> bytes:
    """Test data: encode unsigned-byte ``array`` with ``dims`` as an IDX file (the inverse of parse_idx)."""
    return struct.pack(f">HBB{len(dims)}I", 0, UBYTE, len(dims), *dims) + bytes(array)


def write_mnist(directory: Path, train: int = 120, test: int = 40, gz: bool = False,
                seed: int = 0) -> Path:
    """Write the four MNIST IDX files with ``train``/``test`` random 28x28 digits."""
    directory.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    for prefix, n in (("train", train), ("t10k", test)):
        labels = bytes(i % 10 for i in range(n))
        # each digit class gets a bright column at its own position, plus noise: learnable
        pixels = bytearray()
        for i in range(n):
            img = bytearray(rnd.randrange(0, 60) for _ in range(28 * 28))
            col = 2 + 2 * labels[i]
            for r in range(28):
                img[r * 28 + col] = 255
            pixels += img
        files = {f"{prefix}-images-idx3-ubyte": make_idx(bytes(pixels), (n, 28, 28)),
                 f"{prefix}-labels-idx1-ubyte": make_idx(labels, (n,))}
        for name, data in files.items():
            if gz:
                (directory / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (directory / name).write_bytes(data)
    return directory


def write_tiny_imagenet(root: Path, classes: int = 3, per_class: int = 4, val_per_class: int = 2,
                        size: int = 64) -> Path:
    """Write a tiny-imagenet-shaped tree (as downloaded) of small JPEGs."""
    from PIL import Image

    wnids = [f"n{1000000 + i:08d}" for i in range(classes)]
    (root / "train").mkdir(parents=True, exist_ok=True)
    (root / "wnids.txt").write_text("".join(w + "\n" for w in wnids))
    (root / "words.txt").write_text("".join(f"{w}\tthing {i}\n" for i, w in enumerate(wnids)))
    for i, w in enumerate(wnids):
        images = root / "train" / w / "images"
        images.mkdir(parents=True)
        boxes = []
        for k in range(per_class):
            name = f"{w}_{k}.JPEG"
            Image.new("RGB", (size, size), (40 * i % 256, 90, 200 - 10 * k)).save(images / name, "JPEG")
            boxes.append(f"{name}\t0\t0\t{size - 1}\t{size - 1}\n")
        (root / "train" / w / f"{w}_boxes.txt").write_text("".join(boxes))
    (root / "val" / "images").mkdir(parents=True)
    lines, n = [], 0
    for i, w in enumerate(wnids):
        for _ in range(val_per_class):
            name = f"val_{n}.JPEG"
            Image.new("RGB", (size, size), (40 * i % 256, 90, 150)).save(root / "val" / "images" / name, "JPEG")
            lines.append(f"{name}\t{w}\t0\t0\t{size - 1}\t{size - 1}\n")
            n += 1
    (root / "val" / "val_annotations.txt").write_text("".join(lines))
    return root


def write_identical_images(root: Path, classes: int = 2, per_class: int = 8, val_per_class: int = 1) -> Path:
    """A tiny-imagenet tree whose training images are all the same textured picture: two
    ranks' batches then differ only if their augmentation streams do (``inputs_lines``)."""
    from PIL import Image

    write_tiny_imagenet(root, classes=classes, per_class=per_class, val_per_class=val_per_class)
    rnd = random.Random(7)
    img = Image.frombytes("RGB", (64, 64), bytes(rnd.randrange(256) for _ in range(64 * 64 * 3)))
    for path in (root / "train").rglob("*.JPEG"):
        img.save(path, "JPEG", quality=95)
    return root


def inputs_lines(trace_dir: Path) -> list[list[dict]]:
    """Each worker's ``.inputs`` records (one per epoch it (re)entered: its first batch's
    ``rank``, ``epoch`` and ``sha256``), one list per worker process."""
    return [[json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for path in sorted(trace_dir.glob("*.inputs"))]


def samples_lines(trace_dir: Path) -> list[dict]:
    """Every line of all workers' ``.samples`` files (both phases, ``training.commits``)."""
    return [json.loads(line) for path in sorted(trace_dir.glob("*.samples"))
            for line in path.read_text().splitlines()]


def committed_samples(trace_dir: Path) -> dict[int, list[int]]:
    """Every committed sample index per epoch, over all workers' ``.samples`` files."""
    return commits.per_epoch(samples_lines(trace_dir))


def finals(trace_dir: Path) -> list[dict]:
    """The ``.final.json`` records of the workers that finished normally."""
    return [json.loads(p.read_text()) for p in sorted(trace_dir.glob("*.final.json"))]


def workers(trace_dir: Path) -> list[dict]:
    """The latest ``.worker.json`` record of every worker process."""
    out = []
    for p in sorted(trace_dir.glob("*.worker.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            pass
    return out


def metrics_lines(path: Path) -> list[MetricsRecord]:
    """The JSON-lines metrics file's records (every line must be one: ``MetricsRecordError``)."""
    if not path.exists():
        return []
    return [MetricsRecord.from_json(line) for line in path.read_text().splitlines()]


# -- running jobs ----------------------------------------------------------------------------

BIN = Path(sys.executable).parent
HOROVODRUN = str(BIN / "horovodrun")


def run_env(**extra) -> dict:
    """This environment with the venv first on PATH (horovodrun hands it to every worker)."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def train_args(module: str, data: Path, tmp: Path, epochs: int, *extra: str) -> list[str]:
    """``python -m training.<module>`` with the tracing and metrics files under ``tmp``."""
    return [sys.executable, "-m", f"training.{module}", "--data-dir", str(data),
            "--epochs", str(epochs), "--trace-dir", str(tmp / "trace"),
            "--metrics-file", str(tmp / "metrics.jsonl"), *extra]


class Job:
    """A process (horovodrun or one worker) in its own session; output to a file.

    ``stop()`` kills the whole session (horovodrun, its ssh clients, local workers); it is
    safe to call twice and is what a test's ``finally`` calls.
    """

    def __init__(self, argv: list[str], log: Path, env: dict | None = None, cwd: str | None = None):
        self.log = log
        self._out = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT,
                                     env=env or run_env(), cwd=cwd, start_new_session=True,
                                     stdin=subprocess.DEVNULL)

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(errors="replace")

    def wait_for(self, predicate, what: str, timeout: float = 180.0) -> None:
        """``tests.waiting.wait_for``; fails at once if the job exits."""
        from tests.waiting import wait_for

        def alive() -> None:
            if self.proc.poll() is not None:
                raise AssertionError(f"job exited ({self.proc.returncode}) while waiting for "
                                     f"{what}:\n{self.output()[-4000:]}")
        wait_for(predicate, timeout, what, interval=0.2, alive=alive, detail=lambda: self.output()[-4000:])

    def finish(self, timeout: float = 240.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"job still running after {timeout}s:\n{self.output()[-4000:]}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        self._out.close()


def live_workers(trace: Path, size: int, min_resets: int = 0) -> list[dict]:
    """Workers whose latest (re)start saw world ``size`` after at least ``min_resets`` resets."""
    return [w for w in workers(trace) if w["size"] == size and w["resets"] >= min_resets]


def check_finished_run(tmp: Path, dataset_size: int, epochs: int, final_world: int) -> list[dict]:
    """The contract of every run: equal parameters on all ranks, every epoch done, and each
    epoch's committed samples cover the dataset exactly once. Returns the metrics records."""
    trace = tmp / "trace"
    done = finals(trace)
    assert len(done) == final_world, done
    assert len({f["params_sha256"] for f in done}) == 1, done
    assert {f["epochs"] for f in done} == {epochs}
    assert sorted(f["rank"] for f in done) == list(range(final_world))
    per_epoch = committed_samples(trace)
    assert sorted(per_epoch) == list(range(epochs))
    for epoch, seen in per_epoch.items():
        dupes = len(seen) - len(set(seen))
        missing = set(range(dataset_size)) - set(seen)
        assert not dupes and not missing, f"epoch {epoch}: {dupes} repeated, {len(missing)} lost"
        assert len(seen) == dataset_size
    records = metrics_lines(tmp / "metrics.jsonl")
    assert [r.epoch for r in records if r.event == "epoch"][-1] == epochs
    assert {r.epoch for r in records if r.event == "epoch"} == set(range(1, epochs + 1))
    return records


class LocalScaleUp:
    """horovodrun on this machine with a discovery script printing ``localhost:<slots>``."""

    def __init__(self, tmp: Path, argv: list[str]):
        self.tmp = tmp
        self.hosts = tmp / "hosts"
        self.set_slots(2)
        discover = tmp / "discover.sh"
        discover.write_text(f"#!/bin/sh\ncat {self.hosts}\n")
        discover.chmod(0o755)
        self.hold = tmp / "hold"
        self.hold.write_text("")
        self.pause = tmp / "pause"
        cmd = [HOROVODRUN, "-np", "2", "--min-np", "2", "--max-np", "3",
               "--host-discovery-script", str(discover), "--network-interface", "lo",
               "--elastic-timeout", "300", *argv, "--debug-hold-file", str(self.hold),
               "--debug-pause-file", str(self.pause)]
        # Gloo's default rendezvous timeout: the driver takes a joiner in only once it waits
        # in hvd.init (spawn first), so the survivors never wait there for its start-up
        self.job = Job(cmd, tmp / "horovodrun.log", cwd=str(Path(__file__).parents[2]), env=run_env())

    def set_slots(self, n: int) -> None:
        tmp = self.hosts.with_suffix(".tmp")
        tmp.write_text(f"localhost:{n}\n")
        tmp.replace(self.hosts)

    def scale_up_after(self, samples: int, timeout: float = 600) -> int:
        """Train at 2 until ``samples`` of epoch 1 are committed, pause the world there
        (``--debug-pause-file``), grow to 3, wait until the three are in, let them train on,
        release the slow motion and wait for the end; horovodrun's exit code."""
        trace = self.tmp / "trace"
        self.job.wait_for(lambda: len(live_workers(trace, 2)) >= 2, "2 workers", timeout)
        self.job.wait_for(lambda: len(committed_samples(trace).get(0, ())) >= samples,
                          f"{samples} samples committed at world size 2", timeout)
        self.pause.write_text("")
        self.set_slots(3)
        self.job.wait_for(lambda: len(live_workers(trace, 3, min_resets=1)) >= 3,
                          "3 workers after the scale-up", timeout)
        self.pause.unlink()
        self.hold.unlink()
        return self.job.finish(timeout)
