"""The regime map (`launch.py regimes`): its grid, the winner of a cell, runs that failed or never reached the
target, and its report."""
import os

import pytest

from analysis import regime_figures, regime_map
from analysis import scheme_names
from analysis import summary as summaries
from launcher.studies import regime_map as regimes_command
from training import runlog
from training.checks import UsageError
from training.files import write_json

# Its jobs' checks do not depend on timing: they run beside the in-process tests (tests/conftest.py).
pytestmark = pytest.mark.beside_others


# ----------------------------------------------------------------------------------------------
# The regime map: its grid, the winner of a cell, runs that failed or never reached the target


def parse_regimes(*argv):
    return regimes_command.parse(["-ld", "runs", *argv])



def written(result, log_dir):
    """What `launch.py regimes` writes: the map's files and its heatmaps."""
    text, paths = regime_map.write(result, log_dir)
    return text, paths + regime_figures.draw(result, log_dir)

def test_the_grid_runs_every_scheme_alone_in_every_cell_repeat_by_repeat():
    ns, plan, runs = parse_regimes("--links", "loopback,3", "--profiles", "1,1,4/1,2", "--splits", "iid,niid",
                                   "--schemes", "sync,esync-plan", "--repeats", "2", "--", "-b", "32")

    assert len(runs) == 2 * 2 * 2 * 2 * 2
    first, last = runs[0][2], runs[-1][2]
    assert (first.modes, first.cluster.hosts, first.cluster.slowdowns, first.non_iid, first.seed) == (
        ("sync",), "local", ("1", "1", "4"), False, 0)
    assert (last.modes, last.esync_policy, last.cluster.hosts, last.cluster.comm_ratio, last.non_iid, last.seed) == (
        ("esync",), "plan", "netns", 3.0, True, 1)
    assert runs[-1][1] == os.path.join(ns.log_dir, "R3", "1-2", "niid", "repeat-2", "esync-plan")
    assert last.worker_args == ("-b", "32") and last.snapshot_seconds == 0.5 and last.dataset == "fashion-mnist"
    assert plan["links"] == ["loopback", 3.0] and plan["schemes"] == ["sync", "esync-plan"]


def test_fast_only_trains_on_the_fast_devices_at_its_values_tuned_in_the_whole_profiles_cell(tmp_path):
    from analysis import tuned

    path = str(tmp_path / "tuned.json")
    tuned.write(path, "lenet/fashion-mnist/1,1,4/loopback/iid",
                {"schemes": {"sync": {"flags": {"--learning-rate": 0.004}},
                             "fast-only": {"flags": {"--learning-rate": 0.008}},
                             "fast:diloco@ring": {"flags": {"--sync-interval": 40}}}})
    ns, _, runs = parse_regimes("--links", "loopback", "--profiles", "1,1,4", "--splits", "iid", "--schemes",
                                "sync,fast-only,fast:diloco@ring", "--repeats", "1", "--tuned", path, "--", "-b", "32")

    (_, sync_folder, sync), (_, folder, fast), (_, _, diloco) = runs
    assert (diloco.modes, diloco.cluster.slowdowns, diloco.cluster.collective) == (("diloco",), ("1", "1"), "ring")
    assert diloco.worker_args[0] == "--sync-interval=40" and diloco.tuned_flags == {}
    assert (fast.modes, fast.cluster.slowdowns) == (("sync",), ("1", "1")) and sync.cluster.slowdowns == ("1", "1", "4")
    assert folder == os.path.join(ns.log_dir, "loopback", "1-1-4", "iid", "repeat-1", "fast-only")
    assert fast.log_dir == folder  # where the map reads it back
    assert fast.worker_args == ("--learning-rate=0.008", "-b", "32") and fast.tuned_flags == {}
    assert sync.tuned_flags == {"sync": ("--learning-rate=0.004",)}


def test_a_named_configuration_runs_with_its_policy_and_flags_before_the_workers_own():
    from launcher import experiment
    from training import esync_variants

    _, _, runs = parse_regimes("--links", "loopback,12", "--profiles", "1,4", "--splits", "niid",
                               "--schemes", "esync-apply-drift", "--netns-subnet", "10.9.0.0/24", "--", "-b", "32")

    loopback, shaped = runs[0][2], runs[1][2]
    assert loopback.esync_policy == shaped.esync_policy == "apply"
    assert loopback.worker_args == shaped.worker_args == (*esync_variants.DRIFT_CORRECTION, "-b", "32")
    assert (shaped.cluster.hosts, shaped.cluster.comm_ratio) == ("netns", 12.0)
    assert shaped.cluster.netns_subnet == "10.9.0.0/24"
    assert (loopback.cluster.hosts, loopback.cluster.comm_ratio) == ("local", None)
    # the namespaces' options: shaped runs only
    assert loopback.cluster.netns_subnet == experiment.options().netns_subnet


