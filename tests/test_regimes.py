"""Communication regimes: links stated as a ratio of transfer to step (--comm-ratio), the experiment commands on
shaped links, the check that a run's links carried what it claims, and the regime map (`launch.py regimes`).

The real runs need root and iproute2, as tests/test_netns.py's; each names its namespaces with a prefix of its
own and removes whatever carries it when it ends, pass or fail.
"""
import glob
import json
import os
import signal
import subprocess
import sys

import pytest

from analysis import paper, regime_map
from analysis import summary as summaries
from launcher import comm_ratio, experiment, netns, runner
from launcher import paper as paper_command
from launcher import regime_map as regimes_command
from launcher.cluster import ROOT
from tests.test_launch import (LAUNCH_PY, PNG_SIGNATURE, launcher, launcher_env, read_output, recorded_pids,
                               still_running, wait_for)
from tests.test_netns import leftovers, prefix  # noqa: F401  (prefix: the fixture of a test's own namespaces)
from tests.test_netns import pytestmark as needs_netns
from training import runlog
from training.checks import UsageError
from training.files import write_json

# Its jobs' checks do not depend on timing: they run beside the in-process tests (tests/conftest.py).
pytestmark = pytest.mark.beside_others

DATA = ["-dd", os.path.join(ROOT, "data")]


# ----------------------------------------------------------------------------------------------
# The ratio and the rate


def test_the_rate_makes_one_transfer_of_the_model_last_r_fast_steps():
    rate = comm_ratio.rate_for(12, 0.03, 44.7e6)  # the paper's ResNet-18-v1 on a 1080Ti, R = 12

    assert rate == pytest.approx(0.993e9, rel=1e-3)  # about 1 Gbit/s
    assert 8 * 177704 / comm_ratio.rate_for(3, 0.008, 177704) == pytest.approx(3 * 0.008)


def test_the_fast_step_is_the_median_of_the_own_phases_after_the_warm_up():
    slow_start = [{"time": {"0": {"get_batch": 1.0, "forward and backward": 1.0}}}] * comm_ratio.PROBE_WARMUP
    steady = [{"time": {"0": {"get_batch": 0.001, "forward and backward": 0.006, "local update": 0.001,
                              "evaluation": 5.0}}},
              {"time": {"0": {"get_batch": 0.002, "forward and backward": 0.008, "local update": 0.002}}},
              {"time": {"0": {"get_batch": 0.001, "forward and backward": 0.007, "local update": 0.001}}}]

    assert comm_ratio.fast_step_of(slow_start + steady) == pytest.approx(0.009)


def test_the_probe_runs_the_fastest_worker_alone_with_the_workers_options_and_never_evaluates():
    run = experiment.parse(["--modes", "esync", "-n", "lenet", "--slowdown", "4,1,2", "--max-time", "5",
                            "--hosts", "netns", "--comm-ratio", "3", "--", "-b", "32", "--eval-seconds", "0.5",
                            "--local-optimizer", "adam"])

    argv = comm_ratio.without_eval_seconds(comm_ratio.probe_argv(run, "/tmp/probe"))

    assert argv[argv.index("-m") + 1] == "local" and argv[argv.index("--slowdown") + 1] == "1"
    assert argv[argv.index("-b") + 1] == "32" and "--eval-seconds" not in argv and argv[argv.index("-e") + 1] == "0"
    assert "--local-optimizer" not in argv  # ESync's: the standalone probe refuses it
    assert run.links_pending and run.worker_rate is None


def test_a_resolved_experiment_carries_the_rate_and_what_it_came_from(capsys):
    run = experiment.parse(["--modes", "sync", "-n", "lenet", "--slowdown", "1,4", "--max-time", "5",
                            "--hosts", "netns", "--comm-ratio", "4"])
    measured = {tuple(comm_ratio.probe_argv(run, "")): (0.01, 100_000)}

    resolved = comm_ratio.resolve(run, measured)

    assert resolved.worker_rate == resolved.ps_rate == 20_000_000 and not resolved.links_pending
    assert resolved.regime["transfer_seconds"] == pytest.approx(0.04)
    assert "--comm-ratio 4" in resolved.describe_links() and "20mbit" in resolved.describe_links()
    assert "20.000 Mbit/s" in capsys.readouterr().out


