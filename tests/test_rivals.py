"""The rivals beside ESync: the federated baselines of its journal version, FedAvg (fixed local steps, then the
synchronous average) and FedAsync (the server mixes each arriving model by its staleness), DC-ASGD as its paper
defines it (a backup of the weights per worker), Downpour SGD and ZenoPS's validation-only baseline. Each rule on
its own, then each in a real job."""
import os
import statistics

import mxnet as mx
import numpy as np
import pytest

from launcher.cluster import ProcessGroup, start_state_server
from tests import example_composition
from tests.jobs import LENET_ARGS, finish, iter_records, meta, run_main, start_job, worker_folders
from training import config, modes, runlog
from training.transport.collectives import ParameterServer
from training.schemes.servers.dcasgd_server import DelayCompensatedPerWorker
from training.schemes.servers.fedasync_server import FedAsyncLayout, FedAsyncMixer, staleness_weight
from training.model import Model
from training.schemes.downpour import Downpour
from training.schemes.fedasync import FedAsync

ALPHA = 0.6


@pytest.mark.parametrize("function, staleness, a, b, expected", [
    ("constant", 7, 0.5, 4, 1.0),
    ("polynomial", 0, 0.5, 4, 1.0),
    ("polynomial", 3, 0.5, 4, 0.5),
    ("hinge", 4, 10, 4, 1.0),
    ("hinge", 6, 10, 4, 1 / 21),
])
def test_the_staleness_functions_are_the_papers(function, staleness, a, b, expected):
    assert staleness_weight(function, staleness, a, b) == pytest.approx(expected)


def push(mixer, layout, rank, stored, model):
    """What the server does with a worker's push: one update per array of its range, in order."""
    for index, new in zip(layout.model_keys(rank), model):
        mixer.update(index, stored[index], mx.nd.array(new), None)


def test_the_server_mixes_each_model_by_how_many_updates_it_missed():
    layout = FedAsyncLayout(num_workers=2, num_arrays=2)
    mixer = FedAsyncMixer(layout, ALPHA, "polynomial", 0.5, 4)
    x0 = [np.array([1.0, 1.0]), np.array([2.0])]
    stored = {k: mx.nd.array(x0[k % 2]) for k in range(4)}  # every range starts from the initial model

    push(mixer, layout, 0, stored, [[3.0, 3.0], [4.0]])   # fresh: a_t = alpha
    x1 = [(1 - ALPHA) * x + ALPHA * n for x, n in zip(x0, [np.array([3.0, 3.0]), np.array([4.0])])]
    push(mixer, layout, 0, stored, [[5.0, 5.0], [6.0]])   # fresh again
    x2 = [(1 - ALPHA) * x + ALPHA * n for x, n in zip(x1, [np.array([5.0, 5.0]), np.array([6.0])])]
    push(mixer, layout, 1, stored, [[0.0, 0.0], [0.0]])   # started from x0: 2 updates old
    mixing = ALPHA * 3 ** -0.5
    x3 = [(1 - mixing) * x for x in x2]

    for rank in (0, 1):
        for index, expected in zip(layout.model_keys(rank), x2 if rank == 0 else x3):
            np.testing.assert_allclose(stored[index].asnumpy(), expected, rtol=1e-6)
    assert mixer.last == {0: [0.0, ALPHA], 1: [2.0, pytest.approx(mixing)]}
    assert mixer.started == {0: 2, 1: 3}


@pytest.mark.slow
def test_fedavg_workers_do_the_same_local_steps_hold_the_same_weights_and_learn(processes, tmp_path):
    log_dir = str(tmp_path / "logs")
    workers = start_job(processes, "fedavg", LENET_ARGS + ["--sync-interval", "5", "--max-iters", "30", "-e", "5",
                                                           "--digest-weights"],
                        num_workers=2, slowdowns=[1, 2], log_dir=log_dir)

    finish(processes, workers, timeout=180)

    folders = worker_folders(log_dir)
    records = [iter_records(folder) for folder in folders]
    assert all(len(r["time"]) == 5 for worker in records for r in worker)  # the slow worker too: FedAvg waits
    assert [r["weights_digest"] for r in records[0]] == [r["weights_digest"] for r in records[1]]
    best = max(r["accuracy"] for worker in records for r in worker if "accuracy" in r)
    assert best >= 0.8


