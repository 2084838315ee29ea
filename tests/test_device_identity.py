"""A device is its position in the job (launch.py's --devices entry, main.py's --worker-index), whatever order its
worker joined the cluster in: its data share and classes, its log folder, its summary key and its figure label are
the same in every mode of an experiment."""
import os
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest

from analysis import figures, summary
from data import partition
from tests.test_launch import LENET, NODE, launcher, read_output
from training import config, runlog
from training.model import Model
from training.schemes.sync import Sync

MODES = ("sync", "async")
SLOWDOWNS = (1.0, 2.0, 4.0)


def scheme_at(rank, argv):
    args = config.parse_args(["-m", "sync", "-n", "lenet", "--dataset", "mnist-5k", "-s", "1", *argv])
    return Sync(Sync.Options.from_args(args), Model("lenet", [mx.cpu()], (1, 28, 28)),
                SimpleNamespace(kv=None, rank=rank, num_workers=3))


def test_a_worker_holds_the_share_of_its_position_whichever_rank_it_was_given():
    labels = np.repeat(np.arange(10), 30)

    shares = {rank: scheme_at(rank, ["--worker-index", "1"]).training_share(labels).tolist() for rank in range(3)}

    assert shares[0] == shares[1] == shares[2] == partition(labels, 1, 3, True, 0).tolist()
    assert scheme_at(2, []).index == 2  # by hand, without the flag, the rank


@pytest.fixture(scope="module")
def two_modes(tmp_path_factory):
    logs = str(tmp_path_factory.mktemp("identity") / "logs")
    args = ["--modes", ",".join(MODES), "--slowdown", ",".join(f"{f:g}" for f in SLOWDOWNS), "--non-iid",
            "--max-time", "2", "--snapshot-seconds", "0", "--no-figures", *LENET]
    with launcher(args, logs) as proc:
        proc.wait(timeout=300)
        output = read_output(proc)
    assert proc.returncode == 0, output
    return logs


def devices_by_slowdown(logs, mode):
    """{slowdown: (folder name, meta.json)} of a run's workers."""
    folders = runlog.device_folders(os.path.join(logs, "lenet", runlog.run_folder(mode, non_iid=True)))
    return {runlog.read_meta(path)["slowdown"]: (name, runlog.read_meta(path)) for _, name, path in folders}


@pytest.mark.slow
@pytest.mark.beside_others
def test_each_device_trains_on_the_same_classes_under_the_same_name_in_every_mode(two_modes):
    sync, asynchronous = (devices_by_slowdown(two_modes, mode) for mode in MODES)

    assert sorted(sync) == sorted(asynchronous) == list(SLOWDOWNS)
    for position, slowdown in enumerate(SLOWDOWNS):
        (name, meta), (other_name, other_meta) = sync[slowdown], asynchronous[slowdown]
        assert name == other_name == f"cpu-worker{position}"
        assert meta["worker_index"] == other_meta["worker_index"] == position
        assert meta["classes"] == other_meta["classes"] and meta["train_samples"] == other_meta["train_samples"]
        assert meta["job_id"] != other_meta["job_id"]
    assert sorted({c for _, meta in sync.values() for c in meta["classes"]}) == list(range(10))


@pytest.mark.slow
@pytest.mark.beside_others
def test_the_summaries_key_each_device_alike_and_the_compute_ratio_figure_has_one_group_a_device(two_modes):
    network_dir = os.path.join(two_modes, "lenet")
    runs = [summary.load_summary(network_dir, runlog.run_folder(mode, non_iid=True)) for mode in MODES]

    fig = figures.draw_compute_ratio(runs, "lenet")
    groups = [label.get_text() for label in fig.axes[0].get_xticklabels()]

    assert list(runs[0]["devices"][NODE]) == list(runs[1]["devices"][NODE])
    assert groups == [f"{NODE}/cpu-worker0", f"{NODE}/cpu-worker1 (2× slower)", f"{NODE}/cpu-worker2 (4× slower)"]
    assert all(run["partial"] is None for run in runs)
