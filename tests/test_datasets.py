"""The datasets the parameter-server experiments use, read from disk (nothing is downloaded)."""
import gzip
import os
import shutil

import mxnet as mx
import numpy as np
import pytest

from data import CIFAR_RECORD, DataError, load_dataset, load_test_set
from tests.jobs import SAMPLE_DATA
from training.model import Model


def write_cifar_batch(path, labels):
    """A CIFAR-10 binary batch: per image, its label byte then 3x32x32 pixel bytes (here all equal to the label)."""
    records = np.repeat(np.asarray(labels, np.uint8)[:, None], CIFAR_RECORD, axis=1)
    records.tofile(path)


@pytest.fixture
def cifar_dir(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    os.makedirs(folder)
    for i in range(1, 6):
        write_cifar_batch(folder / f"data_batch_{i}.bin", [i, i + 1])
    write_cifar_batch(folder / "test_batch.bin", [7, 8, 9])
    return str(tmp_path)


def test_cifar10_binary_batches_are_read(cifar_dir):
    data = load_dataset(cifar_dir, "cifar10")

    assert data.train_images.shape == (10, 3, 32, 32) and data.test_images.shape == (3, 3, 32, 32)
    assert list(data.train_labels[:4]) == [1, 2, 2, 3]
    assert (data.test_images[2] == 9).all()


def test_the_evaluator_reads_the_cifar10_test_batch_alone(cifar_dir):
    for i in range(1, 6):
        os.unlink(os.path.join(cifar_dir, "cifar-10-batches-bin", f"data_batch_{i}.bin"))

    images, labels = load_test_set(cifar_dir, "cifar10")

    assert images.shape == (3, 3, 32, 32) and list(labels) == [7, 8, 9]


def test_mnist_is_read_from_its_idx_files(tmp_path):
    # The MNIST layout is the shipped sample's: copy it under the name mnist, uncompressed for one file.
    shutil.copytree(os.path.join(SAMPLE_DATA, "mnist-5k"), tmp_path / "mnist")
    stem = tmp_path / "mnist" / "t10k-labels-idx1-ubyte"
    with gzip.open(f"{stem}.gz") as f:
        stem.write_bytes(f.read())
    os.unlink(f"{stem}.gz")

    data = load_dataset(str(tmp_path), "mnist")

    assert data.train_images.shape == (4000, 1, 28, 28) and len(data.test_labels) == 1000


def test_the_test_set_alone_needs_no_training_files(tmp_path):
    shutil.copytree(os.path.join(SAMPLE_DATA, "mnist-5k"), tmp_path / "mnist")
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        os.unlink(tmp_path / "mnist" / name)

    images, labels = load_test_set(str(tmp_path), "mnist")
    with pytest.raises(DataError, match="train-images"):
        load_dataset(str(tmp_path), "mnist")

    assert images.shape == (1000, 1, 28, 28)


def test_vgg_trains_a_step_on_single_channel_28_pixel_images():
    # The zoo's VGG expects 224 px: the model resizes the 28 px digits. VGG-11 only (about 20 s on a CPU, most of
    # it initialising 129M parameters); VGG-16 is the same zoo family with more convolutions.
    model = Model("vgg11", [mx.cpu()], (1, 28, 28))
    images = np.random.RandomState(0).randint(0, 256, (1, 1, 28, 28)).astype(np.uint8)

    model.forward_backward(images, np.array([3]))

    assert model.side == 224
    first, last = model.trainable[0].grad().asnumpy(), model.trainable[-1].grad().asnumpy()
    assert np.isfinite(first).all() and np.isfinite(last).all() and last.any()