@pytest.mark.slow
def test_a_composition_kept_outside_the_project_is_a_mode_of_its_own_and_trains(processes, tmp_path, monkeypatch):
    """One module (tests/example_composition.py, FedAdam from FedAvg's rounds and the outer Adam) named in
    ESYNC_MODE_MODULES is a -m mode of the job's processes."""
    monkeypatch.setenv(modes.EXTRA_MODULES_VARIABLE, "tests.example_composition")  # the job's processes inherit it
    log_dir = str(tmp_path / "logs")
    workers = start_job(processes, example_composition.NAME,
                        LENET_ARGS + ["--sync-interval", "4", "--max-iters", "10", "-e", "10", "-gl", "0.01",
                                      "--digest-weights"], num_workers=2, slowdowns=[1, 2], log_dir=log_dir)

    finish(processes, workers, timeout=180)

    folders = worker_folders(log_dir)
    records = [iter_records(folder) for folder in folders]
    config_of = meta(folders[0])["config"]
    assert (meta(folders[0])["mode"], config_of["local_optimizer"], config_of["outer_optimizer"]) == (
        example_composition.NAME, "sgd", "adam")
    assert all(len(r["time"]) == 4 for worker in records for r in worker)
    assert [r["weights_digest"] for r in records[0]] == [r["weights_digest"] for r in records[1]]
    assert max(r["accuracy"] for worker in records for r in worker if "accuracy" in r) >= 0.5


# The modern rivals against SSGD on 1,1,4 (the slow worker's step lasts 4 fast ones), each run for about the time of
# SSGD's 40 steps, each of which waits for the slow worker. SSGD's synchronous rounds end at the same accuracy however
# the machine is loaded; an asynchronous rival's last evaluation may fall into one of the dips asynchronous training
# has now and then (tests/test_zeno.py), so those are judged by the best accuracy their rank 0 measured.
SSGD_STEPS = 40


def run_on_1_1_4(group, tmp_path, mode, extra):
    """[(slowdown, round records)] of each worker of a 3-worker job on 1,1,4, and rank 0's test accuracies in round
    order."""
    log_dir = str(tmp_path / mode)
    finish(group, start_job(group, mode, LENET_ARGS + extra, num_workers=3, slowdowns=[1, 1, 4], log_dir=log_dir),
           timeout=240)
    rank0 = worker_folders(log_dir)[0]
    curve = [r["accuracy"] for r in iter_records(rank0) if "accuracy" in r]
    return [(meta(f)["slowdown"], iter_records(f)) for f in worker_folders(log_dir)], curve, meta(rank0)


@pytest.fixture(scope="module")
def ssgd_on_1_1_4(tmp_path_factory):
    """SSGD's final accuracy after SSGD_STEPS steps, shared by the rivals' tests."""
    tmp_path = tmp_path_factory.mktemp("ssgd")
    group = ProcessGroup(str(tmp_path / "processes"))
    try:
        yield run_on_1_1_4(group, tmp_path, "sync", ["--max-iters", str(SSGD_STEPS), "-e", str(SSGD_STEPS)])[1][-1]
    finally:
        group.stop()


@pytest.mark.long  # a real job to an accuracy (the virtual clock runs DiLoCo in the default run)
@pytest.mark.slow
def test_diloco_steps_with_adam_applies_the_average_by_nesterovs_momentum_and_ends_at_least_where_ssgd_does(
        processes, tmp_path, ssgd_on_1_1_4):
    # Synchronous: 5 rounds of 8 inner steps, the same samples and the same time as SSGD's 40 steps. DiLoCo's H is
    # long (the paper's 500): with 4 inner steps a round its outer momentum overshot (0.76 against SSGD's 0.84 at 80).
    records, curve, meta_of = run_on_1_1_4(processes, tmp_path, "diloco",
                                           ["--max-iters", "5", "-e", "5", "--sync-interval", "8"])

    config_of = meta_of["config"]
    assert (config_of["local_optimizer"], config_of["outer_optimizer"], config_of["server_momentum"],
            config_of["global_lr"]) == ("adam", "nag", 0.9, 0.7)
    assert all(len(r["time"]) == 8 for _, worker in records for r in worker)
    assert curve[-1] >= ssgd_on_1_1_4, (curve, ssgd_on_1_1_4)


