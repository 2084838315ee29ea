"""launch.py tune: the declared search spaces, and real studies of real launcher runs on data whose test set is
absent (a trial that read it would fail)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from analysis import tuned
from launcher import experiment, tune
from launcher.cluster import ROOT
from tests.test_launch import launcher, launcher_env, read_output
from training import config, modes
from training.checks import UsageError
from training.options import Range

LAUNCH_PY = os.path.join(ROOT, "launch.py")
CELL = "lenet/mnist-5k/1,2/loopback/iid"


# ----------------------------------------------------------------------------------------------
# The declarations


@pytest.mark.parametrize("mode", modes.names())
def test_every_scheme_searches_the_learning_rate_of_its_steps(mode):
    space = config.search_space(mode)

    assert {"learning_rate", "local_lr"} & set(space), space


def test_every_declared_default_lies_inside_its_range():
    for name, flag in config.scheme_flags().items():
        found = flag.field.metadata.get("search")
        if found is not None and flag.field.default is not None:
            assert flag.field.default in found, (name, flag.field.default, found)
    assert config.default("learning_rate") in config.search_space("sync")["learning_rate"][1]


def test_a_range_places_its_values_on_its_own_scale():
    rates = Range(1e-4, 1e-2, log=True)

    assert rates.position(1e-3) == pytest.approx(0.5) and Range(0, 1).position(0.25) == 0.25
    shown = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), "--help"], capture_output=True, text=True)
    assert "[launch.py tune searches log-uniform 0.0001 to 0.03]" in " ".join(shown.stdout.split())


def test_a_censored_trial_scores_its_time_with_the_accuracy_it_lacked():
    evaluations = [{"time": 1.0, "accuracy": 0.5}, {"time": 2.0, "accuracy": 0.7}]

    assert tune.score(evaluations, 0.7, 9.0) == 2.0
    assert tune.score(evaluations, 0.8, 9.0) == pytest.approx(9.0 * (1 + tune.PENALTY * 0.1))


def test_fast_only_is_sync_on_the_fastest_devices_alone():
    assert tune.scheme_run("fast-only", "1,1,20,1")[::3] == ("sync", "1,1,1")
    assert tune.scheme_run("esync-apply", "1,4")[:2] == ("esync", {"esync_policy": "apply"})


# ----------------------------------------------------------------------------------------------
# Real studies


@pytest.fixture(scope="module")
def train_only(tmp_path_factory):
    """mnist-5k's training files alone, in their real layout: a trial that read the test set would fail."""
    folder = tmp_path_factory.mktemp("data")
    os.makedirs(folder / "mnist-5k")
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        shutil.copy(os.path.join(ROOT, "data", "mnist-5k", name), folder / "mnist-5k" / name)
    return str(folder)


def tune_args(data_dir, logs, *more):
    return ["--schemes", "sync", "-n", "lenet", "--dataset", "mnist-5k", "-dd", data_dir, "--profile", "1,2",
            "--holdout", "500", "--target", "0.6", "--max-time", "2", "--trials", "2", "-ld", logs, *more]


def run_tune(args, logs):
    with launcher(args, logs, subprogram=("tune",)) as proc:
        proc.wait(timeout=300)
        return proc.returncode, read_output(proc)


def study(logs, scheme="sync"):
    import optuna

    return optuna.load_study(study_name=f"{CELL}|{scheme}", storage=f"sqlite:///{logs}/studies.db")


@pytest.fixture(scope="module")
def two_trials(tmp_path_factory, train_only):
    logs = str(tmp_path_factory.mktemp("tune") / "logs")
    code, output = run_tune(tune_args(train_only, logs), logs)
    assert code == 0, output
    return logs, output


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_two_trial_study_writes_the_best_values_and_its_trials_validate_on_held_out_training_data(two_trials):
    logs, output = two_trials
    entry = json.load(open(os.path.join(logs, "tuned.json")))["cells"][CELL]
    found = entry["schemes"]["sync"]

    assert found["trials"] == 2 and found["complete"] >= 1 and set(found["flags"]) == {"--learning-rate"}
    assert found["seeds"] == [1000, 1001] and entry["holdout"] == 500
    assert os.path.exists(os.path.join(logs, "lenet_mnist-5k_1-2_loopback_iid", "figures", "sync.png"))
    assert "| sync |" in output and "tuned values:" in output


@pytest.mark.slow
def test_a_flag_of_a_few_names_is_searched_among_them(tmp_path, train_only):
    logs = str(tmp_path / "logs")
    args = tune_args(train_only, logs)
    args[args.index("sync")] = "esync"
    args[args.index("--trials") + 1] = "1"
    code, output = run_tune(args, logs)

    assert code == 0, output
    trial = study(logs, "esync").trials[0]
    assert trial.params["outer_optimizer"] in ("sgd", "nag")
    assert f"--outer-optimizer {trial.params['outer_optimizer']}" in output or trial.state.name != "COMPLETE"
    assert f"outer_optimizer={trial.params['outer_optimizer']}" in output