@pytest.mark.parametrize("argv, message", [
    (["--links", "loopback,0"], "must be positive"),
    (["--links", "fast"], "give loopback or a communication ratio"),
    (["--links", "3,3"], "names an entry twice"),
    (["--profiles", "1,0.5"], "must be >= 1"),
    (["--splits", "both"], "give iid, niid or both"),
    (["--schemes", "hogwild"], "not a cluster mode"),
    (["--schemes", "esync-greedy"], "has no configuration 'greedy'"),
    (["--schemes", "esync-apply@mesh"], "no collective 'mesh'"),
    (["--schemes", "async@ring"], "only a synchronous mode sums over a collective"),
    (["--schemes", "fast:async@ring"], "only a synchronous mode sums over a collective"),
    (["--schemes", "fast:local"], "not a cluster mode"),
    (["--repeats", "0"], "must be positive"),
    (["--target", "85"], "not an accuracy"),
    (["--higher-targets", "0.75"], "must be above --target 0.8"),
    (["--higher-targets", "high"], "give accuracies"),
    (["--", "-m", "sync"], "set by the launcher"),
    (["--schemes", "sync,fast-only", "--", "--proximal", "0.1"], r"--proximal after --: no mode of the command \(sync\)"),
    (["--links", "loopback", "--step-seconds", "0.01"], "a number of seconds is charged on --clock virtual"),
    (["--links", "loopback", "--ps-bandwidth", "1gbit"], "--ps-bandwidth 1gbit: --links loopback has loopback cells "
                                                         "only, where it sets nothing"),
    (["--links", "loopback", "--netns-prefix", "m-"], "--netns-prefix m-: --links loopback has loopback cells only"),
    (["--links", "loopback", "--clock", "virtual", "--step-seconds", "0.01", "--link-slowdown", "1,3"],
     "--link-slowdown 1,3: --links loopback has loopback cells only"),
    (["--links", "loopback", "--clock", "virtual", "--step-seconds", "0.01", "--ps-bandwidth", "6x"],
     "--ps-bandwidth 6x: --links loopback"),
])
def test_bad_grids_are_refused_before_anything_runs(argv, message):
    with pytest.raises(UsageError, match=message):
        parse_regimes(*argv)


def test_resuming_keeps_only_the_runs_that_ended_well_of_the_same_grid(tmp_path):
    grid = ["-ld", str(tmp_path), "--links", "loopback", "--profiles", "1,2", "--schemes", "sync,esync"]
    with pytest.raises(UsageError, match="no regimes-plan.json"):
        regimes_command.parse([*grid, "--resume"])
    ns, plan, runs = regimes_command.parse(grid)
    write_json(os.path.join(str(tmp_path), regime_map.PLAN_FILE), plan)

    regimes_command.parse([*grid, "--repeats", "5", "--resume"])
    regimes_command.parse([*grid[:-1], "sync,esync,backup", "--resume"])  # a scheme added to the map
    regimes_command.parse([*grid, "--higher-targets", "0.85,0.9", "--resume"])  # the report alone reads them
    with pytest.raises(UsageError, match="another max_time; only --repeats and --higher-targets may differ"):
        regimes_command.parse([*grid, "--max-time", "20", "--resume"])
    with pytest.raises(UsageError, match="also has esync: --schemes may add schemes"):
        regimes_command.parse([*grid[:-1], "sync", "--resume"])
    ok, failed, cut_short = (folder for _, folder, _ in runs[:3])
    for folder, status in ((ok, {"exit_code": 0}), (failed, {"exit_code": 1})):
        os.makedirs(folder)
        write_json(os.path.join(folder, regime_map.STATUS_FILE), status)
    assert [regimes_command.done_before(f) for f in (ok, failed, cut_short)] == [True, False, False]


def numbers(times, budget=10.0):
    return {"reached": sum(t is not None for t in times),
            "censored_times": [[t, True] if t is not None else [budget, False] for t in times]}