def test_a_given_parameter_server_rate_stays_beside_the_ratio():
    run = experiment.parse(["--modes", "sync", "-n", "lenet", "--slowdown", "1,4", "--max-time", "5",
                            "--hosts", "netns", "--comm-ratio", "4", "--ps-bandwidth", "1gbit"])

    resolved = comm_ratio.resolve(run, {tuple(comm_ratio.probe_argv(run, "")): (0.01, 100_000)})

    assert (resolved.worker_rate, resolved.ps_rate) == (20_000_000, 10 ** 9)


@pytest.mark.parametrize("args, message", [
    (["--comm-ratio", "0", "--hosts", "netns"], "give a positive ratio"),
    (["--comm-ratio", "-3", "--hosts", "netns"], "give a positive ratio"),
    (["--comm-ratio", "3"], "give --hosts netns too"),
    (["--comm-ratio", "3", "--hosts", "netns", "--bandwidth", "1gbit"], "leave out --bandwidth"),
])
def test_a_ratio_is_positive_on_shaped_links_and_alone(args, message):
    with pytest.raises(UsageError, match=message):
        experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", *args])


def test_the_link_options_are_handed_on_as_given():
    parser = paper_command.build_parser()
    ns = parser.parse_args(["--hosts", "netns", "--comm-ratio", "12", "-s", "2", "--netns-prefix", "p-"])

    handed = experiment.passed_on(ns)

    run = experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", *handed])
    assert (run.hosts, run.comm_ratio, run.num_servers, run.netns_prefix) == ("netns", 12.0, 2, "p-")


# ----------------------------------------------------------------------------------------------
# What the links carried


def link(rate, rx, tx):
    return {"rate_bps": rate, "rx_bytes": rx, "tx_bytes": tx}


def test_links_within_their_rate_that_carried_the_job_pass():
    report = {"seconds": 10.0, "links": {"ps": link(8e6, 9.5e6, 9.9e6), "w0": link(8e6, 5e6, 5e6)}}

    assert netns.link_problems(report) == []


def test_a_worker_link_without_traffic_means_the_run_did_not_cross_it():
    report = {"seconds": 10.0, "links": {"ps": link(8e6, 5e6, 5e6), "w0": link(8e6, 5e6, 5e6),
                                         "w1": link(8e6, 300, 200)}}

    problems = netns.link_problems(report)

    assert len(problems) == 1 and problems[0].startswith("w1 carried 300 bytes in and 200 out")
    assert netns.link_problems(report, worker_links=False) == []  # the standalone mode sends nothing


def test_a_link_that_carried_more_than_its_rate_allows_is_named():
    allowed = 1e6 / 8 * 10 * netns.RATE_SLACK + netns.burst_bytes(1e6)
    report = {"seconds": 10.0, "links": {"w0": link(1e6, allowed + 1, allowed - 1)}}

    assert netns.link_problems(report) == [f"w0 received {allowed + 1} bytes in 10.0 s, more than its 1e+06 bit/s "
                                           "allow"]


class FixedMeter:
    def __init__(self, report):
        self.fixed = report

    def report(self):
        return dict(self.fixed)


def test_a_mode_whose_links_carried_nothing_fails_and_says_why(tmp_path, capsys):
    run = experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", "--hosts", "netns",
                            "--bandwidth", "8mbit"])
    idle = {"seconds": 5.0, "window_seconds": 2.0,
            "links": {name: {**link(8e6, 100, 100), "rx_bytes_per_s": 20, "tx_bytes_per_s": 20,
                             "peak_rx_bytes_per_s": 50, "peak_tx_bytes_per_s": 50} for name in ("ps", "w0", "w1")}}

    code = runner.report_links(run, "sync", "sync 1/1", FixedMeter(idle), str(tmp_path))

    assert code == 1
    assert "w0 carried 100 bytes in and 100 out" in capsys.readouterr().err
    recorded = json.load(open(tmp_path / "network.json"))
    assert len(recorded["problems"]) == 2 and recorded["links_described"].startswith("network namespaces")


