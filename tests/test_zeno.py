"""Byzantine workers against plain synchronous averaging and against the Zeno validator, on real ps-lite jobs:
3 training workers (4 for Zeno++) and the validator, lenet on the shipped MNIST sample, the first worker flipping its
update's sign and scaling it by 10."""
import os

import mxnet as mx
import numpy as np
import pytest

from analysis import summary
from launcher.cluster import ROOT, start_ps_job
from tests.jobs import LENET_ARGS, finish
from training.attacks import Attack

MAIN = os.path.join(ROOT, "main.py")
ATTACK = ["--byzantine", "1", "--attack", "signflip", "--attack-scale", "10"]
BUDGET = ["--max-iters", "60", "-e", "0"]


def start_run(group, network_dir, mode, extra, num_workers=3):
    """num_workers training workers (+ the validator for zeno) logging to <network_dir>/<mode>; its workers."""
    log_dir = os.path.join(network_dir, mode)
    worker = [MAIN, "-m", mode.split("-")[0], "-ld", log_dir, "--node-name", "node", *LENET_ARGS, *BUDGET, *extra]
    argvs = [worker] * num_workers + ([worker + ["--validator"]] if mode.startswith("zeno") else [])
    return start_ps_job(group, [MAIN, "-m", "sync"], argvs)


def run_job(group, network_dir, mode, extra, num_workers=3):
    """One run to its end; its summary."""
    finish(group, start_run(group, network_dir, mode, extra, num_workers), timeout=240)
    return summary.summarize_mode(network_dir, mode)


def workers_of(run):
    return [device for node in run["devices"].values() for device in node.values()]


@pytest.mark.slow
def test_one_sign_flipping_worker_wrecks_plain_sync_averaging(processes, tmp_path):
    run = run_job(processes, str(tmp_path / "lenet"), "sync-attack", ATTACK)

    assert run["byzantine_workers"] == 1
    assert run["final_accuracy"] < 0.5


@pytest.mark.slow
def test_zeno_rejects_the_sign_flipper_and_keeps_the_accuracy_of_a_clean_run(processes, tmp_path):
    network_dir = str(tmp_path / "lenet")
    # Side by side: synchronous rounds of a fixed number come out the same however the two jobs share the cores.
    workers = start_run(processes, network_dir, "zeno", []) + start_run(processes, network_dir, "zeno-attack", ATTACK)
    finish(processes, workers, timeout=240)
    clean, attacked = (summary.summarize_mode(network_dir, mode) for mode in ("zeno", "zeno-attack"))

    assert clean["final_accuracy"] >= 0.85
    assert attacked["final_accuracy"] >= clean["final_accuracy"] - 0.03
    assert len(attacked["validators"]) == 1 and len(workers_of(attacked)) == 3
    for worker in workers_of(attacked):
        judged = worker["accepted_layers"] + worker["rejected_layers"]
        assert judged == 60 * 10  # every round judges lenet's 10 parameter arrays
        if worker["byzantine"]:  # a layer whose honest delta opposes the validator's can pass once flipped
            assert worker["accepted_layers"] <= 0.02 * judged
        else:
            assert worker["accepted_layers"] > 0.5 * judged


# Zeno++ runs 4 training workers: with 3 it accepts fewer honest gradients in 150 rounds, and its best accuracy fell
# to 0.67 in one run of four. Rank 0 evaluates every 10 rounds: asynchronous training here dips for a few evaluations
# now and then (0.84 to 0.42 in a run without any attacker; deeper, 0.78 to 0.19, when a flipped gradient passes), so
# the test looks at the best accuracy a run reached, not at whichever point its last round fell on.
ASYNC = ["--zeno-flavour", "async", "-l", "0.00025", "--max-iters", "150", "-e", "10"]


@pytest.mark.slow
def test_zeno_plus_plus_drops_most_of_the_sign_flippers_gradients_where_plain_async_collapses(processes, tmp_path):
    network_dir = str(tmp_path / "lenet")
    plain = run_job(processes, network_dir, "async-attack", ATTACK + ASYNC[2:], num_workers=4)
    zeno = run_job(processes, network_dir, "zeno-attack", ATTACK + ASYNC, num_workers=4)

    assert plain["best_accuracy"] < 0.5
    assert zeno["best_accuracy"] >= 0.7
    for worker in workers_of(zeno):
        judged = worker["accepted_updates"] + worker["rejected_updates"]
        assert judged >= 50
        share = worker["accepted_updates"] / judged
        assert share <= 0.2 if worker["byzantine"] else share >= 0.7, (worker["byzantine"], share)


@pytest.mark.slow
def test_a_zeno_job_without_a_validator_stops_with_a_clear_message(processes, tmp_path):
    log_dir = str(tmp_path / "logs")
    worker = [MAIN, "-m", "zeno", "-ld", log_dir, *LENET_ARGS, *BUDGET, "--sync-timeout", "30"]
    workers = start_ps_job(processes, [MAIN, "-m", "zeno"], [worker, worker])

    assert processes.wait(workers, 120)
    for proc in workers:
        assert proc.poll() == 1
        assert "needs exactly one process started with --validator" in open(proc.output).read()


@pytest.mark.parametrize("kind", ["signflip", "random", "randomscale"])
def test_attacks_corrupt_updates_as_documented(kind):
    update = mx.nd.array(np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    honest = update.asnumpy().copy()

    Attack(kind, 10.0).corrupt([update])

    corrupted = update.asnumpy()
    if kind == "signflip":
        np.testing.assert_allclose(corrupted, -10 * honest)
    elif kind == "randomscale":
        assert np.linalg.norm(corrupted) == pytest.approx(10 * np.linalg.norm(honest), rel=1e-4)
    else:
        assert abs(corrupted.std() - 10) < 10 and not np.allclose(corrupted, honest)


def test_labelflip_trains_on_mirrored_labels():
    class Stream:
        def next(self):
            return np.zeros((3, 1, 28, 28), np.uint8), np.array([0, 4, 9])

    _, labels = Attack("labelflip", 1.0).poison(Stream()).next()

    assert labels.tolist() == [9, 5, 0]
