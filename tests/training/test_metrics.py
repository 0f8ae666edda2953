"""Metrics records and the JSON-lines writer."""

import io
import json
import threading

import pytest

from training.errors import ConfigError
from training.metrics import MetricsWriter, rate, record


def test_epoch_record_fields():
    rec = record("epoch", time=1.5, epoch=2, batch=10, world_size=3, samples=200,
                 samples_per_sec=123.456, samples_per_sec_per_worker=41.152, loss_sum=100.0, correct=150,
                 lr=0.03, resets=1, val_accuracy=0.5)
    assert rec == {"event": "epoch", "time": 1.5, "epoch": 2, "batch": 10, "world_size": 3,
                   "samples": 200, "samples_per_sec": 123.46,
                   "samples_per_sec_per_worker": 41.15, "loss": 0.5, "accuracy": 0.75,
                   "lr": 0.03, "resets": 1, "val_accuracy": 0.5}


def test_progress_record_has_no_val_and_empty_means_are_null():
    rec = record("progress", time=0, epoch=1, batch=0, world_size=1, samples=0,
                 samples_per_sec=0, samples_per_sec_per_worker=0, loss_sum=0, correct=0,
                 lr=0.1, resets=0)
    assert "val_accuracy" not in rec and rec["loss"] is None and rec["accuracy"] is None
    with pytest.raises(ValueError, match="unknown metrics event 'other'"):
        record("other", time=0, epoch=1, batch=0, world_size=1, samples=0, samples_per_sec=0,
               samples_per_sec_per_worker=0, loss_sum=0, correct=0, lr=0, resets=0)


def test_rate():
    assert rate(100, 2.0) == 50.0
    assert rate(100, 0.0) == 0.0


def test_writer_appends_whole_lines_and_echoes(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"old": 1}\n')
    out = io.StringIO()
    writers = [MetricsWriter(str(path), out).open() for _ in range(4)]

    def write(w, k):
        for i in range(200):
            w.write({"writer": k, "i": i, "pad": "x" * 300})
    threads = [threading.Thread(target=write, args=(w, k)) for k, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in writers:
        w.close()
    lines = path.read_text().splitlines()
    assert lines[0] == '{"old": 1}'
    recs = [json.loads(line) for line in lines[1:]]
    assert len(recs) == 800
    assert all(len(r["pad"]) == 300 for r in recs)


def test_writer_without_file_prints_only():
    out = io.StringIO()
    w = MetricsWriter(None, out).open()
    w.write({"a": 1})
    assert out.getvalue() == '{"a": 1}\n'


def test_unwritable_metrics_file(tmp_path):
    with pytest.raises(ConfigError, match="metrics file .*nope/m.jsonl"):
        MetricsWriter(str(tmp_path / "nope" / "m.jsonl")).open()
