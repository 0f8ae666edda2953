"""The demo's generated dataset is real MNIST format: the training's own loader reads it,
labels are balanced digits, and the same seed gives the same bytes."""
from training.datagen import generate
from training.idx import load_mnist


def test_generated_dataset_loads_with_the_training_loader(tmp_path):
    generate(tmp_path / "a", train=200, test=50, seed=1)
    splits = load_mnist(tmp_path / "a")
    assert tuple(splits["train"].images.shape) == (200, 28, 28)
    assert tuple(splits["test"].images.shape) == (50, 28, 28)
    assert sorted(splits["train"].labels.bincount().tolist()) == [20] * 10
    assert int(splits["train"].images.max()) > 128  # strokes are drawn
    assert not list((tmp_path / "a").glob(".*.tmp"))  # no temporary files left


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        generate(tmp_path / name, train=20, test=10, seed=seed)
    f = "train-images-idx3-ubyte"
    assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert (tmp_path / "a" / f).read_bytes() != (tmp_path / "c" / f).read_bytes()