@pytest.mark.slow
@pytest.mark.beside_others
def test_the_same_command_again_runs_more_trials_of_the_study_none_repeated(two_trials, train_only):
    logs, _ = two_trials

    code, output = run_tune(tune_args(train_only, logs), logs)
    trials = study(logs).trials

    assert code == 0, output
    assert len(trials) == 4 and [t.user_attrs["seed"] for t in trials] == [1000, 1001, 1002, 1003]
    assert len({t.params["learning_rate"] for t in trials}) == 4


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_trial_behind_the_best_is_pruned_and_its_run_stopped(tmp_path, train_only):
    import optuna

    logs = str(tmp_path / "logs")
    os.makedirs(logs)
    # A finished trial that reached the target at once, as successive halving recorded it at each rung: the real one
    # is behind it at its first.
    earlier = optuna.create_study(study_name=f"{CELL}|sync", storage=f"sqlite:///{logs}/studies.db")
    earlier.add_trial(optuna.trial.create_trial(
        params={"learning_rate": 0.001}, distributions={"learning_rate": optuna.distributions.FloatDistribution(
            1e-4, 3e-2, log=True)}, value=0.0, intermediate_values={step: 0.0 for step in range(1, 100)},
        system_attrs={f"completed_rung_{rung}": 0.0 for rung in range(4)}))

    code, output = run_tune(tune_args(train_only, logs, "--trials", "1", "--max-time", "30", "--target", "0.99"), logs)
    trial = study(logs).trials[-1]
    evaluations = [json.loads(line) for line in open(os.path.join(
        logs, "lenet_mnist-5k_1-2_loopback_iid", "sync", "trial-1", "lenet", "sync", "evaluator.jsonl"))]

    assert code == 0, output
    assert trial.state == optuna.trial.TrialState.PRUNED and "pruned after" in output
    assert evaluations[-1]["time"] < 15  # stopped long before its 30 s


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_storage_that_cannot_be_opened_is_one_line_and_exit_2_before_any_run(tmp_path, train_only):
    logs = str(tmp_path / "logs")
    result = subprocess.run([sys.executable, LAUNCH_PY, "tune", *tune_args(train_only, logs, "--storage",
                                                                            "nosuchdatabase://x")],
                            capture_output=True, text=True, env=launcher_env(), timeout=120)

    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--storage nosuchdatabase://x: cannot open it" in result.stderr
    assert not os.path.exists(os.path.join(logs, "lenet_mnist-5k_1-2_loopback_iid", "sync", "trial-0.out"))


# ----------------------------------------------------------------------------------------------
# --tuned


def tuned_file(tmp_path):
    path = str(tmp_path / "tuned.json")
    tuned.write(path, CELL, {"schemes": {"sync": {"flags": {"--learning-rate": 0.004}},
                                         "esync-apply": {"flags": {"--local-lr": 0.002, "--global-lr": 2.0}}}})
    return path


def parsed(*argv):
    return experiment.parse(["--modes", "sync,esync,local", "-n", "lenet", "--dataset", "mnist-5k", "--max-time", "5",
                             *argv])


def test_a_run_takes_each_modes_tuned_values_for_its_cell(tmp_path):
    run = parsed("--slowdown", "1,2", "--esync-policy", "apply", "--tuned", tuned_file(tmp_path))

    assert run.tuned_flags == {"sync": ("--learning-rate=0.004",), "esync": ("--local-lr=0.002", "--global-lr=2.0")}


def test_a_file_tuned_for_another_cell_is_refused_in_one_line(tmp_path):
    path = tuned_file(tmp_path)

    with pytest.raises(UsageError, match=r"was tuned for lenet/mnist-5k/1,2/loopback/iid, not for this run's cell "
                                         r"lenet/mnist-5k/1,4/loopback/iid"):
        parsed("--slowdown", "1,4", "--tuned", path)
    result = subprocess.run([sys.executable, LAUNCH_PY, "--modes", "sync", "-n", "lenet", "--dataset", "mnist-5k",
                             "--slowdown", "1,2", "--non-iid", "--max-time", "5", "--tuned", path], capture_output=True,
                            text=True,
                            env=launcher_env(), timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_report_of_some_schemes_keeps_the_others_of_the_cell(tmp_path):
    path = tuned_file(tmp_path)

    tuned.write(path, CELL, {"schemes": {"async": {"flags": {"--learning-rate": 0.002}}}})

    assert set(tuned.read(path)[CELL]["schemes"]) == {"sync", "esync-apply", "async"}
