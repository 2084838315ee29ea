"""The datasets the parameter-server experiments use, read from disk (nothing is downloaded)."""
import gzip
import os
import shutil

import mxnet as mx
import numpy as np
import pytest

from data import CIFAR_RECORD, DataError, _read_idx_pair, load_dataset, load_test_set, originals
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


# Gluon's dataset classes read the published files; anything else is read here, and nothing is downloaded.

@pytest.fixture
def no_downloads(monkeypatch):
    """Gluon's download() fetches with requests.get: make any attempt fail the test."""
    import mxnet.gluon.utils

    def refuse(url, *args, **kwargs):
        raise AssertionError(f"a download of {url} was attempted")

    monkeypatch.setattr(mxnet.gluon.utils.requests, "get", refuse)


@pytest.fixture
def files_taken_for_the_published_ones(monkeypatch):
    """Every file that exists passes Gluon's SHA-1 check, as the published files would."""
    import mxnet.gluon.data.vision.datasets
    import mxnet.gluon.utils

    def exists(path, sha1):
        return os.path.isfile(path)

    monkeypatch.setattr(mxnet.gluon.utils, "check_sha1", exists)
    monkeypatch.setattr(mxnet.gluon.data.vision.datasets, "check_sha1", exists)
    monkeypatch.setattr(originals, "published", lambda root, dataset, train: True)


def mnist_copy(tmp_path, name):
    shutil.copytree(os.path.join(SAMPLE_DATA, "mnist-5k"), tmp_path / name)
    return str(tmp_path / name)


@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist"])
def test_files_that_are_not_the_published_ones_are_read_here_without_a_download(tmp_path, no_downloads, dataset):
    root = mnist_copy(tmp_path, dataset)
    before = sorted(os.listdir(root))

    assert originals.read_split(root, dataset, train=True) is None
    data = load_dataset(str(tmp_path), dataset)

    assert data.train_images.shape == (4000, 1, 28, 28) and sorted(os.listdir(root)) == before


def test_cifar10_batches_that_are_not_the_published_ones_are_read_here_without_a_download(cifar_dir, no_downloads):
    root = os.path.join(cifar_dir, "cifar-10-batches-bin")
    before = sorted(os.listdir(root))

    assert originals.read_split(root, "cifar10", train=False) is None
    assert load_test_set(cifar_dir, "cifar10")[0].shape == (3, 3, 32, 32)
    assert sorted(os.listdir(root)) == before


def test_the_published_mnist_files_are_read_by_gluons_class_into_the_same_arrays(
        tmp_path, no_downloads, files_taken_for_the_published_ones):
    root = mnist_copy(tmp_path, "mnist")
    ours = _read_idx_pair(root, "mnist", "train")

    images, labels = originals.read_split(root, "mnist", train=True)
    data = load_dataset(str(tmp_path), "mnist")

    assert images.dtype == np.uint8 and labels.dtype == np.int32
    np.testing.assert_array_equal(images, ours[0])
    np.testing.assert_array_equal(labels, ours[1])
    np.testing.assert_array_equal(data.test_images, _read_idx_pair(root, "mnist", "t10k")[0])


def test_the_published_cifar10_batches_are_read_by_gluons_class_into_the_same_arrays(
        cifar_dir, no_downloads, files_taken_for_the_published_ones):
    root = os.path.join(cifar_dir, "cifar-10-batches-bin")

    images, labels = originals.read_split(root, "cifar10", train=True)

    assert images.shape == (10, 3, 32, 32) and images.dtype == np.uint8
    assert list(labels[:4]) == [1, 2, 2, 3] and (images[9] == 6).all()
    np.testing.assert_array_equal(load_dataset(cifar_dir, "cifar10").test_labels, [7, 8, 9])


@pytest.mark.parametrize("dataset", sorted(originals.GLUON_CLASS_NAMES))
@pytest.mark.parametrize("train", [True, False])
def test_the_hashes_checked_before_mxnet_loads_are_the_ones_gluons_class_checks(tmp_path, no_downloads, dataset,
                                                                                  train):
    gluon_class = originals.offline_class(dataset)
    split = gluon_class.__new__(gluon_class)
    with pytest.raises(originals.NotTheOriginals):  # an empty folder: refused, not downloaded
        split.__init__(root=str(tmp_path), train=train)

    assert dict(split._files_checked()) == originals.PUBLISHED_SHA1[dataset]["train" if train else "t10k"]