def test_the_leader_has_the_lowest_mean_time_each_miss_counted_at_the_budget():
    cell = {"async": numbers([4.0, 4.0]), "esync": numbers([2.0, 2.0]), "sync": numbers([1.0, None]),
            "fedavg": numbers([None, None])}

    leader, relative = regime_map.rank(cell)

    assert leader == "esync"  # sync's 1 s and a miss at the 10 s budget: 5.5 s
    assert relative == {"esync": 1.0, "async": 2.0, "sync": 2.75}
    assert regime_map.rank({"sync": numbers([None, None])}) == (None, {})


def test_a_run_that_diverged_early_is_a_miss_at_the_budget_not_a_fast_run():
    def run(seconds, accuracy, diverged=None):
        points = [[1, seconds, accuracy]]
        return {"status": "ok", "summary": {"elapsed_time": seconds, "diverged": diverged,
                                            "accuracy_device": "n/cpu-rank0",
                                            "devices": {"n": {"cpu-rank0": {"accuracy_points": points}}}}}

    runs = {"local": [run(3.0, 0.8), run(1.5, 0.1, "the test loss is nan at step 9")],
            "sync": [run(4.0, 0.8), run(4.5, 0.8)]}

    cell = regime_map.cell_at(runs, None, 0.8, budget=10.0)

    assert cell["schemes"]["local"]["censored_times"] == [[3.0, True], [10.0, False]]
    assert cell["schemes"]["local"]["diverged"] == 1 and cell["leader"] == "sync"


def write_run(log_dir, plan, link, profile, split, repeat, scheme, code, accuracies=None):
    folder = regime_map.run_dir(log_dir, link, profile, split, repeat, scheme)
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, regime_map.STATUS_FILE), {"exit_code": code})
    if accuracies is None:
        return
    mode, _ = scheme_names.mode_of(scheme)
    mode_dir = os.path.join(folder, plan["network"], runlog.run_folder(mode, non_iid=split == "niid"))
    os.makedirs(mode_dir)
    points = [[i + 1, float(i + 1), a] for i, a in enumerate(accuracies)]
    summary = {"mode": mode, "accuracy_device": "n/cpu-rank0", "devices": {"n": {"cpu-rank0": {
        "accuracy_points": points}}}, "cluster_throughput": 1000.0, "traffic_mb_per_s": 2.0,
        "final_accuracy": accuracies[-1], "links": "loopback (no link limit)", "elapsed_time": float(len(accuracies))}
    write_json(summaries.summary_path(os.path.dirname(mode_dir), os.path.basename(mode_dir)), summary)


def test_failed_and_never_reaching_runs_show_as_such_not_as_zero(tmp_path):
    log_dir = str(tmp_path)
    plan = {"network": "lenet", "dataset": "mnist-5k", "links": ["loopback"], "profiles": ["1,4"], "splits": ["iid"],
            "schemes": ["sync", "async", "esync", "fedavg"], "repeats": 1, "seed": 0, "max_time": 5.0,
            "target": 0.85, "eval_seconds": 0.5}
    write_json(os.path.join(log_dir, regime_map.PLAN_FILE), plan)
    write_json(os.path.join(log_dir, regime_map.LIMITS_FILE), {"1,4": [1500.0, 500.0]})
    write_run(log_dir, plan, "loopback", "1,4", "iid", 1, "sync", 0, [0.5, 0.7])
    write_run(log_dir, plan, "loopback", "1,4", "iid", 1, "async", 1)
    write_run(log_dir, plan, "loopback", "1,4", "iid", 1, "esync", 0, [0.8, 0.9])

    result = regime_map.build(log_dir)
    text, paths = written(result, log_dir)

    cell = result["cells"][0]
    assert cell["leader"] == "esync" and cell["winner"] is None  # one repeat has no spread to name a winner by
    assert cell["tied"] == ["esync", "sync"]
    outcomes = {s: regime_map.outcome(n) for s, n in cell["schemes"].items()}
    assert outcomes == {"sync": "never", "async": "failed (1 of 1)", "esync": "2.0 s", "fedavg": "not run"}
    assert cell["schemes"]["esync"]["efficiency"]["mean"] == pytest.approx(0.5)
    assert cell["schemes"]["esync"]["bytes_per_sample"]["mean"] == pytest.approx(2000.0)
    assert cell["schemes"]["async"]["samples_per_s"]["mean"] is None
    assert "| 1,4 | tie: **ESync** 2.0 s, Sync never |" in text and "| 1,4 | loopback | Async | failed (1 of 1) |" in text
    assert [os.path.basename(p) for p in paths] == ["regimes.json", "regimes.md", "regimes-iid.png"]