# ----------------------------------------------------------------------------------------------
# Table 1's claims about the rivals


def test_a_rival_is_later_where_it_reached_the_target_after_esync_or_never():
    assert paper.later_than([3.0, None, 1.0, None], [2.0, 5.0, 2.0, None]) == {"later": 2, "of": 3}


# ----------------------------------------------------------------------------------------------
# The regime map: its grid, the winner of a cell, runs that failed or never reached the target


def parse_regimes(*argv):
    return regimes_command.parse(["-ld", "runs", *argv])


def test_the_grid_runs_every_scheme_alone_in_every_cell_repeat_by_repeat():
    ns, plan, runs = parse_regimes("--links", "loopback,3", "--profiles", "1,1,4/1,2", "--splits", "iid,niid",
                                   "--schemes", "sync,esync-plan", "--repeats", "2", "--", "-b", "32")

    assert len(runs) == 2 * 2 * 2 * 2 * 2
    first, last = runs[0][2], runs[-1][2]
    assert (first.modes, first.hosts, first.slowdowns, first.non_iid, first.seed) == (
        ("sync",), "local", ("1", "1", "4"), False, 0)
    assert (last.modes, last.esync_policy, last.hosts, last.comm_ratio, last.non_iid, last.seed) == (
        ("esync",), "plan", "netns", 3.0, True, 1)
    assert runs[-1][1] == os.path.join(ns.log_dir, "R3", "1-2", "niid", "repeat-2", "esync-plan")
    assert last.worker_args[-2:] == ("-b", "32") and "--eval-seconds" in last.worker_args
    assert plan["links"] == ["loopback", 3.0] and plan["schemes"] == ["sync", "esync-plan"]


