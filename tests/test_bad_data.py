"""A damaged dataset file ends a worker with one line naming the file and the problem, exit 2, before any network
wait (nothing listens on the scheduler port the worker is given)."""
import gzip
import os
import struct

import numpy as np
import pytest

from tests.jobs import run_main
from tests.test_cli import worker_env

TRAIN, TEST = 200, 50
SIDE = 28
CIFAR_SIDE = 32


def idx_bytes(array, magic):
    return struct.pack(f">{1 + array.ndim}i", magic, *array.shape) + array.astype(np.uint8).tobytes()


def images(count):
    return idx_bytes(np.random.RandomState(count).randint(0, 256, (count, SIDE, SIDE)), 2051)


def labels(count):
    return idx_bytes(np.arange(count) % 10, 2049)


def write_mnist(folder, **replace):
    """A small, valid dataset in the mnist layout; `replace` maps a file name to other bytes."""
    os.makedirs(folder)
    files = {"train-images-idx3-ubyte": images(TRAIN), "train-labels-idx1-ubyte": labels(TRAIN),
             "t10k-images-idx3-ubyte": images(TEST), "t10k-labels-idx1-ubyte": labels(TEST)}
    files.update(replace)
    for name, content in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(content)


def cifar_batch(count, label=None):
    records = np.random.RandomState(count).randint(0, 256, (count, 1 + 3 * CIFAR_SIDE * CIFAR_SIDE))
    records[:, 0] = np.arange(count) % 10 if label is None else label
    return records.astype(np.uint8).tobytes()


def write_cifar(folder, **replace):
    os.makedirs(folder)
    files = {f"data_batch_{i}.bin": cifar_batch(40) for i in range(1, 6)}
    files["test_batch.bin"] = cifar_batch(20)
    files.update(replace)
    for name, content in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(content)


def run_worker(data_dir, dataset):
    return run_main(["-m", "sync", "-n", "lenet", "--dataset", dataset, "-dd", str(data_dir), "-c", "1"],
                    worker_env(), timeout=60)


def assert_one_line_error(result, path, problem):
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and path in errors[0] and problem in errors[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name, content, problem", [
    ("train-images-idx3-ubyte", labels(TRAIN), "magic number 2049, expected 2051"),
    ("t10k-labels-idx1-ubyte", b"\x00\x00", "shorter than its header"),
    ("train-images-idx3-ubyte", images(TRAIN)[:-100], "truncated"),
    ("t10k-labels-idx1-ubyte", labels(TEST + 5), "holds 50 images but"),
    ("train-labels-idx1-ubyte", idx_bytes(np.full(TRAIN, 12), 2049), "label 12 found, labels must be 0-9"),
    ("t10k-images-idx3-ubyte", idx_bytes(np.zeros((TEST, 32, 32)), 2051), "images of (32, 32) pixels"),
], ids=lambda value: value if isinstance(value, str) else "content")  # the bytes would make ids of 100 kB
def test_a_damaged_idx_file_is_named_with_its_problem(tmp_path, name, content, problem):
    write_mnist(tmp_path / "mnist", **{name: content})

    result = run_worker(tmp_path, "mnist")

    assert_one_line_error(result, str(tmp_path / "mnist" / name), problem)


def test_a_truncated_gzip_file_is_named(tmp_path):
    write_mnist(tmp_path / "mnist")
    path = tmp_path / "mnist" / "train-images-idx3-ubyte"
    path.unlink()
    gz = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    gz.write_bytes(gzip.compress(images(TRAIN))[:-50])

    result = run_worker(tmp_path, "mnist")

    assert_one_line_error(result, str(gz), "cannot read")


def test_a_truncated_cifar_batch_is_named(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    write_cifar(folder, **{"data_batch_3.bin": cifar_batch(40)[:-1000]})

    result = run_worker(tmp_path, "cifar10")

    assert_one_line_error(result, str(folder / "data_batch_3.bin"), "truncated or not a CIFAR-10 binary batch")


def test_a_cifar_label_out_of_range_is_named(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    write_cifar(folder, **{"test_batch.bin": cifar_batch(20, label=10)})

    result = run_worker(tmp_path, "cifar10")

    assert_one_line_error(result, str(folder / "test_batch.bin"), "label 10 found")


def test_the_small_valid_dataset_passes_the_checks(tmp_path):
    """The generated files themselves are fine: the failures above come from the damage alone."""
    from data import load_dataset

    write_mnist(tmp_path / "mnist")
    write_cifar(tmp_path / "cifar-10-batches-bin")

    assert len(load_dataset(str(tmp_path), "mnist").train_labels) == TRAIN
    assert len(load_dataset(str(tmp_path), "cifar10").train_labels) == 5 * 40