def test_a_cell_no_scheme_finished_in_names_the_closest_by_final_accuracy(tmp_path):
    log_dir = str(tmp_path)
    plan = {"network": "lenet", "dataset": "mnist-5k", "links": [12.0], "profiles": ["1,4"], "splits": ["iid"],
            "schemes": ["sync", "esync", "async"], "repeats": 1, "seed": 0, "max_time": 5.0, "target": 0.85,
            "eval_seconds": 0.5}
    write_json(os.path.join(log_dir, regime_map.PLAN_FILE), plan)
    write_run(log_dir, plan, 12.0, "1,4", "iid", 1, "sync", 0, [0.3, 0.5])
    write_run(log_dir, plan, 12.0, "1,4", "iid", 1, "esync", 0, [0.6, 0.8])
    write_run(log_dir, plan, 12.0, "1,4", "iid", 1, "async", 1)

    text, _ = regime_map.write(regime_map.build(log_dir), log_dir)

    # one repeat has no spread: the closest ties with every scheme that has a final accuracy
    assert "| 1,4 | none reached the target; closest, a tie: ESync at 0.800, Sync at 0.500 |" in text
    plan["links"] = [12.0, 3.0]
    write_json(os.path.join(log_dir, regime_map.PLAN_FILE), plan)
    assert "| 1,4 | none reached the target; closest, a tie: ESync at 0.800, Sync at 0.500 | not run |" in \
        regime_map.format_report(regime_map.build(log_dir))


@pytest.mark.parametrize("dcasgd_finals, expected", [
    ([0.70, 0.71, 0.69, 0.70, 0.70], "closest **ESync** at 0.800 ± 0.007"),                        # beyond the spread
    ([0.78, 0.83, 0.74, 0.80, 0.77], "closest, a tie: ESync at 0.800 ± 0.007, DCASGD at 0.784 ± 0.034"),  # within
])
def test_where_nobody_reached_the_target_the_closest_is_named_only_where_its_final_accuracy_leads_beyond_the_spread(
        tmp_path, dcasgd_finals, expected):
    log_dir = str(tmp_path)
    plan = {"network": "lenet", "dataset": "mnist-5k", "links": [12.0], "profiles": ["1,4"], "splits": ["iid"],
            "schemes": ["esync", "dcasgd", "sync"], "repeats": 5, "seed": 0, "max_time": 5.0, "target": 0.85,
            "eval_seconds": 0.5}
    write_json(os.path.join(log_dir, regime_map.PLAN_FILE), plan)
    for repeat, (esync, dcasgd, sync) in enumerate(zip([0.80, 0.81, 0.79, 0.80, 0.80], dcasgd_finals,
                                                       [0.3, 0.31, 0.29, 0.3, 0.3]), 1):
        for scheme, final in (("esync", esync), ("dcasgd", dcasgd), ("sync", sync)):
            write_run(log_dir, plan, 12.0, "1,4", "iid", repeat, scheme, 0, [0.1, final])

    text = regime_map.format_report(regime_map.build(log_dir))

    assert f"| 1,4 | none reached the target; {expected} |" in text


def test_the_report_without_a_plan_says_where_it_looked(tmp_path):
    with pytest.raises(regime_map.RegimeMapError, match="no regimes-plan.json under"):
        regime_map.build(str(tmp_path))


def test_a_runs_fast_step_is_read_against_the_probes():
    assert regime_map.compute_over_probe({"fast_compute_seconds": 0.012, "probe_compute_seconds": 0.010}) == \
        pytest.approx(1.2)
    assert regime_map.compute_over_probe({"fast_compute_seconds": 0.012, "probe_compute_seconds": None}) is None


def write_repeats(log_dir, plan, scheme, curves):
    for repeat, accuracies in enumerate(curves, start=1):
        write_run(log_dir, plan, "loopback", "1,4", "iid", repeat, scheme, 0, accuracies)


def five_repeats_of_esync_at_3_to_5_s(tmp_path):
    """A map of one cell, ESync and SSGD, 5 repeats of 12 s timed to 0.85, ESync's repeats written (3 to 5 s)."""
    log_dir = str(tmp_path)
    plan = {"network": "lenet", "dataset": "mnist-5k", "links": ["loopback"], "profiles": ["1,4"], "splits": ["iid"],
            "schemes": ["esync", "sync"], "repeats": 5, "seed": 0, "max_time": 12.0, "target": 0.85,
            "eval_seconds": 0.5}
    write_json(os.path.join(log_dir, regime_map.PLAN_FILE), plan)
    write_repeats(log_dir, plan, "esync", [curve_reaching(s) for s in (3, 4, 5, 3, 5)])
    return log_dir, plan


