"""Hogwild!: worker processes on one machine updating one shared copy of the weights without locks."""
import os
import time

import mxnet as mx
import numpy as np
import pytest

from launcher.cluster import ROOT, ProcessGroup, processes_in_group, tail
from data import load_test_set
from tests.jobs import LENET_ARGS, SAMPLE_DATA, iter_records, meta, run_main
from training import config, runlog
from training.faults import fault_injection
from training.faults.failures import EXIT_FAILURE
from training.hogwild import SharedWeights, apply_gradient
from training.model import Model

MAIN = os.path.join(ROOT, "main.py")


def test_a_step_subtracts_lr_times_the_gradient_and_the_decay_in_place():
    view = np.array([1.0, -2.0], np.float32)
    shared = view

    apply_gradient(view, np.array([0.5, 1.0], np.float32), lr=0.1, wd=0.2)

    assert shared is view
    np.testing.assert_allclose(view, [1 - 0.1 * (0.5 + 0.2), -2 - 0.1 * (1.0 - 0.4)], rtol=1e-6)


def test_a_process_attached_to_the_block_sees_and_makes_the_same_numbers_and_only_the_owner_removes_it():
    owner = SharedWeights.create([np.ones((2, 3), np.float32), np.zeros((4,), np.float32)], workers=2)
    other = SharedWeights.attach(owner.name, [(2, 3), (4,)], workers=2)
    try:
        other.views[0][1, 2] = 7.0
        owner.views[1][:] = 3.0
        other.updates[1] += 5
        assert owner.views[0][1, 2] == 7.0 and other.views[1].tolist() == [3.0] * 4
        assert owner.updates.tolist() == [0, 5] and owner.views[0][0, 0] == 1.0
    finally:
        other.close()
        assert os.path.exists(f"/dev/shm/{owner.name}")
        owner.close()
    assert not os.path.exists(f"/dev/shm/{owner.name}")


def test_each_worker_process_takes_its_own_slowdown_from_the_list():
    argv = ["-m", "hogwild", "--hogwild-workers", "3", "--slowdown", "1,1,4"]

    coordinator = config.parse_args(argv)
    workers = [config.parse_args(argv + ["--hogwild-rank", str(rank)]) for rank in range(3)]

    assert coordinator.slowdowns == (1.0, 1.0, 4.0)
    assert [w.slowdown for w in workers] == [1.0, 1.0, 4.0]


@pytest.mark.parametrize("argv, message", [
    (["-m", "sync", "--slowdown", "1,4"], "a list is for -m hogwild"),
    (["-m", "hogwild", "--hogwild-workers", "3", "--slowdown", "1,4"], "lists 2 factors for --hogwild-workers 3"),
])
def test_a_list_of_slowdowns_elsewhere_is_refused_in_one_line(argv, message):
    result = run_main(argv, timeout=30)

    assert result.returncode == 2 and message in result.stderr and result.stderr.strip().count("\n") <= 1, \
        result.stderr


@pytest.mark.slow
def test_two_workers_train_one_shared_model_and_the_coordinator_removes_it(tmp_path):
    result = run_main(["-m", "hogwild", "--hogwild-workers", "2", *LENET_ARGS, "--max-iters", "150", "-e", "50",
                       "-ld", str(tmp_path), "--node-name", "node"], timeout=180)

    assert result.returncode == 0, result.stderr[-2000:]
    name = result.stderr.split("/dev/shm/")[1].split()[0]
    assert not os.path.exists(f"/dev/shm/{name}")
    records = {rank: iter_records(str(tmp_path / "node" / f"cpu-worker{rank}")) for rank in (0, 1)}
    assert [len(r) for r in records.values()] == [150, 150]
    # Both wrote to one block: the worker that finished last saw all 300 updates, and its final model (which holds
    # them all) has learned. Which one finishes last, and what the other saw at its end, depends on how the two
    # interleave, so neither is asserted.
    seen = {rank: [r["hogwild_updates"] for r in records[rank]] for rank in (0, 1)}
    assert max(updates[-1] for updates in seen.values()) == 300
    assert all(updates == sorted(updates) and updates[-1] >= 150 for updates in seen.values())
    last = max(seen, key=lambda rank: seen[rank][-1])
    model = Model("lenet", [mx.cpu()], (1, 28, 28))
    model.load(str(tmp_path / "node" / f"cpu-worker{last}" / "model-final.params"))
    assert model.accuracy(*load_test_set(SAMPLE_DATA, "mnist-5k")) >= 0.85


def group_empties(pgid, within):
    deadline = time.time() + within
    while processes_in_group(pgid) and time.time() < deadline:
        time.sleep(0.1)
    return processes_in_group(pgid) == []


@pytest.mark.slow
def test_a_killed_worker_ends_the_other_and_the_coordinator_with_an_error_and_the_block_is_removed(tmp_path):
    """Rank 1, twice slower than rank 0, kills itself in its 20th step."""
    group = ProcessGroup(str(tmp_path / "processes"))
    try:
        job = group.start_python("hogwild", [MAIN, "-m", "hogwild", "--hogwild-workers", "2", "--slowdown", "1,2",
                                             *LENET_ARGS,
                                             "--max-iters", "100000", "-ld", str(tmp_path), "--node-name", "node"],
                                 env={fault_injection.ENV: "worker:training:kill:after=20:rank=1"})
        assert group.wait([job], timeout=120), tail(job.output, 20)

        assert job.poll() == EXIT_FAILURE, tail(job.output, 20)
        # The workers run in the coordinator's process group, and so does multiprocessing's resource tracker, which
        # ends on its own once the coordinator has gone (within moments; longer on a busy machine).
        assert group_empties(job.pid, within=10.0), processes_in_group(job.pid)
        name = open(job.output).read().split("/dev/shm/")[1].split()[0]
        assert not os.path.exists(f"/dev/shm/{name}")
        folders = [str(tmp_path / "node" / f"cpu-worker{rank}") for rank in (0, 1)]
        assert len(iter_records(folders[0])) < 100000
        assert [meta(folder)["slowdown"] for folder in folders] == [1.0, 2.0]
        padded = [sum(step.get(runlog.EMULATED_SLOWDOWN, 0) for r in iter_records(folder)
                      for step in r["time"].values()) for folder in folders]
        assert padded[0] == 0 and padded[1] > 0
    finally:
        group.stop()
