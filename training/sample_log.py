"""Per-step sample log (``--debug-sample-log DIR``): which dataset indices each worker trained
on, step by step, with the world, commit and reset context, so that
``training.sample_audit`` can say which samples were trained twice or never.

Off by default (every method is a no-op without a directory). Each worker process appends
JSON lines to ``DIR/<host>-<pid>.steps`` (one process is one rank at a time; every line names
its rank), one ``os.write`` of a whole line each, so a crash loses at most the line being
written and leaves at most one partial last line (the reader skips it):

- ``{"kind": "enter", "time", "host", "pid", "world", "rank", "size", "epoch", "resets",
  "processed", "samples"}`` each time the worker (re)enters training with the synced state:
  the epoch and its position (``processed``: samples done over all ranks) it resumes from;
- ``{"kind": "step", "time", "world", "rank", "size", "epoch", "resets", "start", "total",
  "indices", "samples"}`` after each training step (its optimizer step done, before anything
  is committed): ``start`` is the epoch's position before the step, ``total`` the step's
  samples over all ranks, ``indices`` this rank's (possibly none), ``samples`` the epoch's size;
- ``{"kind": "commit", "time", "world", "rank", "epoch", "resets", "processed", "commits"}``
  once a commit's state is saved (``commits``: this process's commits so far).

``world`` names one world of one run: ``<rank 0's host>-<pid>@<its log's creation time>/<resets>``,
the same on every rank (rank 0 broadcasts its ``token`` on entry; the time tells a pod's reused
pid apart), new after every reset and in every run that
starts new processes, unchanged while a world trains on (an adopted world keeps its name).
A step's line is written before the next collective of that rank, so a step that any commit
holds is on record (a rank killed before writing it fails that commit's collective and the
step is rolled back).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENTER, STEP, COMMIT = "enter", "step", "commit"


class SampleLog:
    """Appends this process's lines to ``<directory>/<stem>.steps``; off when ``directory`` is None."""

    def __init__(self, directory: str | None, stem: str, host: str):
        self.path = Path(directory) / f"{stem}.steps" if directory else None
        self.stem, self.host = stem, host
        self.token = f"{stem}@{time.time():.3f}"  # this process, as a world's rank 0
        self.world = ""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    @property
    def on(self) -> bool:
        return self.path is not None

    def enter(self, leader: str, rank: int, size: int, epoch: int, resets: int, processed: int,
              samples: int) -> None:
        """(Re-)entering training in the world whose rank 0 is ``leader`` (its ``token``)."""
        if self.path is None:
            return
        self.world = f"{leader}/{resets}"
        self._append({"kind": ENTER, "time": time.time(), "host": self.host, "pid": os.getpid(),
                      "world": self.world, "rank": rank, "size": size, "epoch": epoch,
                      "resets": resets, "processed": processed, "samples": samples})

    def step(self, rank: int, size: int, epoch: int, resets: int, start: int, total: int,
             indices, samples: int) -> None:
        if self.path is not None:
            self._append({"kind": STEP, "time": time.time(), "world": self.world, "rank": rank,
                          "size": size, "epoch": epoch, "resets": resets, "start": start,
                          "total": total, "indices": list(indices), "samples": samples})

    def commit(self, rank: int, epoch: int, resets: int, processed: int, commits: int) -> None:
        if self.path is not None:
            self._append({"kind": COMMIT, "time": time.time(), "world": self.world, "rank": rank,
                          "epoch": epoch, "resets": resets, "processed": processed,
                          "commits": commits})

    def _append(self, rec: dict) -> None:
        assert self.path is not None
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())
        finally:
            os.close(fd)