def curve_reaching(seconds, length=12):
    """Accuracies one per second that first reach 0.85 at `seconds`."""
    return [0.5] * (seconds - 1) + [0.9] * (length - seconds + 1)


@pytest.mark.parametrize("sync_seconds, winner, tied", [
    ((9, 10, 11, 9, 11), "esync", ["esync"]),         # 3 to 5 s against 9 to 11 s: the lead holds
    ((3, 6, 9, 2, 10), None, ["esync", "sync"]),      # 3 to 5 s against 2 to 10 s: within the spread
])
def test_a_cell_names_a_winner_only_where_its_lead_holds_beyond_the_repeats_spread(tmp_path, sync_seconds, winner,
                                                                                   tied):
    log_dir, plan = five_repeats_of_esync_at_3_to_5_s(tmp_path)
    write_repeats(log_dir, plan, "sync", [curve_reaching(s) for s in sync_seconds])

    result = regime_map.build(log_dir)
    text, paths = written(result, log_dir)

    cell = result["cells"][0]
    assert (cell["leader"], cell["winner"], cell["tied"]) == ("esync", winner, tied)
    assert ("| 1,4 | tie: **ESync**" in text) == (winner is None)
    assert regime_figures.heatmap_text(cell, "esync").startswith("best" if winner else "tie")
    assert os.path.exists(paths[-1])


def test_a_repeat_that_never_reached_the_target_counts_at_the_budget_or_its_training_time_if_longer(tmp_path):
    log_dir, plan = five_repeats_of_esync_at_3_to_5_s(tmp_path)
    write_repeats(log_dir, plan, "sync", [[0.5] * 12, [0.5] * 11, [0.5] * 13, [0.5] * 12, [0.5] * 3])

    cell = regime_map.build(log_dir)["cells"][0]

    assert cell["schemes"]["sync"]["censored_times"] == [[12.0, False], [12.0, False], [13.0, False],
                                                         [12.0, False], [12.0, False]]
    assert cell["winner"] == "esync"


def test_a_higher_target_has_its_own_winners_tables_and_heatmaps(tmp_path):
    log_dir = str(tmp_path)
    plan = {"network": "lenet", "dataset": "fashion-mnist", "links": ["loopback"], "profiles": ["1,4"],
            "splits": ["iid"], "schemes": ["esync", "sync"], "repeats": 5, "seed": 0, "max_time": 30.0,
            "target": 0.8, "targets": [0.8, 0.85], "eval_seconds": 0.5}
    write_json(os.path.join(log_dir, regime_map.PLAN_FILE), plan)
    # both reach 0.8 at 2-4 s (a tie); only ESync reaches 0.85, at 10-12 s (a lead that holds)
    write_repeats(log_dir, plan, "esync", [[0.5, 0.8] + [0.82] * (s - 3) + [0.86] * (30 - s + 1)
                                           for s in (10, 11, 12, 10, 12)])
    write_repeats(log_dir, plan, "sync", [[0.5] * (s - 1) + [0.81] * (30 - s + 1) for s in (2, 3, 4, 2, 4)])

    result = regime_map.build(log_dir)
    text, paths = written(result, log_dir)

    cell = result["cells"][0]
    assert (cell["winner"], cell["tied"]) == (None, ["esync", "sync"])
    higher = cell["at_higher_targets"]["0.85"]
    assert (higher["winner"], higher["schemes"]["sync"]["censored_times"]) == ("esync", [[30.0, False]] * 5)
    assert "## Time to 0.85, i.i.d. data" in text and "| 1,4 | **ESync** 11.0 ± 1.0 s |" in text
    assert sorted(os.path.basename(p) for p in paths if p.endswith(".png")) == ["regimes-iid-0.85.png",
                                                                               "regimes-iid.png"]