@pytest.mark.slow
def test_fedbuff_buffers_the_staleness_weighted_deltas_and_reaches_ssgds_final_accuracy(processes, tmp_path,
                                                                                         ssgd_on_1_1_4):
    # Rounds of 4 local steps that the fast workers run without waiting: the first to finish 40 rounds (160 steps,
    # 40 of the slow worker's) ends the job.
    records, curve, _ = run_on_1_1_4(processes, tmp_path, "fedbuff",
                                     ["--max-iters", str(SSGD_STEPS), "-e", "10", "--sync-interval", "4",
                                      "--buffer-size", "2", "--local-optimizer", "adam"])

    # what a push's answer says of the buffer (0 where it answered before the push was whole, a round late)
    buffered = [r["deltas_buffered"] for _, worker in records for r in worker]
    assert set(buffered) <= {0, 1, 2} and 2 in buffered          # the server moves the model every second delta
    assert max(r["staleness"] for _, worker in records for r in worker) >= 1  # nobody waited
    assert max(curve) >= ssgd_on_1_1_4, (curve, ssgd_on_1_1_4)


@pytest.mark.long  # 40 rounds of up to 16 steps a fast worker
@pytest.mark.slow
def test_async_local_sgd_scales_each_workers_steps_to_its_speed_and_reaches_ssgds_final_accuracy(
        processes, tmp_path, ssgd_on_1_1_4):
    # Rounds in which the slow worker runs 4 steps and the fast ones 4 x the steps that fit in one of the slow one's,
    # once the state server has the slow worker's speed: its first round's end. Until then a fast worker's round is
    # 4 steps, and a slow first step (MXNet's first forward pass, times 4) may last many of them: 20 rounds did not
    # outlast the slow worker's first round once (1.31 s against 1.39 s); 40 leave the fast workers rounds planned
    # from both speeds. On 3 lenet workers a momentum of 0.5
    # keeps the stale deltas' overshoot small (0.9, the default, ended between 0.81 and 0.90 in three runs).
    records, curve, _ = run_on_1_1_4(processes, tmp_path, "async-local-sgd",
                                     ["--max-iters", "40", "-e", "4", "--sync-interval", "4", "--local-optimizer",
                                      "adam", "-gl", "0.7", "--outer-momentum", "0.5",
                                      "-port", str(start_state_server(processes))])

    slow_first_round = next(worker[0]["total_time"] for slowdown, worker in records if slowdown == 4)
    # a fast round's plan is asked at its end: those whose round began after the slow worker's first one ended
    known = [r["planned_steps"] for slowdown, worker in records if slowdown == 1
             for before, r in zip(worker, worker[1:]) if before["total_time"] > slow_first_round]
    assert known and max(known) >= 3 * 4, ([(d, [r["planned_steps"] for r in w]) for d, w in records], slow_first_round)
    assert max(curve) >= ssgd_on_1_1_4, (curve, ssgd_on_1_1_4)


@pytest.mark.long  # a real job to an accuracy (the virtual clock runs FedAsync in the default run)
@pytest.mark.slow
def test_fedasync_mixes_the_slow_workers_stale_models_with_less_weight_and_learns(processes, tmp_path):
    # with the proximal term (its pull on a local step is unit-tested below), which changes nothing of the mixing
    log_dir = str(tmp_path / "logs")
    workers = start_job(processes, "fedasync", LENET_ARGS + ["--sync-interval", "4", "--max-iters", "80",
                                                             "-e", "5", "--proximal", "0.01"],
                        num_workers=2, slowdowns=[1, 4], log_dir=log_dir)

    finish(processes, workers, timeout=180)

    by_speed = {meta(folder)["slowdown"]: iter_records(folder) for folder in worker_folders(log_dir)}
    fast, slow = by_speed[1.0], by_speed[4.0]
    mixed = [r for r in fast + slow if r["mixing_weight"] > 0]  # [0, 0] until the server has mixed a push in
    assert len(mixed) >= len(fast + slow) - 4
    for record in mixed:  # each logged weight is the rule's for its logged staleness
        assert record["mixing_weight"] == pytest.approx(ALPHA * (record["staleness"] + 1) ** -0.5, rel=1e-5)
    assert statistics.median(r["staleness"] for r in slow[2:]) >= 2
    assert statistics.median(r["staleness"] for r in fast[2:]) <= 1
    best = max(r["accuracy"] for r in fast + slow if "accuracy" in r)
    assert best >= 0.8


