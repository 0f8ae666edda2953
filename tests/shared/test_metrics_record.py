"""The metrics record: the one format the training writes and every reader parses
(``shared.metrics_record``): the line as the writer has always written it, strict parsing with
an error naming the field, and tolerant reading of a file another process appends to."""
import json

import pytest

from shared.metrics_record import MetricsRecord, MetricsRecordError, parse_line, read_records

# a line exactly as training.metrics wrote it before the record was typed (json.dumps of its dict)
EPOCH_LINE = ('{"event": "epoch", "time": 1700000000.123, "epoch": 2, "batch": 10, "world_size": 3, '
              '"samples": 200, "samples_per_sec": 123.46, "samples_per_sec_per_worker": 41.15, '
              '"loss": 0.5, "accuracy": 0.75, "lr": 0.03, "resets": 1, "val_accuracy": null}')
PROGRESS_LINE = ('{"event": "progress", "time": 1700000000.5, "epoch": 1, "batch": 5, "world_size": 2, '
                 '"samples": 80, "samples_per_sec": 10.0, "samples_per_sec_per_worker": 5.0, '
                 '"loss": null, "accuracy": null, "lr": 0.1, "resets": 0, "decode_fallbacks": 4}')


@pytest.mark.parametrize("line", [EPOCH_LINE, PROGRESS_LINE])
def test_a_line_round_trips_byte_for_byte(line):
    rec = MetricsRecord.from_json(line)
    assert rec.to_json() == line
    assert MetricsRecord.from_json(rec.to_json()) == rec


def test_fields_are_typed():
    rec = MetricsRecord.from_json(PROGRESS_LINE)
    assert (rec.event, rec.epoch, rec.world_size, rec.samples, rec.loss, rec.val_accuracy, rec.decode_fallbacks) \
        == ("progress", 1, 2, 80, None, None, 4)
    epoch = MetricsRecord.from_json(EPOCH_LINE)
    assert "decode_fallbacks" not in epoch.to_dict() and epoch.to_dict()["val_accuracy"] is None


def test_keys_a_newer_writer_adds_are_ignored():
    doc = dict(json.loads(PROGRESS_LINE), gpu_memory=123)
    assert MetricsRecord.from_dict(doc) == MetricsRecord.from_json(PROGRESS_LINE)


@pytest.mark.parametrize("change, message", [
    ({"event": "custom"}, "event 'custom' is not one of progress, epoch"),
    ({"world_size": "3"}, "world_size '3' is not a whole number >= 0"),
    ({"epoch": True}, "epoch True is not a whole number >= 0"),
    ({"samples": -1}, "samples -1 is not a whole number >= 0"),
    ({"batch": 1.5}, "batch 1.5 is not a whole number >= 0"),
    ({"time": None}, "time None is not a number"),
    ({"loss": "nan"}, "loss 'nan' is not a number or null"),
    ({"val_accuracy": 0.5}, "val_accuracy 0.5 on a progress record"),
    ({"decode_fallbacks": -2}, "decode_fallbacks -2 is not a whole number >= 0"),
])
def test_a_bad_value_is_a_typed_error_naming_the_field(change, message):
    doc = dict(json.loads(PROGRESS_LINE), **change)
    with pytest.raises(MetricsRecordError, match=f"^metrics record: {message}"):
        MetricsRecord.from_dict(doc)
    assert parse_line(json.dumps(doc)) is None


@pytest.mark.parametrize("line, message", [
    ('{"event": "progress", "time": 1', "not JSON"),
    ("[1, 2]", "not a JSON object: list"),
    ('{"event": "progress", "time": 1}', "missing epoch, batch, world_size"),
    (EPOCH_LINE.replace(', "val_accuracy": null', ""), "missing val_accuracy on an epoch record"),
])
def test_a_line_that_is_not_a_record(line, message):
    with pytest.raises(MetricsRecordError, match=message):
        MetricsRecord.from_json(line)
    assert parse_line(line) is None


def test_reading_a_file_another_process_appends_to(tmp_path):
    """Lines that are not records (noise, a half-written last line) are skipped; a missing
    file is no records."""
    path = tmp_path / "metrics.jsonl"
    path.write_text(PROGRESS_LINE + "\n[rank 0] noise\n\n" + EPOCH_LINE + "\n" + EPOCH_LINE[:40])
    assert read_records(path) == [MetricsRecord.from_json(PROGRESS_LINE), MetricsRecord.from_json(EPOCH_LINE)]
    assert read_records(tmp_path / "missing") == []
    assert read_records(None) == []
