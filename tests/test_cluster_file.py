"""A cluster declared in a file (launcher/cluster_file.py): the same Experiment as its flags, run on the virtual clock
and in real time, and every mistake in it one line naming the field."""
import os
import subprocess
import sys

import pytest

from launcher import experiment
from tests.test_launch import LAUNCH_PY, launcher, launcher_env, read_output, recorded_pids, still_running
from training.checks import UsageError

PAPER = """
[devices]
slowdown = "4x1,2x117"
count = 6
step_seconds = 0.03
jitter = 0.1

[links]
comm_ratio = 12
latency = 0.001
slowdown = "4x1,2x4"

[servers]
count = 6
bandwidth = "2x"

[state_server]
round_trip = 0.002
"""
VIRTUAL = ["--modes", "esync", "--clock", "virtual", "--max-time", "5"]


def cluster(tmp_path, text, name="cluster.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_cluster_file_gives_the_experiment_its_flags_give(tmp_path):
    from_file = experiment.parse([*VIRTUAL, "--cluster", cluster(tmp_path, PAPER)])
    from_flags = experiment.parse([*VIRTUAL, "--slowdown", "4x1,2x117", "--step-seconds", "0.03", "--step-jitter",
                                   "0.1", "--comm-ratio", "12", "--latency", "0.001", "-s", "6", "--ps-bandwidth",
                                   "2x", "--round-trip", "0.002", "--link-slowdown", "4x1,2x4"])

    assert from_file.cluster == from_flags.cluster and from_file.charges == from_flags.charges
    assert from_file.describe_links() == from_flags.describe_links()


def test_the_same_file_as_json(tmp_path):
    text = ('{"devices": {"slowdown": [1, 1, 4], "step_seconds": 0.01}, "servers": {"count": 2}, '
            '"links": {"comm_ratio": 3}}')
    given = experiment.parse([*VIRTUAL, "--cluster", cluster(tmp_path, text, "cluster.json")])

    assert (given.cluster.slowdowns, given.cluster.num_servers, given.cluster.comm_ratio) == (("1", "1", "4"), 2, 3.0)


def test_in_real_time_the_files_charges_are_left_to_the_measurement_and_said_so(tmp_path, capsys):
    given = experiment.parse(["--modes", "sync", "--max-time", "5", "--hosts", "netns",
                              "--cluster", cluster(tmp_path, PAPER)])

    declared = given.cluster
    assert (declared.num_servers, declared.ps_link, declared.comm_ratio, declared.slowdowns[-1]) == (6, "2x", 12.0, "117")
    assert given.charges is None  # real time charges nothing
    said = capsys.readouterr().out
    assert ("devices.step_seconds, devices.jitter, links.latency, state_server.round_trip charged on the virtual "
            "clock only") in said


@pytest.mark.parametrize("text, message", [
    ("[links]\ncomm_ratio = -3\n", r"cluster.toml: links.comm_ratio -3: give a number above 0"),
    ("[links]\nlatency = -0.5\n", r"cluster.toml: links.latency -0.5: give a number of 0 or more"),
    ("[links]\nrate = 3\n", r"cluster.toml: links.rate: unknown field \(known in \[links\]: bandwidth, comm_ratio"),
    ("[network]\nrate = 3\n", r"cluster.toml: \[network\]: unknown section"),
    ("[devices]\nslowdown = [1, 1, 4]\ncount = 4\n", r"cluster.toml: devices.count 4 but the slowdowns list 3"),
    ("[devices]\nslowdown = [1, 0.5]\n", r"cluster.toml: devices.slowdown"),
    ("[servers]\ncount = 0\n", r"cluster.toml: servers.count 0: give a whole number of 1 or more"),
    ("[servers]\nbandwidth = \"fast\"\n", r"cluster.toml: servers.bandwidth: rate 'fast' is not like"),
    ("[links]\nbandwidth = \"1gbit\"\ncomm_ratio = 3\n", r"links.comm_ratio and links.bandwidth both set"),
    ("[links\n", r"cluster.toml: not TOML"),
    ("[state_server]\nround_trip = \"fast\"\n", r"state_server.round_trip 'fast': give a number"),
])
def test_a_mistake_in_the_file_is_one_line_naming_the_field(tmp_path, text, message):
    with pytest.raises(UsageError, match=message):
        experiment.parse([*VIRTUAL, "--step-seconds", "0.01", "--cluster", cluster(tmp_path, text)])


def test_a_flag_that_sets_what_the_file_declares_is_refused(tmp_path):
    with pytest.raises(UsageError, match="-s 2: cluster.toml declares it too: give it in one place"):
        experiment.parse([*VIRTUAL, "-s", "2", "--cluster", cluster(tmp_path, PAPER)])


def test_the_launcher_refuses_a_bad_file_in_one_line_with_exit_2_before_it_starts(tmp_path):
    path = cluster(tmp_path, "[devices]\nslowdown = [1, 4]\ncount = 3\n")
    result = subprocess.run([sys.executable, LAUNCH_PY, "--modes", "sync", "--max-time", "5", "--cluster", path,
                             "-ld", str(tmp_path / "logs")], capture_output=True, text=True, env=launcher_env(),
                            timeout=60)

    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "devices.count 3 but the slowdowns list 2 devices" in result.stderr
    assert not os.path.exists(tmp_path / "logs")


@pytest.mark.slow
@pytest.mark.beside_others(False)  # it checks what ran, not how fast: with the timed tests, where the groups balance
def test_one_file_runs_its_cluster_in_real_time_and_on_the_virtual_clock(tmp_path):
    path = cluster(tmp_path, "[devices]\nslowdown = [1, 2]\nstep_seconds = 0.007\n\n[servers]\ncount = 2\n")
    runs = {}
    for clock in ("real", "virtual"):
        logs = str(tmp_path / clock)
        args = ["--modes", "sync", "-n", "lenet", "--dataset", "mnist-5k", "--max-time", "2", "--clock", clock,
                "--cluster", path, "--no-figures", "--snapshot-seconds", "1"]
        with launcher(args, logs) as proc:
            proc.wait(timeout=300)
            runs[clock] = (proc.returncode, read_output(proc), logs)
        assert still_running(recorded_pids(logs)) == []

    real_code, real_output, real_logs = runs["real"]
    assert real_code == 0, real_output
    assert "devices.step_seconds charged on the virtual clock only" in real_output
    assert len([name for name in os.listdir(os.path.join(real_logs, "lenet", "sync", "processes"))
                if name.startswith("server-")]) == 2  # both of the file's servers ran
    virtual_code, virtual_output, virtual_logs = runs["virtual"]
    assert virtual_code == 0, virtual_output
    assert "2 parameter server(s)" in virtual_output


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.join(os.path.dirname(LAUNCH_PY), "clusters"))))
def test_every_shipped_cluster_file_reads(name):
    path = os.path.join(os.path.dirname(LAUNCH_PY), "clusters", name)
    given = experiment.parse([*VIRTUAL, "--cluster", path])

    assert given.num_workers == 6 and given.cluster.comm_ratio == 12
