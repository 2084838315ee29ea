"""Communication regimes from the command line: bad input refused in one line, and the experiment commands on
shaped links, for real.

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
from analysis import scheme_names
from launcher import comm_ratio, netns
from launcher.cluster import ROOT
from tests.test_launch import (LAUNCH_PY, PNG_SIGNATURE, launcher, launcher_env, read_output, recorded_pids,
                               still_running, wait_for)
from tests.test_netns import leftovers, prefix  # noqa: F401  (prefix: the fixture of a test's own namespaces)
from tests.test_netns import pytestmark as needs_netns

# Its jobs' checks do not depend on timing: they run beside the in-process tests (tests/conftest.py).
pytestmark = pytest.mark.beside_others

# The commands' default data, Fashion-MNIST, found where the tests put it (tests/conftest.py: tiny files in its
# layout, the shipped sample standing in)
DATA = []


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


@pytest.mark.long  # a paper run on shaped links, after a measured ratio
@needs_netns
@pytest.mark.slow
def test_the_paper_command_runs_on_links_set_by_the_ratio_and_names_them(tmp_path, prefix):
    logs = str(tmp_path / "logs")
    args = ["--repeats", "1", "--max-time", "1", "--slowdown", "1,2", "--modes", "sync", "--esync-variants", "", *DATA,
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


@pytest.mark.long  # a real-time map of every cell (virtual maps run in the default run)
@needs_netns
@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # its checks do not depend on timing: where the groups' lengths balance
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
            assert n["fast_compute_ms"]["n"] == 1 and n["fast_compute_ms"]["mean"] > 0
            # only a shaped link had a probe to set its rate by
            assert n["fast_compute_over_probe"]["n"] == (cell["link"] != "loopback"), (cell["link"], scheme)
    for scheme in ("sync", "esync-plan"):
        shaped = os.path.join(regime_map.run_dir(logs, 4.0, "1,2", "iid", 1, scheme), "lenet",
                              scheme_names.mode_of(scheme)[0], "processes", "network.json")
        assert_links_follow_the_ratio(shaped, 4.0)
    table = open(os.path.join(logs, regime_map.TABLE_FILE)).read()
    # each cell's two schemes in the detail table and in the higher target's (0.85) table
    assert table.count("| 1,2 | loopback |") == table.count("| 1,2 | R = 4 |") == 4
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
    cell = json.load(open(os.path.join(logs, regime_map.RESULTS_FILE)))["cells"][0]["schemes"]
    assert cell["sync"]["times_by_repeat"] == [None] and cell["sync"]["censored_times"] == []  # the seed's gap kept
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


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # a virtual clock's results do not depend on the machine's load
def test_a_scheme_at_a_collective_sums_over_it_and_aggregates_sooner_than_over_one_servers_link(tmp_path):
    logs = str(tmp_path / "logs")
    schemes = ("esync-apply", "esync-apply@ring")
    done = subprocess.run([sys.executable, LAUNCH_PY, "regimes", "--clock", "virtual", "--step-seconds", "0.05",
                           "--links", "12", "--profiles", "1,4", "--splits", "iid", "--schemes", ",".join(schemes),
                           "--repeats", "1", "--max-time", "2", "--snapshot-seconds", "0.5", "--higher-targets", "",
                           *DATA, "--no-figures", "-ld", logs], cwd=ROOT, env=launcher_env(), capture_output=True,
                          text=True, timeout=300)

    assert done.returncode == 0, done.stdout + done.stderr
    rounds = {}
    for scheme in schemes:
        workers = os.path.join(regime_map.run_dir(logs, 12.0, "1,4", "iid", 1, scheme), "lenet", "esync", "*",
                               "cpu-worker*")
        metas = [json.load(open(os.path.join(folder, "meta.json"))) for folder in sorted(glob.glob(workers))]
        assert [meta["config"]["collective"] for meta in metas] == [scheme_names.collective_of(scheme)[1] or "ps"] * 2
        rounds[scheme] = len(glob.glob(os.path.join(sorted(glob.glob(workers))[0], "iter-*.txt")))
    # two workers each move half the model each way over their own links; over one server's link, both models queue
    assert rounds["esync-apply@ring"] > rounds["esync-apply"] >= 1
    table = open(os.path.join(logs, regime_map.TABLE_FILE)).read()
    assert "| ESync (apply) over ring allreduce |" in table