def test_dc_asgd_compensates_each_gradient_with_the_backup_of_the_worker_that_sent_it():
    lr, lamda = 0.1, 0.5
    rule = DelayCompensatedPerWorker(num_workers=2, num_arrays=1, lr=lr, lamda=lamda)
    stored = {0: mx.nd.array([1.0]), 1: mx.nd.array([1.0])}

    rule.update(0, stored[0], mx.nd.array([2.0]), None)   # worker 0's backup is the initial 1.0: no compensation
    w1 = 1.0 - lr * 2.0
    rule.update(0, stored[0], mx.nd.array([1.0]), None)   # its backup is now w1, the weights it pulled
    w2 = w1 - lr * 1.0
    rule.update(1, stored[1], mx.nd.array([2.0]), None)   # worker 1 pulled 1.0 and missed two updates
    w3 = w2 - lr * (2.0 + lamda * 4.0 * (w2 - 1.0))

    assert stored[0].asscalar() == pytest.approx(w2) and stored[1].asscalar() == pytest.approx(w3)
    assert rule.backups[(1, 0)].asscalar() == pytest.approx(w3)


@pytest.mark.long  # a real job to an accuracy (the virtual clock runs DC-ASGD in the default run)
@pytest.mark.slow
def test_dc_asgd_a_with_a_backup_per_worker_learns(processes, tmp_path):
    # DC-ASGD-a: the adaptive lambda on top of DC-ASGD-c's per-worker backups (both rules are unit-tested above)
    log_dir = str(tmp_path / "logs")
    workers = start_job(processes, "dcasgd-paper", LENET_ARGS + ["--max-iters", "150", "-e", "10",
                                                                 "--dc-adaptive", "0.95"],
                        num_workers=2, log_dir=log_dir)

    finish(processes, workers, timeout=180)

    curve = [r["accuracy"] for folder in worker_folders(log_dir) for r in iter_records(folder) if "accuracy" in r]
    # An untrained LeNet scores about 0.1; how far the first evaluation (after 10 of rank 0's steps) has come
    # depends on how many pushes the other worker made meanwhile, so only the best accuracy is judged.
    assert max(curve) > 0.85, curve


def test_dc_asgd_a_scales_lambda_by_the_root_of_the_gradients_moving_mean_square():
    lr, lamda0, m = 0.1, 0.5, 0.5
    rule = DelayCompensatedPerWorker(num_workers=2, num_arrays=1, lr=lr, lamda=lamda0, adaptive=m)
    stored = {0: mx.nd.array([1.0]), 1: mx.nd.array([1.0])}

    rule.update(0, stored[0], mx.nd.array([2.0]), None)   # mean square (1 - m) 4 = 2; no delay to compensate
    w1 = 1.0 - lr * 2.0
    rule.update(1, stored[1], mx.nd.array([2.0]), None)   # worker 1 pulled 1.0: mean square m 2 + (1 - m) 4 = 3
    w2 = w1 - lr * (2.0 + lamda0 / np.sqrt(3.0 + 1e-7) * 4.0 * (w1 - 1.0))

    assert stored[1].asscalar() == pytest.approx(w2)
    assert rule.mean_squares[0].asscalar() == pytest.approx(3.0)


def fedasync_worker(proximal):
    args = config.parse_args(["-m", "fedasync", "-n", "mlp", "--dataset", "mnist-5k", "-l", "0.01", "-ll", "0.01",
                              "--proximal", str(proximal)])
    model = Model("mlp", [mx.cpu()], (1, 28, 28))
    scheme = FedAsync(FedAsync.Options.from_args(args), model, None)
    scheme.local_trainer(args.local_lr)
    return model, scheme


