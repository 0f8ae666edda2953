"""Training's commands on the project's runner: each failure is one ``error:`` line and the
exit code of ``shared.exitcodes`` (``training.cli.guarded``, ``training.datagen``)."""
from __future__ import annotations

import pytest

from shared.exitcodes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from training import datagen
from training.cli import guarded
from training.errors import CheckpointError, DatasetError

# what a DataLoader worker's error looks like once torch re-raised it in the main process
WRAPPED = DatasetError("Caught DatasetError in DataLoader worker process 0.\nOriginal Traceback"
                       " (most recent call last):\n  File \"a.py\", line 1\n"
                       "training.errors.DatasetError: x.jpg: cannot decode image\n")


def _raise(exc: BaseException):
    def body() -> int:
        raise exc
    return body


@pytest.mark.parametrize("exc, code, line", [
    (WRAPPED, EXIT_USAGE, "error: x.jpg: cannot decode image"),
    (CheckpointError("checkpoint directory /x: Permission denied"), EXIT_FAILURE,
     "error: checkpoint directory /x: Permission denied"),
    (RuntimeError("CUDA out of memory"), EXIT_FAILURE, "error: RuntimeError: CUDA out of memory"),
    (KeyboardInterrupt(), EXIT_INTERRUPTED, "error: interrupted"),
], ids=["bad-input-from-a-loader-worker", "training-error", "unforeseen", "ctrl-c"])
def test_every_failure_is_one_line_and_its_code(capsys, monkeypatch, exc, code, line):
    monkeypatch.delenv("TRAINING_TRACEBACK", raising=False)
    assert guarded("train-mnist", _raise(exc)) == code
    assert capsys.readouterr().err == line + "\n"


def test_done_is_0_and_a_traceback_only_when_asked(capsys, monkeypatch):
    assert guarded("train-mnist", lambda: EXIT_OK) == EXIT_OK
    monkeypatch.setenv("TRAINING_TRACEBACK", "1")
    assert guarded("train-mnist", _raise(RuntimeError("boom"))) == EXIT_FAILURE
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):" and err[-1] == "error: RuntimeError: boom"


def test_datagen_bad_flag_and_unwritable_directory(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        datagen.main([str(tmp_path), "--train", "many"])
    assert stopped.value.code == EXIT_USAGE
    assert capsys.readouterr().err == ("error: argument --train: invalid int value: 'many' "
                                       "(see python -m training.datagen --help)\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert datagen.main([str(blocker / "out"), "--train", "10", "--test", "10"]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
