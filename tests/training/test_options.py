"""Flags, environment defaults and their one-line errors."""

import pytest

from training import mnist, options, resnet50
from training.errors import ConfigError


def test_defaults_and_flags():
    a = options.parse(["--synthetic", "--epochs", "3", "--commit-every", "5"], mnist.DEFAULTS)
    assert a.synthetic and a.epochs == 3 and a.commit_every == 5 and a.batch_size == 64
    assert a.image_size is None and not a.augment_on_device  # MNIST has no image flags
    r = options.parse(["--data-dir", "/x", "--image-size", "96"], resnet50.DEFAULTS)
    assert r.data_dir == "/x" and r.image_size == 96 and r.lr_milestones == (30, 60, 80)


def test_environment_gives_defaults_and_flags_win(monkeypatch):
    monkeypatch.setenv("TRAIN_EPOCHS", "7")
    monkeypatch.setenv("TRAIN_SYNTHETIC", "yes")
    monkeypatch.setenv("TRAIN_FP16_ALLREDUCE", "1")
    a = options.parse([], mnist.DEFAULTS)
    assert a.epochs == 7 and a.synthetic and a.fp16_allreduce
    assert options.parse(["--epochs", "2"], mnist.DEFAULTS).epochs == 2


@pytest.mark.parametrize("argv, env, fragment", [
    ([], {}, "one of --data-dir DIR or --synthetic is required"),
    (["--synthetic", "--epochs", "0"], {}, "must be positive"),
    (["--synthetic", "--batch-size", "x"], {}, "'x' is not a valid int"),
    (["--synthetic"], {"TRAIN_EPOCHS": "many"}, "TRAIN_EPOCHS='many' is not a valid int"),
    (["--synthetic"], {"TRAIN_SYNTHETIC": "perhaps"}, "is not a boolean"),
    (["--synthetic", "--lr-milestones", "3,x"], {}, "not a comma-separated list"),
    (["--synthetic", "--bogus"], {}, "unrecognized arguments: --bogus"),
])
def test_bad_values_are_config_errors(monkeypatch, argv, env, fragment):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match=fragment):
        options.parse(argv, mnist.DEFAULTS)


def test_image_size_minimum():
    with pytest.raises(ConfigError, match="--image-size 32 is below the minimum of 64"):
        options.parse(["--synthetic", "--image-size", "32"], resnet50.DEFAULTS)


def test_one_line_keeps_a_plain_message_and_unwraps_a_loader_worker_traceback():
    from training.cli import one_line
    from training.errors import DatasetError

    assert one_line(DatasetError("x.jpg: cannot decode image")) == "x.jpg: cannot decode image"
    wrapped = DatasetError("Caught DatasetError in DataLoader worker process 0.\nOriginal Traceback"
                           " (most recent call last):\n  File \"a.py\", line 1\n"
                           "training.errors.DatasetError: x.jpg: cannot decode image\n")
    assert one_line(wrapped) == "x.jpg: cannot decode image"


def test_gpu_defaults_256_per_gpu_and_0_1_per_256():
    args = options.parse(["--synthetic"], resnet50.DEFAULTS)
    assert (args.batch_size, args.lr) == (32, pytest.approx(0.0125))  # the CPU: 0.1 x 32 / 256
    args = options.resolve_device_defaults(args, resnet50.DEFAULTS, cuda=True)
    assert (args.batch_size, args.lr) == (256, pytest.approx(0.1))
    args = options.parse(["--synthetic", "--batch-size", "128"], resnet50.DEFAULTS)
    args = options.resolve_device_defaults(args, resnet50.DEFAULTS, cuda=True)
    assert (args.batch_size, args.lr) == (128, pytest.approx(0.05))  # the rate follows the batch
    args = options.parse(["--synthetic", "--lr", "0.3"], resnet50.DEFAULTS)
    args = options.resolve_device_defaults(args, resnet50.DEFAULTS, cuda=True)
    assert (args.batch_size, args.lr) == (256, 0.3)  # given flags win
    args = options.parse(["--synthetic"], mnist.DEFAULTS)
    args = options.resolve_device_defaults(args, mnist.DEFAULTS, cuda=True)
    assert (args.batch_size, args.lr) == (64, 0.01)  # MNIST keeps its own
    assert args.allreduce_dtype == "auto" and args.scale_up_ramp == 0.25


def test_the_config_is_frozen_typed_and_has_a_field_per_flag():
    """``parse`` returns a frozen ``TrainConfig``; every flag of both commands is a field of
    it (``from_namespace`` refuses a flag without one), with the type its flag converts to."""
    import dataclasses
    import types
    import typing

    cfg = options.parse(["--data-dir", "/x", "--lr-milestones", "5,2"], resnet50.DEFAULTS)
    assert isinstance(cfg, options.TrainConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 3  # type: ignore[misc]
    hints = typing.get_type_hints(options.TrainConfig)
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        hint = hints[f.name]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        allowed = tuple(typing.get_origin(k) or k for k in kinds)
        allowed += (int,) if float in allowed else ()  # the numeric tower
        assert isinstance(value, allowed), (f.name, value, hint)
    assert cfg.lr_milestones == (2, 5) and cfg.norm_weight_decay == 0.0
    import argparse

    with pytest.raises(TypeError, match="flags without a TrainConfig field: new_flag"):
        options.TrainConfig.from_namespace(argparse.Namespace(**vars(cfg), new_flag=1))
