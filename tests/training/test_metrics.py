"""Metrics records and the JSON-lines writer."""

import io
import threading

import pytest

from shared.metrics_record import MetricsRecord, MetricsRecordError
from tests.metricsrecords import metrics_record
from training.errors import ConfigError
from training.metrics import MetricsWriter, rate, record


def test_epoch_record_fields():
    rec = record("epoch", time=1.5, epoch=2, batch=10, world_size=3, samples=200,
                 samples_per_sec=123.456, samples_per_sec_per_worker=41.152, loss_sum=100.0, correct=150,
                 lr=0.03, resets=1, val_accuracy=0.5)
    assert rec.to_dict() == {"event": "epoch", "time": 1.5, "epoch": 2, "batch": 10, "world_size": 3,
                             "samples": 200, "samples_per_sec": 123.46,
                             "samples_per_sec_per_worker": 41.15, "loss": 0.5, "accuracy": 0.75,
                             "lr": 0.03, "resets": 1, "val_accuracy": 0.5}
    assert MetricsRecord.from_json(rec.to_json()) == rec


def test_progress_record_has_no_val_and_empty_means_are_null():
    rec = record("progress", time=0, epoch=1, batch=0, world_size=1, samples=0,
                 samples_per_sec=0, samples_per_sec_per_worker=0, loss_sum=0, correct=0,
                 lr=0.1, resets=0)
    assert "val_accuracy" not in rec.to_dict() and rec.loss is None and rec.accuracy is None
    with pytest.raises(MetricsRecordError, match="event 'other' is not one of progress, epoch"):
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
            w.write(metrics_record(epoch=k + 1, batch=i))
    threads = [threading.Thread(target=write, args=(w, k)) for k, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in writers:
        w.close()
    lines = path.read_text().splitlines()
    assert lines[0] == '{"old": 1}'
    recs = [MetricsRecord.from_json(line) for line in lines[1:]]
    assert len(recs) == 800
    assert sorted((r.epoch, r.batch) for r in recs) == [(k + 1, i) for k in range(4) for i in range(200)]


def test_writer_without_file_prints_only():
    out = io.StringIO()
    w = MetricsWriter(None, out).open()
    w.write(metrics_record())
    assert out.getvalue() == metrics_record().to_json() + "\n"


def test_unwritable_metrics_file(tmp_path):
    with pytest.raises(ConfigError, match="metrics file .*nope/m.jsonl"):
        MetricsWriter(str(tmp_path / "nope" / "m.jsonl")).open()
