"""Where a dataset is found without -dd (the repository's data/, then /usr/share/datasets/, where Debian's
dataset-fashion-mnist puts the paper's data), the one-line refusal when it is nowhere, and the published
Fashion-MNIST recognised in Debian's recompressed copy."""
import gzip
import hashlib
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import data
from data import DATA_PATH_VARIABLE, DataError, find_data_dir, load_dataset, originals
from launcher.cluster import ROOT
from tests.jobs import SAMPLE_DATA

DEBIAN_FOLDER = "/usr/share/datasets"
APT_COMMAND = "apt-get install dataset-fashion-mnist"


def search_path(monkeypatch, *folders):
    monkeypatch.setenv(DATA_PATH_VARIABLE, ":".join(str(f) for f in folders))


def stand_in_for_debian(tmp_path):
    """A folder laid out as /usr/share/datasets with Fashion-MNIST in it (the shipped MNIST sample's files)."""
    shared = tmp_path / "usr-share-datasets"
    shutil.copytree(os.path.join(SAMPLE_DATA, "mnist-5k"), shared / "fashion-mnist")
    return shared


def run(argv, env_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_") and k != "PORT"}
    env[DATA_PATH_VARIABLE] = env_path
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_without_dd_the_data_folder_is_searched_in_order(tmp_path, monkeypatch):
    shared = stand_in_for_debian(tmp_path)
    search_path(monkeypatch, SAMPLE_DATA, shared)

    assert find_data_dir("mnist-5k") == SAMPLE_DATA
    assert find_data_dir("fashion-mnist") == str(shared)


def test_the_default_search_is_the_repositorys_data_then_debians_folder(monkeypatch):
    monkeypatch.delenv(DATA_PATH_VARIABLE)

    assert data.data_dirs() == ("data", DEBIAN_FOLDER)


def test_a_dataset_found_nowhere_names_the_folders_searched_and_the_package(tmp_path, monkeypatch):
    search_path(monkeypatch, tmp_path / "a", tmp_path / "b")

    with pytest.raises(DataError, match=f"fashion-mnist not found in {tmp_path}/a or {tmp_path}/b.*{APT_COMMAND}"):
        find_data_dir("fashion-mnist")


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_worker_without_dd_trains_on_the_fashion_mnist_it_finds_and_says_where(tmp_path):
    shared = stand_in_for_debian(tmp_path)

    result = run(["main.py", "-m", "local", "-n", "lenet", "--dataset", "fashion-mnist", "-c", "1", "--max-iters", "2",
                  "-ld", str(tmp_path / "logs")], f"{tmp_path / 'nothing'}:{shared}")

    assert result.returncode == 0, result.stderr
    assert f"fashion-mnist from {shared}/fashion-mnist: 4000 training and 1000 test samples" in result.stderr
    assert "-dd not given" in result.stderr


@pytest.mark.parametrize("command", [
    ["main.py", "-m", "local", "-n", "lenet", "--dataset", "fashion-mnist", "-c", "1", "--max-iters", "2"],
    ["launch.py", "--modes", "sync", "-n", "lenet", "--dataset", "fashion-mnist", "--slowdown", "1,2",
     "--max-time", "5"],
], ids=["main.py", "launch.py"])
def test_a_missing_fashion_mnist_is_one_line_naming_the_package_and_exit_2(tmp_path, command):
    result = run([*command, "-ld", str(tmp_path / "logs")], str(tmp_path / "empty"))

    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and APT_COMMAND in result.stderr, result.stderr
    assert not os.path.exists(tmp_path / "logs")


def test_a_recompressed_copy_of_a_published_file_is_recognised_by_its_contents(tmp_path, monkeypatch):
    root = tmp_path / "fashion-mnist"
    shutil.copytree(os.path.join(SAMPLE_DATA, "mnist-5k"), root)
    digests = {}
    for name in [n for n in os.listdir(root) if n.endswith("-ubyte.gz")]:
        with gzip.open(root / name) as f:
            raw = f.read()
        digests[name[:-3]] = hashlib.md5(raw).hexdigest()
        with gzip.open(root / name, "wb", compresslevel=1) as f:  # other .gz bytes, the same contents
            f.write(raw)
    monkeypatch.setitem(originals.PUBLISHED_CONTENT_MD5, "fashion-mnist", digests)

    recognised = load_dataset(str(tmp_path), "fashion-mnist")
    with gzip.open(root / "t10k-labels-idx1-ubyte.gz") as f:
        labels = bytearray(f.read())
    labels[-1] = (labels[-1] + 1) % 10  # still a valid idx file, no longer the published one
    with gzip.open(root / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(bytes(labels))
    other = load_dataset(str(tmp_path), "fashion-mnist")

    assert "the published contents" in recognised.source
    assert "published" not in other.source


@pytest.mark.skipif(not os.path.isdir(os.path.join(DEBIAN_FOLDER, "fashion-mnist")),
                    reason=f"the real Fashion-MNIST is not installed ({APT_COMMAND})")
def test_debians_fashion_mnist_is_the_published_dataset():
    dataset = load_dataset(DEBIAN_FOLDER, "fashion-mnist")

    assert dataset.train_images.shape == (60000, 1, 28, 28) and dataset.test_images.shape == (10000, 1, 28, 28)
    assert list(np.bincount(dataset.train_labels)) == [6000] * 10
    assert list(np.bincount(dataset.test_labels)) == [1000] * 10
    assert "the published contents" in dataset.source