def test_fedasyncs_proximal_term_pulls_each_local_step_back_towards_the_model_received():
    """Two local steps from the received model x0: the first, at x0, is plain SGD's; the second's gradient gains
    B rho (x1 - x0), B the batch size, because the loss here is summed over the batch."""
    rho, lr = 0.05, 0.01
    rng = np.random.RandomState(0)
    images, labels = rng.randint(0, 256, (8, 1, 28, 28)).astype(np.uint8), rng.randint(0, 10, 8)
    (model, scheme), (plain_model, plain) = fedasync_worker(rho), fedasync_worker(0)
    x0 = model.trainable[0].data().asnumpy().copy()
    for m, s in ((model, scheme), (plain_model, plain)):
        s.begin_round(0)
        m.forward_backward(images[:4], labels[:4])
        s.local_step()
    x1 = model.trainable[0].data().asnumpy().copy()
    np.testing.assert_allclose(x1, plain_model.trainable[0].data().asnumpy(), atol=1e-7)
    model.forward_backward(images[4:], labels[4:])
    g2 = model.trainable[0].grad().asnumpy().copy()
    scheme.local_step()

    expected = x1 - lr * (g2 + scheme.step_batch_size * rho * (x1 - x0))
    np.testing.assert_allclose(model.trainable[0].data().asnumpy(), expected, atol=1e-6)


def downpour_replica(flags, steps):
    """One downpour worker over MXNet's local kvstore, which applies the server's rule in this process, lr 0.01 and
    no momentum: (the first weight array at the start, its gradient at each step, its values after each step)."""
    args = config.parse_args(["-m", "downpour", "-n", "mlp", "--dataset", "mnist-5k", "-l", "0.01", *flags])
    model = Model("mlp", [mx.cpu()], (1, 28, 28))
    scheme = Downpour(Downpour.Options.from_args(args), model, ParameterServer(mx.kv.create("local")))
    scheme.train_samples = 100
    scheme.setup()
    w0 = model.trainable[0].data().asnumpy().copy()
    rng = np.random.RandomState(0)
    gradients, weights = [], []
    for _ in range(steps):
        model.forward_backward(rng.randint(0, 256, (4, 1, 28, 28)).astype(np.uint8), rng.randint(0, 10, 4))
        gradients.append(model.trainable[0].grad().asnumpy().copy())
        scheme.local_step()
        if scheme.round_done(1, 0.0):
            scheme.aggregate(False)
        weights.append(model.trainable[0].data().asnumpy().copy())
    return w0, gradients, weights


def test_a_downpour_replica_applies_its_gradients_pushes_their_sum_and_a_fetch_replaces_it_by_the_servers():
    """--n-push 2, --n-fetch 3: the weights after each step, against w0 - lr x the sum of the gradients of steps S."""
    w0, gradients, weights = downpour_replica(["--n-push", "2", "--n-fetch", "3"], 6)

    def after(*steps):
        return w0 - 0.01 * sum(gradients[s - 1] for s in steps)

    np.testing.assert_allclose(weights[1], after(1, 2), atol=1e-6)  # the replica's own steps; their sum pushed
    np.testing.assert_allclose(weights[2], after(1, 2), atol=1e-6)  # fetched: the server has steps 1-2, not 3
    np.testing.assert_allclose(weights[3], after(1, 2, 4), atol=1e-6)  # step 3 was lost with the fetch locally
    np.testing.assert_allclose(weights[5], after(1, 2, 3, 4, 5, 6), atol=1e-6)  # the server applied both sums


def test_downpour_with_adagrad_divides_each_weights_step_by_the_root_of_its_summed_squares():
    """--server-optimizer adagrad, --n-push 2, --n-fetch 2: the replica's first step, then the server's one update by
    the pushed sum S of two gradients, w0 - lr S / sqrt(S^2 + 1e-7), which the fetch brings back."""
    w0, gradients, weights = downpour_replica(["--n-push", "2", "--n-fetch", "2", "--server-optimizer", "adagrad"], 2)

    g1, total = gradients[0], gradients[0] + gradients[1]
    np.testing.assert_allclose(weights[0], w0 - 0.01 * g1 / np.sqrt(g1 * g1 + 1e-7), atol=1e-6)
    np.testing.assert_allclose(weights[1], w0 - 0.01 * total / np.sqrt(total * total + 1e-7), atol=1e-6)


