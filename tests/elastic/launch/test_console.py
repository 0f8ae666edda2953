"""elastic.launch.console: what elastic-run shows of horovodrun's output. The lines are the
formats horovodrun and Horovod's C++ logger really write; the end-to-end check through the
real launcher, with a handled hard kill, is tests/e2e/test_elastic_job.py."""
from __future__ import annotations

import io
import json
import logging
import os

import pytest

from elastic.launch.console import EXPECTED_ABORT_TEXT, Relay, View, classify
from shared.metrics_record import MetricsRecord

PROGRESS = {"event": "progress", "time": 1.0, "epoch": 1, "batch": 40, "world_size": 2, "samples": 640,
            "samples_per_sec": 412.345, "samples_per_sec_per_worker": 206.1, "loss": 0.53217, "accuracy": 0.8,
            "lr": 0.01, "resets": 0}
# as a handled hard kill prints them (tests/e2e/test_elastic_job.py), two ranks' lines mixed
ABORT = ("[1]<stderr>:[2026-11-23 22:15:55.451413: E /tmp/horovod-build.UmUyt5/horovod-0.28.1/horovod/common/"
         "operations.cc:755] [1]: Horovod background loop uncaught exception: aborted: worker 127.211.84.2[0] "
         "exited with 255 is gone")
# the same news heard first from the killed peer's socket (the CI run of a hard kill printed these)
BROKEN = [
    "[2]<stderr>:[2026-11-26 12:19:27.462969: E /tmp/horovod-build.o9TxaK/horovod-0.28.1/horovod/common/"
    "operations.cc:759] [2]: Horovod background loop uncaught exception: [/tmp/horovod-build.o9TxaK/"
    "horovod-0.28.1/third_party/gloo/gloo/transport/tcp/pair.cc:630] Read error [127.211.181.2]:42884: "
    "Connection reset by peer",
    "[1]<stderr>:[2026-11-26 12:19:27.478039: E /tmp/horovod-build.o9TxaK/horovod-0.28.1/horovod/common/"
    "operations.cc:759] [1]: Horovod background loop uncaught exception: [/tmp/horovod-build.o9TxaK/"
    "horovod-0.28.1/third_party/gloo/gloo/transport/tcp/pair.cc:639] Connection closed by peer [127.0.0.1]:2219",
]
ABORTING = [
    "[2]<stderr>:[2026-11-23 22:15:55[2026-11-23 22:15:55.481993: W /tmp/horovod-build.UmUyt5/horovod-0.28.1/"
    "horovod/common/operations.cc:300] Horovod: a Gloo collective failed; aborting this process's Gloo "
    "connections (8): aborted: worker 127.211.84.2[0] exited with 255 is gone",
    "[2]<stderr>:.481993: W /tmp/horovod-build.UmUyt5/horovod-0.28.1/horovod/common/operations.cc:1277] Horovod: "
    "aborting collective operations (8 connections), aborted: worker 127.211.84.2[0] exited with 255 is gone",
]


def rank_line(rank: int, record: dict, stream: str = "stdout") -> str:
    return f"[{rank}]<{stream}>:{json.dumps(record)}\n"


@pytest.mark.parametrize("line, kind, rank", [
    (rank_line(0, PROGRESS), "metrics", 0),
    (rank_line(3, dict(PROGRESS, event="epoch", val_accuracy=0.9)), "metrics", 3),
    ("Mon Nov 23 21:40:02 2026[2]<stdout>:" + json.dumps(PROGRESS), "metrics", 2),  # --prefix-output-with-timestamp
    (ABORT, "abort", 1),
    ("[0]<stderr>:[2026-11-23 22:15:55.1: E x.cc:755] [0]: " + "Horovod background loop uncaught exception: aborted",
     "abort", 0),  # stock Horovod: no reason
    (BROKEN[0], "abort", 2),
    (BROKEN[1], "abort", 1),
    ("[1]<stderr>:[x: E operations.cc:759] [1]: Horovod background loop uncaught exception: "
     "std::bad_alloc", "text", 1),  # not a transport error: shown as it is
    (ABORTING[0], "aborting", 2),
    (ABORTING[1], "aborting", 2),
    ("[0]<stdout>:hello from rank 0", "text", 0),
    ('[0]<stdout>:{"event": "custom"}', "text", 0),  # not a metrics record: the user's own line
    ('[0]<stdout>:{"event": "progress", broken', "text", 0),
    ("[1]<stderr>:Traceback (most recent call last):", "text", 1),
    ("[0]<stderr>:Connection to 127.144.132.2 closed by remote host.\r\n", "text", 0),
    ("[0]<stderr>:\r\n", "blank", 0),  # what ssh's \r\n leaves
    ("[0]<stdout>:\n", "text", 0),  # the user's own empty line
    ("elastic-run's own line", "text", None),
])
def test_classify(line, kind, rank):
    item = classify(line)
    assert (item.kind, item.rank) == (kind, rank)
    assert item.text == line.rstrip("\r\n")