@pytest.mark.parametrize("argv, message", [
    (["--links", "loopback,0"], "must be positive"),
    (["--links", "fast"], "give loopback or a communication ratio"),
    (["--links", "3,3"], "names an entry twice"),
    (["--profiles", "1,0.5"], "must be >= 1"),
    (["--splits", "both"], "give iid, niid or both"),
    (["--schemes", "local"], "not a cluster mode"),
    (["--schemes", "esync-greedy"], "has no policy 'greedy'"),
    (["--repeats", "0"], "must be positive"),
    (["--target", "85"], "not an accuracy"),
    (["--", "-m", "sync"], "set by the launcher"),
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
    with pytest.raises(UsageError, match="another max_time; only --repeats may differ"):
        regimes_command.parse([*grid, "--max-time", "20", "--resume"])
    with pytest.raises(UsageError, match="also has esync: --schemes may add schemes"):
        regimes_command.parse([*grid[:-1], "sync", "--resume"])
    ok, failed, cut_short = (folder for _, folder, _ in runs[:3])
    for folder, status in ((ok, {"exit_code": 0}), (failed, {"exit_code": 1})):
        os.makedirs(folder)
        write_json(os.path.join(folder, regime_map.STATUS_FILE), status)
    assert [regimes_command.done_before(f) for f in (ok, failed, cut_short)] == [True, False, False]


def numbers(reached, mean, repeats=2):
    times = [mean] * reached + [None] * (repeats - reached)
    return {"reached": reached, "time_to_target": paper.statistics_of(times)}


def test_the_winner_reached_the_target_most_often_then_soonest():
    cell = {"async": numbers(2, 4.0), "esync": numbers(2, 2.0), "sync": numbers(1, 1.0), "fedavg": numbers(0, None)}

    winner, relative = regime_map.rank(cell)

    assert winner == "esync"
    assert relative == {"esync": 1.0, "async": 2.0, "sync": 0.5}
    assert regime_map.rank({"sync": numbers(0, None)}) == (None, {})


def write_run(log_dir, plan, link, profile, split, repeat, scheme, code, accuracies=None):
    folder = regime_map.run_dir(log_dir, link, profile, split, repeat, scheme)
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, regime_map.STATUS_FILE), {"exit_code": code})
    if accuracies is None:
        return
    mode, _ = regime_map.mode_of(scheme)
    mode_dir = os.path.join(folder, plan["network"], runlog.run_folder(mode, non_iid=split == "niid"))
    os.makedirs(mode_dir)
    points = [[i + 1, float(i + 1), a] for i, a in enumerate(accuracies)]
    summary = {"mode": mode, "accuracy_device": "n/cpu-rank0", "devices": {"n": {"cpu-rank0": {
        "accuracy_points": points}}}, "cluster_throughput": 1000.0, "traffic_mb_per_s": 2.0,
        "final_accuracy": accuracies[-1], "links": "loopback (no link limit)"}
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
    text, paths = regime_map.write(result, log_dir)

    cell = result["cells"][0]
    assert cell["winner"] == "esync"
    outcomes = {s: regime_map.outcome(n) for s, n in cell["schemes"].items()}
    assert outcomes == {"sync": "never", "async": "failed (1 of 1)", "esync": "2.0 s", "fedavg": "not run"}
    assert cell["schemes"]["esync"]["efficiency"]["mean"] == pytest.approx(0.5)
    assert cell["schemes"]["esync"]["bytes_per_sample"]["mean"] == pytest.approx(2000.0)
    assert cell["schemes"]["async"]["samples_per_s"]["mean"] is None
    assert "| 1,4 | **ESync** 2.0 s |" in text and "| 1,4 | loopback | Async | failed (1 of 1) |" in text
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

    text, _ = regime_map.write(regime_map.build(log_dir), log_dir, figures=False)

    assert "| 1,4 | none reached the target; closest ESync at 0.800 |" in text
    plan["links"] = [12.0, 3.0]
    write_json(os.path.join(log_dir, regime_map.PLAN_FILE), plan)
    assert "| 1,4 | none reached the target; closest ESync at 0.800 | not run |" in regime_map.format_report(
        regime_map.build(log_dir))


def test_the_report_without_a_plan_says_where_it_looked(tmp_path):
    with pytest.raises(regime_map.RegimeMapError, match="no regimes-plan.json under"):
        regime_map.build(str(tmp_path))


# ----------------------------------------------------------------------------------------------
# Bad input from the command line: one line, exit 2, nothing started