@pytest.mark.parametrize("alone, cluster, pays", [
    ([4.0, 4.5, 5.0, 4.2, 4.7], [10.0, 11.0, 12.0, 10.5, 11.5], "no"),
    ([10.0, 11.0, 12.0, 10.5, 11.5], [4.0, 4.5, 5.0, 4.2, 4.7], "yes"),
    ([4.0, 9.0, 14.0, 6.0, 11.0], [5.0, 8.0, 13.0, 7.0, 10.0], "cannot be told"),
    ([4.0, 4.5, 5.0], [10.0, 11.0, 12.0], "cannot be told"),  # three against three cannot go below p = 0.10
])
def test_each_cell_says_whether_the_cluster_pays_against_one_device_alone(alone, cluster, pays):
    def numbers(times):
        return {"reached": len(times), "censored_times": [[t, True] for t in times],
                "time_to_target": {"mean": sum(times) / len(times)}}

    cell = {"local": numbers(alone), "esync": numbers(cluster), "sync": numbers([30.0, 31.0, 32.0, 30.5, 31.5])}

    answer, test = regime_map.cluster_pays(cell)

    assert answer == pays
    assert set(test["adjusted_p_values"]) == {"esync", "sync"}  # each cluster scheme tested, Holm-corrected
    assert regime_map.cluster_pays({"esync": numbers(cluster)}) == (None, None)  # no device alone in the map


def test_fast_only_is_sync_on_the_profiles_fastest_devices():
    assert scheme_names.mode_of("fast-only") == ("sync", None)
    assert scheme_names.fastest_profile("1,1,1,1,20,20") == "1,1,1,1"
    assert scheme_names.mode_of("fast:esync-apply@ring") == ("esync", "apply")
    assert scheme_names.display("fast:diloco@ring") == "DiLoCo over ring allreduce on the fast devices alone"


def test_the_map_runs_one_device_alone_and_ssgd_on_the_fast_devices_beside_the_schemes(tmp_path):
    _, _, runs = regimes_command.parse(["--schemes", "esync,local,fast-only", "--profiles", "1,1,4", "--links",
                                        "loopback", "--splits", "iid", "--repeats", "1", "--max-time", "5", "-n",
                                        "lenet", "--dataset", "mnist-5k", "-ld", str(tmp_path)])

    planned = {os.path.basename(folder): (run.modes, run.cluster.slowdowns) for _, folder, run in runs}
    assert planned == {"esync": (("esync",), ("1", "1", "4")), "local": (("local",), ("1", "1", "4")),
                       "fast-only": (("sync",), ("1", "1"))}


def test_a_scheme_at_sharded_runs_over_a_parameter_server_per_worker_on_the_virtual_clock(tmp_path):
    _, _, runs = parse_regimes("--clock", "virtual", "--step-seconds", "0.03", "--links", "12", "--profiles",
                               "1,1,4", "--splits", "iid", "--schemes", "sync,sync@sharded,async@sharded,fast-only",
                               "--repeats", "1", "--ps-bandwidth", "2x")

    servers = {os.path.basename(folder): (run.cluster.num_servers, run.cluster.collective, run.cluster.ps_link)
               for _, folder, run in runs}
    assert servers == {"sync": (1, "ps", "2x"), "sync@sharded": (3, "ps", "2x"), "async@sharded": (3, "ps", "2x"),
                       "fast-only": (1, "ps", "2x")}
    _, _, runs = parse_regimes("--clock", "virtual", "--step-seconds", "0.03", "--links", "12", "--profiles", "1,4",
                               "--splits", "iid", "--schemes", "sync,local", "--repeats", "1", "-s", "2")
    assert [run.cluster.num_servers for _, _, run in runs] == [2, 1]  # one device alone has no servers
    assert scheme_names.display("esync-apply@sharded") == "ESync (apply) over a parameter server per worker"


def test_a_scheme_at_collective_sums_over_mpi_at_the_schemes_own_tuned_values(tmp_path):
    from analysis import tuned

    path = str(tmp_path / "tuned.json")
    tuned.write(path, "lenet/fashion-mnist/1,4/12/iid",
                {"schemes": {"esync-apply": {"flags": {"--local-lr": 0.004}}}})
    ns, _, runs = parse_regimes("--links", "12", "--profiles", "1,4", "--splits", "iid", "--schemes",
                                "esync-apply,esync-apply@ring", "--repeats", "1", "--tuned", path)

    (_, _, over_servers), (_, folder, over_ring) = runs
    assert (over_servers.cluster.collective, over_ring.cluster.collective) == ("ps", "ring")
    assert over_ring.esync_policy == "apply" and over_ring.tuned_flags == over_servers.tuned_flags == {
        "esync": ("--local-lr=0.004",)}
    assert folder == os.path.join(ns.log_dir, "R12", "1-4", "iid", "repeat-1", "esync-apply@ring")
    assert scheme_names.mode_of("esync-apply@ring") == ("esync", "apply")
    assert scheme_names.display("sync@butterfly") == "Sync over butterfly allreduce"