def test_a_broken_peer_connection_is_the_expected_abort_line(caplog):
    """A hard kill: the survivors' loops leave on the dead peer's socket before the driver's
    abort arrives. One info line (the first rank's), Gloo's message as the reason, nothing raw."""
    assert classify(BROKEN[0]).reason == ("a peer's connection broke: Read error [127.211.181.2]:42884: "
                                          "Connection reset by peer")
    out, err = io.StringIO(), io.StringIO()
    relay = Relay(out, err, tty=False)
    with caplog.at_level(logging.INFO, logger="elastic.run"):
        for line in BROKEN + [ABORT]:
            relay.feed(line + "\n", stderr=True)
        relay.close()
    assert out.getvalue() == err.getvalue() == ""
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == [f"rank 2: {EXPECTED_ABORT_TEXT} (a peer's connection broke: Read error "
                     "[127.211.181.2]:42884: Connection reset by peer)"]


def record(**changes) -> MetricsRecord:
    return MetricsRecord.from_dict(dict(PROGRESS, **changes))


def test_the_view_names_world_size_changes_and_epoch_ends():
    view = View(clock=lambda: 100.0)
    assert view.observe(record()) == []
    assert view.status() == "world 2 | epoch 1 step 40 | 412.3 samples/s | loss 0.5322"
    assert view.observe(record(world_size=3)) == []  # the last event, not a line
    assert view.status().endswith("| world size 2 -> 3 (0s ago)")
    said = view.observe(record(event="epoch", world_size=3, val_accuracy=None))
    assert said == ["epoch 1 done: loss 0.5322, accuracy 0.8000, validation accuracy -"]
    assert view.status().endswith("| epoch 1 done: loss 0.5322, accuracy 0.8000, validation accuracy - (0s ago)")
    assert len(view.status(width=40)) == 39


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_when_not_a_terminal(caplog):
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    relay = Relay(out, err, tty=False, plain_every=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="elastic.run"):
        relay.feed(rank_line(0, PROGRESS))
        clock.now = 5
        relay.feed(rank_line(0, dict(PROGRESS, batch=45)))  # within plain_every: folded in only
        relay.feed("[0]<stdout>:hello\n")
        relay.feed("[1]<stderr>:a warning\n", stderr=True)
        relay.feed("[1]<stderr>:\r\n", stderr=True)
        relay.feed("[1]<stderr>:Connection to 127.144.132.2 closed by remote host.\r[1]<stderr>:\r\n", stderr=True)
        relay.feed(ABORT + "\n", stderr=True)
        relay.feed(ABORT.replace("[1]", "[0]") + "\n", stderr=True)  # the same abort, another rank
        for line in ABORTING:
            relay.feed(line + "\n", stderr=True)
        clock.now = 6
        relay.feed(rank_line(0, dict(PROGRESS, batch=50, world_size=1)))  # a change: shown at once
        relay.close()
    assert out.getvalue().splitlines() == [
        "world 2 | epoch 1 step 40 | 412.3 samples/s | loss 0.5322",
        "[0]<stdout>:hello",
        "world 1 | epoch 1 step 50 | 412.3 samples/s | loss 0.5322",
    ]
    assert relay.view.last_event == "world size 2 -> 1"
    assert err.getvalue() == "[1]<stderr>:a warning\n[1]<stderr>:Connection to 127.144.132.2 closed by remote host.\n"
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == [f"rank 1: {EXPECTED_ABORT_TEXT} (worker 127.211.84.2[0] exited with 255 is gone)"]
    assert not [r for r in caplog.records if r.levelno > logging.INFO]


def test_one_status_line_redrawn_in_place_on_a_terminal():
    out, err = io.StringIO(), io.StringIO()
    relay = Relay(out, err, tty=True, clock=Clock())
    relay.feed(rank_line(0, PROGRESS))
    relay.feed(rank_line(0, dict(PROGRESS, batch=45)))
    relay.feed("[0]<stdout>:hello\n")
    relay.close()
    text = out.getvalue()
    assert '"event"' not in text
    assert text.count("\r\x1b[K") == 4  # drawn, redrawn, erased for the passing line, drawn again
    assert "\r\x1b[K[0]<stdout>:hello\n\r\x1b[Kworld 2 | epoch 1 step 45" in text
    assert text.endswith("loss 0.5322\n")  # close() ends the status line


def test_the_relay_reads_both_pipes_to_the_end():
    out, err = io.StringIO(), io.StringIO()
    relay = Relay(out, err, tty=False)
    pipes = [os.pipe(), os.pipe()]
    readers = [os.fdopen(r, "rb") for r, _ in pipes]
    try:
        relay.attach(readers[0], readers[1])
        os.write(pipes[0][1], rank_line(0, PROGRESS).encode() + b"[0]<stdout>:bye\n")
        os.write(pipes[1][1], b"[0]<stderr>:oops\n")
        for _, w in pipes:
            os.close(w)
        relay.close(timeout=30)
    finally:
        for r in readers:
            r.close()
    assert out.getvalue().splitlines()[-1] == "[0]<stdout>:bye"
    assert err.getvalue() == "[0]<stderr>:oops\n"