@pytest.mark.parametrize("subprogram, args, message", [
    ("paper", ["--comm-ratio", "3"], "give --hosts netns too"),
    ("paper", ["--hosts", "netns", "--comm-ratio", "0"], "give a positive ratio"),
    ("paper", ["--hosts", "netns", "--comm-ratio", "3", "--bandwidth", "10mbit"], "leave out --bandwidth"),
    ("regimes", ["--links", "loopback,-1"], "must be positive"),
    ("regimes", ["--comm-ratio", "3"], "unrecognized arguments: --comm-ratio"),
    ("regimes", ["--repeat", "3"], "unrecognized arguments: --repeat"),  # no abbreviations: it would start a map
    ("sweep", ["-l", "0.1,0.2", "--slowdown", "1,2", "--max-time", "1", "--comm-ratio", "3"], "--hosts netns"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, subprogram, args, message):
    argv = [sys.executable, LAUNCH_PY, subprogram, *args, "-ld", str(tmp_path / "logs")]

    result = subprocess.run(argv, cwd=ROOT, env=launcher_env(), capture_output=True, text=True, timeout=60)

    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not os.path.exists(tmp_path / "logs")


@needs_netns
@pytest.mark.parametrize("command", [
    ["regimes", "--links", "3", "--profiles", "1,2", "--schemes", "sync", "--repeats", "1"],
    ["paper", "--hosts", "netns", "--comm-ratio", "3", "--slowdown", "1,2", "--modes", "sync", "--repeats", "1"],
])
def test_without_root_the_experiment_commands_refuse_in_one_line_before_anything_starts(tmp_path, prefix, command):
    os.chmod(tmp_path, 0o777)
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, LAUNCH_PY, *command,
            "--netns-prefix", prefix, "-ld", str(tmp_path / "logs"), *DATA]

    result = subprocess.run(argv, cwd=ROOT, env=launcher_env(), capture_output=True, text=True, timeout=60)

    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "needs root" in result.stderr, result.stderr
    assert netns.namespaces(prefix) == [] and not glob.glob(str(tmp_path / "logs" / "*.json"))


# ----------------------------------------------------------------------------------------------
# On shaped links, for real


def assert_links_follow_the_ratio(network_file, ratio):
    """The rate is the ratio's, and the kernel counted traffic on every worker link within that rate."""
    with open(network_file) as f:
        record = json.load(f)
    regime = record["regime"]
    assert regime["comm_ratio"] == ratio and record["problems"] == []
    rate = comm_ratio.rate_for(ratio, regime["fast_step_seconds"], regime["model_bytes"])
    assert regime["rate_bps"] == rate and 0.001 < regime["fast_step_seconds"] < 1.0
    for name, carried in record["links"].items():
        assert carried["rate_bps"] == rate, name
        for direction in ("rx", "tx"):
            assert carried[f"{direction}_bytes_per_s"] <= rate / 8, (name, carried)
            window = record["window_seconds"]
            assert carried[f"peak_{direction}_bytes_per_s"] <= 1.03 * rate / 8 + netns.burst_bytes(rate) / window
            if name.startswith("w"):
                assert carried[f"{direction}_bytes"] > regime["model_bytes"], (name, carried)
    return record


@needs_netns
@pytest.mark.slow
def test_the_paper_command_runs_on_links_set_by_the_ratio_and_names_them(tmp_path, prefix):
    logs = str(tmp_path / "logs")
    args = ["--repeats", "1", "--max-time", "1", "--slowdown", "1,2", "--modes", "sync", *DATA,
            "--hosts", "netns", "--comm-ratio", "4", "--netns-prefix", prefix, "--netns-subnet", "10.213.97.0/24"]

    with launcher(args, logs, subprogram=["paper"]) as proc:
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    assert output.count("links: --comm-ratio 4:") == 1  # one measurement for every run of the command
    records = [assert_links_follow_the_ratio(os.path.join(logs, "repeat-1", "lenet", folder, "processes",
                                                          "network.json"), 4.0) for folder in ("sync", "sync-niid")]
    assert records[0]["regime"] == records[1]["regime"]
    table = open(os.path.join(logs, "lenet", paper.TABLE_FILE)).read()
    assert f"Links: {records[0]['links_described']}." in table and "--comm-ratio 4" in table
    for figure in glob.glob(os.path.join(logs, "lenet", "figures", "*.png")):
        assert open(figure, "rb").read(8) == PNG_SIGNATURE
    assert len(glob.glob(os.path.join(logs, "lenet", "figures", "*.png"))) == 3
    assert leftovers(prefix) == [] and still_running(recorded_pids(logs)) == []


@needs_netns
@pytest.mark.slow
def test_the_regime_map_fills_every_cell_from_real_runs_and_redraws_from_the_logs(tmp_path, prefix):
    logs = str(tmp_path / "logs")
    args = ["--links", "loopback,4", "--profiles", "1,2", "--splits", "iid", "--schemes", "sync,esync-plan",
            "--repeats", "1", "--max-time", "1", "--limit-seconds", "1", *DATA, "--netns-prefix", prefix,
            "--netns-subnet", "10.213.98.0/24"]

    with launcher(args, logs, subprogram=["regimes"]) as proc:
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    result = json.load(open(os.path.join(logs, regime_map.RESULTS_FILE)))
    assert [(c["link"], c["profile"]) for c in result["cells"]] == [("loopback", "1,2"), (4.0, "1,2")]
    limit = sum(json.load(open(os.path.join(logs, regime_map.LIMITS_FILE)))["1,2"])
    for cell in result["cells"]:
        assert cell["limit_samples_per_s"] == pytest.approx(limit)
        for scheme, n in cell["schemes"].items():
            assert (n["failed"], n["not_run"], n["samples_per_s"]["n"]) == (0, 0, 1), (cell["link"], scheme)
            assert n["efficiency"]["mean"] == pytest.approx(n["samples_per_s"]["mean"] / limit)
    for scheme in ("sync", "esync-plan"):
        shaped = os.path.join(regime_map.run_dir(logs, 4.0, "1,2", "iid", 1, scheme), "lenet",
                              regime_map.mode_of(scheme)[0], "processes", "network.json")
        assert_links_follow_the_ratio(shaped, 4.0)
    table = open(os.path.join(logs, regime_map.TABLE_FILE)).read()
    assert table.count("| 1,2 | loopback |") == table.count("| 1,2 | R = 4 |") == 2
    assert open(os.path.join(logs, "regimes-iid.png"), "rb").read(8) == PNG_SIGNATURE
    assert leftovers(prefix) == [] and still_running(recorded_pids(logs)) == []

    os.unlink(os.path.join(logs, regime_map.TABLE_FILE))
    again = subprocess.run([sys.executable, LAUNCH_PY, "regimes", "--report-only", "-ld", logs], cwd=ROOT,
                           env=launcher_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and open(os.path.join(logs, regime_map.TABLE_FILE)).read() == table

    resumed = subprocess.run([sys.executable, LAUNCH_PY, "regimes", *args, "--resume", "-ld", logs], cwd=ROOT,
                             env=launcher_env(), capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.count("done before, kept") == 4 and "(measured before)" in resumed.stdout
    assert open(os.path.join(logs, regime_map.TABLE_FILE)).read() == table


@pytest.mark.slow
def test_failed_runs_are_recorded_the_map_goes_on_and_shows_them(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--links", "loopback", "--profiles", "1,2", "--splits", "iid", "--schemes", "sync,esync",
            "--repeats", "1", "--max-time", "20", "--limit-seconds", "1", *DATA]
    env = dict(launcher_env(), ESYNC_INJECT_FAULT="worker:training:raise:after=3:rank=1")

    with launcher(args, logs, env=env, subprogram=["regimes"]) as proc:
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 1, output
    assert "2 of 2 runs failed" in output
    table = open(os.path.join(logs, regime_map.TABLE_FILE)).read()
    assert "| 1,2 | loopback | Sync | failed (1 of 1) |" in table and "| 1,2 | loopback | ESync | failed (1 of 1) |" in table
    assert still_running(recorded_pids(logs)) == []


@needs_netns
@pytest.mark.slow
def test_an_interrupted_regime_map_leaves_no_namespace_or_process(tmp_path, prefix):
    logs = str(tmp_path / "logs")
    args = ["--links", "4", "--profiles", "1,2", "--splits", "iid", "--schemes", "sync", "--repeats", "1",
            "--max-time", "120", "--limit-seconds", "1", *DATA, "--netns-prefix", prefix,
            "--netns-subnet", "10.213.99.0/24"]

    with launcher(args, logs, subprogram=["regimes"]) as proc:
        wait_for(lambda: glob.glob(os.path.join(logs, "R4", "*", "*", "*", "*", "lenet", "sync", "*", "*",
                                                "iter-3.txt")), 120, "iteration logs")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)

        assert proc.returncode == 130, read_output(proc)
        assert still_running(recorded_pids(logs)) == []
        assert leftovers(prefix) == []
