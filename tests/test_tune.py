"""launch.py tune: the declared search spaces, and real studies of real launcher runs on data whose test set is
absent (a trial that read it would fail)."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from analysis import tuned
from launcher import backends, experiment
from launcher.studies import search, tune
from launcher.cluster import ROOT
from tests.test_launch import launcher, launcher_env, read_output
from training import config, modes
from training.checks import UsageError
from training.options import Choice, Range

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


def test_a_range_widens_past_the_edge_its_chosen_value_lies_at_by_half_its_span_within_its_limits():
    rates = Range(0.5, 8.0, log=True, limits=(0.01, 100.0))
    momentum = Range(0.0, 0.95, limits=(0.0, 0.99))

    assert rates.widened(0.6) == Range(0.125, 8.0, log=True, limits=(0.01, 100.0))
    assert rates.widened(7.5).high == pytest.approx(32.0) and rates.widened(2.0) is None
    assert momentum.widened(0.94).high == 0.99 and momentum.widened(0.01) is None  # 0 is its limit
    assert Range(1, 256, log=True, integer=True).widened(1) is None  # no limits: as declared


def test_a_period_widens_up_to_the_longest_whose_first_aggregation_ends_within_the_budget():
    def period(mode, devices, charges=backends.Charges(step_seconds=0.03)):
        return tune.period_limits(config.search_space(mode), mode, devices, 180.0, charges)["sync_interval"][1]

    declared = config.search_space("fedavg")["sync_interval"][1]
    # a synchronous round lasts the slowest device's period: 180 s / (0.03 s x 117) = 51 steps, below the top
    assert period("fedavg", "1,1,1,1,117,117") == declared and declared.widened(250) is None
    # on the fast devices alone, or where each device aggregates at its own pace, the fastest device's 6,000 steps
    assert period("fedavg", "1,1,1,1").limits == period("fedbuff", "1,1,1,1,117,117").limits == (1, 6000)
    assert period("fedavg", "1,1,1,1").widened(240) == dataclasses.replace(declared, high=4096, limits=(1, 6000))
    assert period("fedavg", "1,1,1,1", None) == declared  # in real time a step's time is not declared
    assert period("fedavg", "1,1,1,1", backends.Charges(step_seconds=0.03, step_overhead=0.03)).limits == (1, 3000)


def test_a_search_reads_its_periods_budget_from_the_step_time_its_trials_are_charged(tmp_path, train_only):
    calibrated = tmp_path / "devices.json"
    calibrated.write_text(json.dumps({"network": "lenet", "dataset": "mnist-5k", "batch_size": 64,
                                      "step_seconds": 0.01, "overhead_seconds": 0.002}))

    def limits(scheme, *clock):
        ns = tune.parse(tune_args(train_only, str(tmp_path), "--max-time", "60", *clock))
        return tune.declared_space(ns, scheme)["sync_interval"][1].limits

    assert limits("fedbuff", "--clock", "virtual", "--step-seconds", "0.05") == (1, 1200)  # 60 s / 0.05 s
    assert limits("fedavg", "--clock", "virtual", "--step-seconds", str(calibrated)) == (1, 2727)  # 60 / 0.022 s
    assert limits("fast:fedavg", "--clock", "virtual", "--step-seconds", str(calibrated)) == (1, 5000)  # 60 / 0.012
    assert limits("fedavg") is None  # real time: as declared


def test_a_seed_that_missed_scores_the_budget_with_the_accuracy_it_lacked_whenever_it_stopped():
    evaluations = [{"time": 1.0, "accuracy": 0.5}, {"time": 2.0, "accuracy": 0.7}]
    diverged = [{"time": 1.0, "accuracy": 0.1}, {"time": 1.5, "accuracy": 0.1, "diverged": "the test loss is nan"}]

    assert tune.seed_result(evaluations, 0.7, 9.0)["score"] == 2.0
    assert tune.seed_result(evaluations, 0.8, 9.0)["score"] == pytest.approx(9.0 * (1 + tune.PENALTY * 0.1))
    missed = tune.seed_result(diverged, 0.8, 9.0)  # stopped after 1.5 s: it still used up the budget
    assert missed["score"] == pytest.approx(9.0 * (1 + tune.PENALTY * 0.7)) and missed["diverged"]


def first_values(cell, scheme, seed=1000):
    import optuna

    space = config.search_space(tune.scheme_run(scheme, "1,2")[0])
    sampler = search.quasi_random_sampler(search.study_seed(cell, scheme, seed), list(space))
    study = optuna.create_study(sampler=sampler)
    values = []
    for _ in range(3):
        trial = study.ask()
        values.append({name: rng.suggest(trial, name) for name, (_, rng) in space.items()})
        study.tell(trial, 1.0)
    return values


def test_two_studies_draw_their_own_values_and_one_study_the_same_again():
    sync, fast_only = first_values(CELL, "sync"), first_values(CELL, "fast-only")
    other_cell = first_values("lenet/mnist-5k/1,4/loopback/iid", "sync")

    assert sync[0] != fast_only[0] and sync[0] != other_cell[0]
    assert sync == first_values(CELL, "sync") and sync != first_values(CELL, "sync", seed=1001)
    assert len({v["learning_rate"] for v in sync}) == 3  # the Sobol points, one a trial


def test_the_quasi_random_points_spread_over_the_range_on_its_own_scale():
    import optuna

    rates = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    assert search.from_unit(0.5, rates) == pytest.approx(1e-3)
    assert search.from_unit(0.99, optuna.distributions.CategoricalDistribution(["sgd", "nag"])) == "nag"
    assert search.from_unit(0.5, optuna.distributions.IntDistribution(1, 32, log=True)) == 6


@pytest.mark.parametrize("argv, message", [
    (["--profile", "1,abc"], "--profile 1,abc: 'abc' is neither a factor nor NxF"),
    (["--profile", "1,0"], "--profile: expected a positive number, got '0'"),
    (["--link", "fast"], "--link 'fast': give loopback or a communication ratio R > 0"),
    (["--trial-seeds", "0"], "--trial-seeds must be positive"),
    (["--schemes", "sync,diloco@ring", "--search-optimizer"], "--search-optimizer: no scheme of --schemes "
                                                                "sync,diloco@ring steps with --local-optimizer"),
])
def test_a_bad_cell_or_seed_count_is_one_line_before_anything_runs(argv, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        tune.parse(["--dataset", "mnist-5k", *argv])


def test_fast_only_is_sync_on_the_fastest_devices_alone_and_fast_colon_any_scheme_there():
    assert tune.scheme_run("fast-only", "1,1,20,1")[::3] == ("sync", "1,1,1")
    assert tune.scheme_run("fast:diloco@ring", "1,1,20,1") == ("diloco", {"collective": "ring"}, [], "1,1,1")
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
            "--holdout", "500", "--target", "0.6", "--max-time", "2", "--trials", "1", "--trial-seeds", "2",
            "-ld", logs, *more]


# Trials of 2 virtual seconds, as the studies run theirs: a search of two seeds costs 4.1 s of CPU here against 10.5 s
# in real time, which the search of a flag of a few names keeps.
VIRTUAL = ("--clock", "virtual", "--step-seconds", "0.05")


def run_tune(args, logs):
    with launcher(args, logs, subprogram=("tune",)) as proc:
        proc.wait(timeout=300)
        return proc.returncode, read_output(proc)


def study(logs, scheme="sync"):
    import optuna

    return optuna.load_study(study_name=f"{CELL}|{scheme}", storage=f"sqlite:///{logs}/studies.db")


@pytest.fixture(scope="module")
def first_trial(tmp_path_factory, train_only):
    logs = str(tmp_path_factory.mktemp("tune") / "logs")
    code, output = run_tune(tune_args(train_only, logs, *VIRTUAL), logs)
    assert code == 0, output
    return logs, output


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_study_writes_the_chosen_values_and_its_trial_runs_each_seed_on_held_out_training_data(first_trial):
    logs, output = first_trial
    entry = json.load(open(os.path.join(logs, "tuned.json")))["cells"][CELL]
    found = entry["schemes"]["sync"]

    assert found["trials"] == 1 and found["complete"] == 1 and set(found["flags"]) == {"--learning-rate"}
    assert found["seeds"] == [1000, 1001] and found["seed_runs"] == 2 and entry["holdout"] == 500
    command, = entry["commands"]
    assert entry["protocol"] == tuned.PROTOCOL and command.startswith("python launch.py tune ")
    assert "--trial-seeds 2" in command and entry["wall_seconds"] > 0
    assert 0 < found["trial_seconds"] <= entry["wall_seconds"] + 1  # the trial's own time, within the run's
    for trial in study(logs).trials:  # each trial ran both seeds, its objective their scores' median
        results = trial.user_attrs["results"]
        assert [r["seed"] for r in results] == [1000, 1001]
        assert trial.value == pytest.approx(sum(r["score"] for r in results) / 2)
        assert all(os.path.isdir(os.path.join(logs, "lenet_mnist-5k_1-2_loopback_iid", "sync",
                                              f"trial-{trial.number}", f"seed-{seed}")) for seed in (1000, 1001))
    assert os.path.exists(os.path.join(logs, "lenet_mnist-5k_1-2_loopback_iid", "figures", "sync.png"))
    assert "| sync |" in output and "tuned values:" in output


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # its checks do not depend on timing
def test_a_flag_of_a_few_names_is_searched_among_them(tmp_path, train_only):
    logs = str(tmp_path / "logs")
    args = tune_args(train_only, logs)
    args[args.index("sync")] = "esync"
    args[args.index("--trials") + 1] = "1"
    args[args.index("--trial-seeds") + 1] = "1"
    code, output = run_tune(args, logs)

    assert code == 0, output
    trial = study(logs, "esync").trials[0]  # a study's first trial of one seed: nothing it could be pruned against
    assert trial.state.name == "COMPLETE" and trial.params["outer_optimizer"] in ("sgd", "nag")
    assert f"--outer-optimizer {trial.params['outer_optimizer']}" in output
    assert f"outer_optimizer={trial.params['outer_optimizer']}" in output


def test_the_local_optimizer_is_searched_where_asked_and_a_scheme_takes_one_of_its_own_choosing():
    for mode in ("local", "esync", "fedavg"):
        assert search.with_optimizer(config.search_space(mode), mode)["local_optimizer"] == (
            "--local-optimizer", Choice(("sgd", "momentum", "adam")))
    for mode in ("diloco", "sync"):  # DiLoCo brings its Adam; SSGD's step is the servers'
        assert search.with_optimizer(config.search_space(mode), mode) == config.search_space(mode)


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # its checks do not depend on timing
def test_a_search_of_the_optimizer_runs_in_studies_of_its_own_and_the_map_takes_the_chosen_one(tmp_path, train_only):
    logs = str(tmp_path / "logs")
    args = tune_args(train_only, logs, *VIRTUAL, "--search-optimizer")
    args[args.index("sync")] = "local"
    args[args.index("--trial-seeds") + 1] = "1"
    code, output = run_tune(args, logs)

    assert code == 0, output
    trial = study(logs, "local" + search.OPTIMIZER_SEARCHED).trials[0]  # the first, of one seed: never pruned
    assert trial.state.name == "COMPLETE" and trial.params["local_optimizer"] in ("sgd", "momentum", "adam")
    found = json.load(open(os.path.join(logs, "tuned.json")))["cells"][CELL]["schemes"]["local"]
    assert found["space"]["--local-optimizer"] == "one of sgd, momentum, adam"
    assert f"--local-optimizer={trial.params['local_optimizer']}" in tuned.flags_of(found)


@pytest.mark.slow
@pytest.mark.beside_others
def test_the_same_command_again_runs_more_trials_of_the_study_none_repeated(first_trial, train_only):
    logs, _ = first_trial

    code, output = run_tune(tune_args(train_only, logs, *VIRTUAL), logs)
    trials = study(logs).trials

    assert code == 0, output
    assert len(trials) == 2 and all(t.user_attrs["seeds"] == [1000, 1001] for t in trials)
    assert len({t.params["learning_rate"] for t in trials}) == 2


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_trial_that_missed_on_a_seed_is_pruned_once_another_reached_the_target_on_every_seed(tmp_path, train_only):
    import optuna

    logs = str(tmp_path / "logs")
    os.makedirs(logs)
    # A finished trial that reached the target on both seeds: the real one, timed to 0.99, misses on its first.
    earlier = optuna.create_study(study_name=f"{CELL}|sync", storage=f"sqlite:///{logs}/studies.db")
    earlier.add_trial(optuna.trial.create_trial(
        params={"learning_rate": 0.001}, distributions={"learning_rate": optuna.distributions.FloatDistribution(
            1e-4, 3e-2, log=True)}, value=1.0, intermediate_values={0: 1.0, 1: 1.0},
        user_attrs={"results": [{"seed": s, "time": 1.0, "best": 0.7, "diverged": None, "score": 1.0}
                                for s in (1000, 1001)]}))

    code, output = run_tune(tune_args(train_only, logs, "--trials", "1", "--target", "0.99", *VIRTUAL), logs)
    trial = study(logs).trials[-1]
    folder = os.path.join(logs, "lenet_mnist-5k_1-2_loopback_iid", "sync", "trial-1")

    assert code == 0, output
    assert trial.state == optuna.trial.TrialState.PRUNED and "pruned after 1 seed(s)" in output
    assert os.path.isdir(os.path.join(folder, "seed-1000")) and not os.path.exists(os.path.join(folder, "seed-1001"))
    entry = json.load(open(os.path.join(logs, "tuned.json")))["cells"][CELL]["schemes"]["sync"]
    assert entry["chosen_trial"] == 0 and entry["robust"] and entry["largest_robust_rate"] == pytest.approx(0.001)


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_chosen_value_at_its_ranges_edge_searches_again_over_the_widened_range(tmp_path, train_only):
    import optuna

    logs = str(tmp_path / "logs")
    os.makedirs(logs)
    rates = config.search_space("sync")["learning_rate"][1]
    earlier = optuna.create_study(study_name=f"{CELL}|sync", storage=f"sqlite:///{logs}/studies.db")
    earlier.add_trial(optuna.trial.create_trial(  # the study's one trial, at the bottom edge of the rate's range
        params={"learning_rate": rates.low * 1.05}, value=1.0,
        distributions={"learning_rate": optuna.distributions.FloatDistribution(rates.low, rates.high, log=True)},
        intermediate_values={0: 1.0},
        user_attrs={"results": [{"seed": 1000, "time": 1.0, "best": 0.7, "diverged": None, "score": 1.0}]}))

    code, output = run_tune(tune_args(train_only, logs, "--until", "1", "--trial-seeds", "1", *VIRTUAL), logs)

    assert code == 0, output
    found = json.load(open(os.path.join(logs, "tuned.json")))["cells"][CELL]["schemes"]["sync"]
    first = found["widenings"][0]
    wider = f"--learning-rate {rates.widened(rates.low * 1.05).describe()}"
    assert first["ended"] == 1 and first["ranges"] == f"{wider} (from {rates.low:g} to {rates.high:g})"
    assert 1 <= len(found["widenings"]) <= tune.MAX_WIDENINGS and found["trials"] == 1 + len(found["widenings"])
    assert f"sync over {wider}" in output and "searched again over" in output
    assert os.path.isdir(os.path.join(logs, "lenet_mnist-5k_1-2_loopback_iid", "sync", "widened-1", "trial-0",
                                      "seed-1000"))


@pytest.mark.slow
@pytest.mark.beside_others
def test_a_storage_that_cannot_be_opened_is_one_line_and_exit_2_before_any_run(tmp_path, train_only):
    logs = str(tmp_path / "logs")
    result = subprocess.run([sys.executable, LAUNCH_PY, "tune", *tune_args(train_only, logs, "--storage",
                                                                            "nosuchdatabase://x")],
                            capture_output=True, text=True, env=launcher_env(), timeout=120)

    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--storage nosuchdatabase://x: cannot open it" in result.stderr
    assert not os.path.exists(os.path.join(logs, "lenet_mnist-5k_1-2_loopback_iid", "sync", "trial-0",
                                           "seed-1000.out"))


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


def test_a_scheme_searched_over_a_collective_runs_there_at_those_values_and_over_the_server_at_its_own(tmp_path):
    path = tuned_file(tmp_path)
    tuned.write(path, CELL, {"schemes": {"sync@ring": {"flags": {"--learning-rate": 0.01}}}})

    assert tuned.flags_for(path, CELL, ["sync", "esync"], "apply", "ring") == {
        "sync": ("--learning-rate=0.01",), "esync": ("--local-lr=0.002", "--global-lr=2.0")}
    assert tuned.flags_for(path, CELL, ["sync"], "apply", "ps") == {"sync": ("--learning-rate=0.004",)}


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


def test_a_cell_can_take_a_neighbours_values_and_says_so(tmp_path, capsys):
    path = str(tmp_path / "tuned.json")
    sync = {"flags": {"--learning-rate": 0.004}, "values": {"learning_rate": 0.004}, "complete": 8, "pruned": 0,
            "failed": 0}
    tuned.write(path, CELL, {"schemes": {"sync": sync}})
    argv = ["--schemes", "sync", "-n", "lenet", "--dataset", "mnist-5k", "--profile", "1,2", "--non-iid",
            "--holdout", "500", "-ld", str(tmp_path)]

    assert tune.run(argv + ["--values-of", CELL]) == 0
    assert tune.run(argv + ["--values-of", "lenet/mnist-5k/1,4/loopback/iid"]) == 2
    for searching in (["--trials", "20"], ["--until", "16"], ["--search-optimizer"]):
        with pytest.raises(UsageError, match=f"^{searching[0]}: --values-of {CELL} searches nothing"):
            tune.parse(argv + searching + ["--values-of", CELL])

    reused = tuned.read(path)["lenet/mnist-5k/1,2/loopback/niid"]
    assert reused["reused_from"] == CELL and reused["split"] == "niid" and reused["wall_seconds"] == 0
    assert parsed("--slowdown", "1,2", "--non-iid", "--tuned", path).tuned_flags["sync"] == ("--learning-rate=0.004",)
    printed = capsys.readouterr()
    assert f"not searched; the values of {CELL}" in printed.out
    assert "--values-of lenet/mnist-5k/1,4/loopback/iid: " in printed.err


def test_a_report_of_some_schemes_keeps_the_others_of_the_cell(tmp_path):
    path = tuned_file(tmp_path)

    tuned.write(path, CELL, {"schemes": {"async": {"flags": {"--learning-rate": 0.002}}}})

    assert set(tuned.read(path)[CELL]["schemes"]) == {"sync", "esync-apply", "async"}


def test_a_search_of_many_devices_is_headed_by_its_profiles_runs_of_equal_factors():
    many, few = "lenet/mnist-5k/" + ",".join(["1"] * 48 + ["117"] * 16) + "/loopback/iid", CELL
    entry = {"reused_from": few, "protocol": None, "schemes": {}}

    assert tuned.markdown(many, entry).startswith(
        f"### lenet/mnist-5k/48x1,16x117/loopback/iid: not searched; the values of {few}:")
    assert tuned.shown(few) == few


def test_a_scheme_whose_chosen_values_missed_on_a_seed_reads_as_no_stable_values_not_as_tuned():
    found = {"complete": 8, "pruned": 0, "failed": 0, "flags": {"--learning-rate": 0.002},
             "values": {"learning_rate": 0.002}, "chosen_results": [{"seed": 1000, "time": None, "best": 0.8}]}
    entry = {"protocol": tuned.PROTOCOL, "trial_seeds": [1000], "target": 0.85, "holdout": 5000, "max_time": 180.0,
             "schemes": {"sync": {**found, "robust": False}, "async": {**found, "robust": True}}}

    rows = {line.split(" | ")[0]: line for line in tuned.markdown(CELL, entry).splitlines() if line.startswith("| ")}
    assert "no stable values found (the best trial, --learning-rate 0.002, missed on a seed)" in rows["| sync"]
    assert "no stable values" not in rows["| async"] and "--learning-rate 0.002" in rows["| async"]


def test_the_trials_a_search_ran_before_are_counted_apart_from_those_an_interruption_left_unended():
    import optuna

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.add_trial(optuna.trial.create_trial(value=1.0, params={}, distributions={}))
    assert search.ended_before(study) == "1 trials ended before"

    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={}, distributions={}))
    assert search.ended_before(study) == "1 trials ended before (1 more interrupted or failed)"