@pytest.mark.slow
def test_downpour_with_adagrad_pushes_and_fetches_on_its_own_schedule_and_learns(processes, tmp_path):
    # the server's AdaGrad (unit-tested above, as the plain SGD server is) on the real schedule
    log_dir = str(tmp_path / "logs")
    workers = start_job(processes, "downpour", LENET_ARGS + ["--n-push", "2", "--n-fetch", "3", "--max-iters", "100",
                                                             "-e", "10", "--server-optimizer", "adagrad", "-l", "0.01"],
                        num_workers=1, log_dir=log_dir)

    finish(processes, workers, timeout=180)

    for folder in worker_folders(log_dir):
        records = iter_records(folder)
        # Rounds end at steps 2, 3, 4, 6, 8, 9, ...: a push of every weight at 2, 4, 6, 8, a fetch at 3, 6, 9 (the
        # first round's bytes also hold the initial broadcast).
        assert [len(r["time"]) for r in records[:6]] == [2, 1, 1, 2, 2, 1]
        weights = meta(folder)["param_bytes"]
        assert [r["sent_bytes"] > weights for r in records[1:6]] == [False, True, True, True, False]
        assert [r["received_bytes"] > weights for r in records[1:6]] == [True, False, True, False, True]
    curve = [r["accuracy"] for folder in worker_folders(log_dir) for r in iter_records(folder) if "accuracy" in r]
    assert max(curve) > 0.85, curve


@pytest.mark.slow
def test_validation_only_trains_alone_on_the_validators_held_out_samples(tmp_path):
    result = run_main(["-m", "validation-only", *LENET_ARGS, "--validation-size", "800", "--max-iters", "150",
                       "-e", "50", "-ld", str(tmp_path), "--node-name", "node"])

    assert result.returncode == 0, result.stderr
    ((_, _, folder),) = runlog.device_folders(str(tmp_path))
    assert meta(folder)["train_samples"] == 800
    assert max(r["accuracy"] for r in iter_records(folder) if "accuracy" in r) >= 0.8


@pytest.mark.slow
def test_a_sweep_runs_the_experiment_once_per_value_and_plots_final_accuracy_against_it(tmp_path):
    import json
    import subprocess
    import sys

    from launcher.cluster import ROOT
    from tests.test_launch import LAUNCH_PY, PNG_SIGNATURE, launcher_env

    logs = tmp_path / "logs"
    result = subprocess.run([sys.executable, LAUNCH_PY, "sweep", "-l", "0.0001,0.002", "--modes", "local",
                             "--slowdown", "1", "-n", "lenet", "--dataset", "mnist-5k", "-dd", os.path.join(ROOT, "data"),
                             "--max-iters", "40", "--no-figures", "-ld", str(logs)],
                            cwd=ROOT, env=launcher_env(), capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    points = json.load(open(logs / "lenet" / "sweep-l.json"))["points"]
    assert [p["value"] for p in points] == ["0.0001", "0.002"]
    for point in points:
        run = json.load(open(logs / f"l-{point['value']}" / "lenet" / "local" / "Standalone.json"))
        assert point["final_accuracy"] == {"local": run["final_accuracy"]}
        assert run["devices"] and json.load(open(glob_meta(logs / f"l-{point['value']}")))["config"]["learning_rate"] \
            == float(point["value"])
    assert points[0]["final_accuracy"]["local"] < points[1]["final_accuracy"]["local"]  # 40 steps at lr 1e-4 learn little
    with open(logs / "lenet" / "sweep-l.png", "rb") as f:
        assert f.read(8) == PNG_SIGNATURE


def glob_meta(folder):
    import glob

    (path,) = glob.glob(os.path.join(folder, "lenet", "local", "*", "*", "meta.json"))
    return path


@pytest.mark.parametrize("argv, message", [
    (["-m", "0,1"], "set by the launcher"),
    (["--rho", "0.5"], "at least two distinct values"),
    (["--tiers", "2,3"], r"--tiers after --: no mode of the command \(zeno\) reads it"),
])
def test_a_sweep_of_a_flag_the_launcher_sets_or_of_one_value_is_refused(argv, message):
    from launcher.studies import sweep
    from training.checks import UsageError

    with pytest.raises(UsageError, match=message):
        sweep.parse(argv + ["--modes", "zeno", "--devices", "cpu,cpu", "--max-time", "5"])
