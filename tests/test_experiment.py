"""The launcher's command line read into a frozen Experiment: one description per command line, the values the
checks derive computed once, nothing written back."""
import dataclasses
import functools
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from launcher import experiment
from launcher.cluster import ROOT
from launcher.hosts import LOOPBACK
from training import config
from training.checks import UsageError

LENET = ["-n", "lenet", "--dataset", "mnist-5k", "--max-time", "30"]


def parse(*argv):
    return experiment.parse(["--modes", "esync,sync", *LENET, *argv])


def test_the_description_is_frozen():
    described = parse("--devices", "cpu,cpu")

    with pytest.raises(dataclasses.FrozenInstanceError):
        described.max_time = 60
    with pytest.raises(dataclasses.FrozenInstanceError):
        described.host_ip = "10.0.0.1"


def test_the_same_command_line_gives_equal_descriptions_and_is_left_as_it_was():
    argv = ["--modes", "esync,sync", *LENET, "--devices", "cpu,cpu", "--hosts", "netns", "--netns-prefix", "t-",
            "--", "-b", "32"]
    given = list(argv)

    assert experiment.parse(argv) == experiment.parse(argv)
    assert argv == given


@pytest.mark.parametrize("flag", ["-ld", "--log-dir", "--logs"])
def test_ld_log_dir_and_logs_name_the_same_folder(flag, tmp_path):
    described = parse("--devices", "cpu", flag, str(tmp_path / "runs"))

    assert described.log_dir == str(tmp_path / "runs")
    assert described.mode_folder("esync") == str(tmp_path / "runs" / "lenet" / "esync")


def test_relative_folders_become_absolute():
    described = parse("--devices", "cpu", "-ld", "runs", "-dd", "data")

    assert described.log_dir == os.path.abspath("runs") and described.data_dir == os.path.abspath("data")


def test_devices_default_to_one_cpu_per_slowdown_factor():
    described = parse("--slowdown", "1,1,4")

    assert described.cluster.devices == ("cpu", "cpu", "cpu") and described.cluster.slowdowns == ("1", "1", "4")
    assert described == parse("--devices", "cpu,cpu,cpu", "--slowdown", "1,1,4")


def test_one_slowdown_applies_to_every_device():
    assert parse("--devices", "cpu,gpu0").cluster.slowdowns == ("1", "1")
    assert parse("--devices", "cpu,gpu0", "--slowdown", "2").cluster.slowdowns == ("2", "2")


def test_without_devices_or_slowdown_devices_are_required():
    with pytest.raises(UsageError, match="required: --devices"):
        parse()


def test_without_a_tracker_everything_runs_here_under_this_machines_name():
    described = parse("--devices", "cpu")

    assert described.tracker is None and described.host_ip == LOOPBACK
    assert described.node_name == socket.gethostname()
    assert parse("--devices", "cpu", "--node-name", "n1").node_name == "n1"


def test_a_tracker_takes_its_host_address_and_leaves_node_names_to_the_hosts(tmp_path):
    local = parse("--devices", "cpu,cpu", "--tracker", "local")
    hostfile = tmp_path / "hosts"
    remote = parse("--devices", "gpu0,gpu0", "--tracker", "mpi", "-H", str(hostfile), "--host-ip", "10.1.1.34")

    assert (local.host_ip, local.node_name, local.hostfile) == (LOOPBACK, None, None)
    assert (remote.host_ip, remote.node_name, remote.hostfile) == ("10.1.1.34", None, str(hostfile))


def test_netns_hosts_get_their_link_rates_and_a_prefix_of_their_own():
    described = parse("--devices", "cpu,cpu", "--hosts", "netns", "--bandwidth", "100mbit", "--ps-bandwidth", "1gbit")
    same_rate = parse("--devices", "cpu,cpu", "--hosts", "netns", "--bandwidth", "100mbit")

    assert (described.cluster.worker_rate, described.cluster.ps_rate) == (10 ** 8, 10 ** 9)
    same = same_rate.cluster
    assert (same.worker_rate, same.ps_rate, same.ps_bandwidth) == (10 ** 8, 10 ** 8, "100mbit")
    assert described.cluster.netns_prefix.startswith("esync-") and described.cluster.netns_prefix != same.netns_prefix
    assert parse("--devices", "cpu", "--hosts", "netns", "--netns-prefix", "mine-").cluster.netns_prefix == "mine-"


def test_local_hosts_have_no_links_or_namespaces():
    described = parse("--devices", "cpu,cpu")

    cluster = described.cluster
    assert (cluster.worker_rate, cluster.ps_rate, cluster.netns_prefix) == (None, None, None)


@pytest.mark.parametrize("aggregation", [["--collective", "ring"], ["-s", "2"]])
def test_how_a_cluster_aggregates_is_refused_where_every_mode_trains_alone_and_taken_beside_a_cluster_mode(
        aggregation):
    with pytest.raises(UsageError, match=f"^{' '.join(aggregation)}: --modes local trains alone, with nothing to "
                                         "aggregate"):
        experiment.parse(["--modes", "local", *LENET, "--slowdown", "1", *aggregation])
    assert experiment.parse(["--modes", "local,sync", *LENET, "--slowdown", "1,2", *aggregation]).modes == (
        "local", "sync")


@pytest.mark.parametrize("argv, message", [
    (["--modes", "sync", "--esync-policy", "apply"], "--esync-policy apply: no mode of --modes sync reads it"),
    (["--modes", "esync,zeno", "--validators", "2", "--bandwidth", "1gbit"], "--bandwidth 1gbit is for --hosts netns"),
    (["--modes", "sync", "--validators", "2"], "--validators 2: no mode of --modes sync reads it (-m zeno, zeno-async"),
    (["--modes", "sync", "--validator-device", "gpu0"], "--validator-device gpu0: no mode of --modes sync reads it"),
    (["--modes", "sync", "--attack", "random"], "--attack random is what the Byzantine workers do: give --byzantine"),
    (["--modes", "sync", "--attack-scale", "3"], "--attack-scale 3.0 is what the Byzantine workers do"),
    (["--modes", "sync", "--netns-prefix", "x-"], "--netns-prefix x- is for --hosts netns"),
    (["--modes", "sync", "--clock", "virtual", "--step-seconds", "0.01", "--bandwidth", "1gbit"],
     "--bandwidth 1gbit is for --hosts netns; on the virtual clock --comm-ratio sets the workers' links"),
])
def test_an_option_nothing_of_the_run_would_read_is_refused_in_one_line(argv, message):
    with pytest.raises(UsageError, match=f"^{re.escape(message)}"):
        experiment.parse([*argv, *LENET, "--slowdown", "1,2"])


@pytest.mark.parametrize("argv, taken", [
    (["--modes", "sync,esync", "--esync-policy", "apply"], {"esync_policy": "apply"}),
    (["--modes", "sync,zeno", "--validators", "2", "--validator-device", "cpu"],
     {"validators": 2, "validator_device": "cpu"}),
    (["--modes", "sync", "--byzantine", "1", "--attack", "random", "--attack-scale", "3"],
     {"byzantine": 1, "attack": "random", "attack_scale": 3.0}),
    (["--modes", "sync", "--hosts", "netns", "--bandwidth", "1gbit", "--netns-prefix", "x-"],
     {"cluster.hosts": "netns", "cluster.bandwidth": "1gbit", "cluster.netns_prefix": "x-"}),
])
def test_the_same_options_are_taken_where_a_mode_or_the_hosts_read_them(argv, taken):
    described = experiment.parse([*argv, *LENET, "--slowdown", "1,2"])

    assert {name: functools.reduce(getattr, name.split("."), described) for name in taken} == taken


def test_a_schemes_flag_after_the_double_dash_that_no_mode_of_the_command_reads_is_refused():
    with pytest.raises(UsageError, match=r"^--tiers=3 after --: no mode of the command \(sync, async\) reads it "
                                         r"\(-m tifl read it\)"):
        experiment.parse(["--modes", "sync,async", *LENET, "--slowdown", "1,2", "--", "--tiers=3"])
    assert experiment.parse(["--modes", "sync,tifl", *LENET, "--slowdown", "1,2", "--", "--tiers", "3"]).modes == (
        "sync", "tifl")


@pytest.mark.parametrize("argv, wall_limit", [
    (["--max-time", "30"], 180.0),
    (["--max-time", "30", "--wall-limit", "50"], 50.0),
    (["--max-iters", "10"], experiment.WALL_LIMIT_WITHOUT_MAX_TIME),
    (["--max-time", "30", "--clock", "virtual", "--step-seconds", "0.03"], experiment.WALL_LIMIT_WITHOUT_MAX_TIME),
    (["--max-time", "30", "--clock", "virtual", "--step-seconds", "0.03", "--wall-limit", "50"], 50.0),
])
def test_the_wall_limit_follows_max_time_on_the_real_clock(argv, wall_limit):
    described = experiment.parse(["--modes", "sync", "-n", "lenet", "--devices", "cpu", *argv])

    assert described.wall_limit == wall_limit


def test_validators_run_as_extra_workers_of_the_modes_that_have_them():
    from launcher import commands

    described = experiment.parse(["--modes", "zeno,sync", *LENET, "--devices", "cpu,cpu,cpu", "--validators", "2"])

    assert described.validator_hosts == 2
    assert [argv.count("--validator") for argv in commands.workers_argv(described, "zeno", "logs")] == [0, 0, 0, 1, 1]
    assert not any("--validator" in argv for argv in commands.workers_argv(described, "sync", "logs"))
    with pytest.raises(UsageError, match="--validators 2: no mode of --modes esync,sync reads it"):
        parse("--devices", "cpu,cpu", "--validators", "2")  # no mode of it validates
    for bad in ("0", "4"):
        with pytest.raises(UsageError, match=f"--validators {bad}: give 1 to 3"):
            experiment.parse(["--modes", "zeno", *LENET, "--devices", "cpu,cpu,cpu", "--validators", bad])


def test_hogwild_starts_one_process_per_device_each_with_its_slowdown_and_other_standalone_modes_the_fastest():
    from launcher import commands
    from training import config

    described = experiment.parse(["--modes", "hogwild,local", *LENET, "--slowdown", "2,1,4"])
    hogwild = config.parse_args(commands.standalone_argv(described, "hogwild", "logs")[1:])
    local = config.parse_args(commands.standalone_argv(described, "local", "logs")[1:])

    assert (hogwild.hogwild_workers, hogwild.slowdowns) == (3, (2.0, 1.0, 4.0))
    assert local.slowdowns == (1.0,)


def test_worker_arguments_after_the_double_dash_are_kept_in_order():
    assert parse("--devices", "cpu", "--", "-b", "32", "-l", "0.01").worker_args == ("-b", "32", "-l", "0.01")


@pytest.mark.parametrize("flag", ["-e", "--eval-seconds", "--eval-freq=3"])
def test_evaluation_in_the_workers_loop_is_refused_in_one_line_naming_the_evaluator(flag):
    with pytest.raises(UsageError, match="never evaluate in their loop.*--snapshot-seconds"):
        parse("--devices", "cpu", "--", *flag.split(" "), *([] if "=" in flag else ["5"]))


def test_every_worker_gets_the_snapshot_period_and_rank_0s_folder_and_the_evaluator_reads_it():
    from launcher import commands

    described = parse("--modes", "esync,local", "--devices", "cpu,cpu", "--snapshot-seconds", "2", "-ld", "/tmp/x")
    workers = [config.parse_args(argv[1:]) for argv in commands.workers_argv(described, "esync", "logs", (LOOPBACK, 1))]
    standalone = config.parse_args(commands.standalone_argv(described, "local", "logs")[1:])
    evaluator = config.parse_args(commands.evaluator_argv(described, "esync")[1:])

    assert {(w.snapshot_seconds, w.snapshot_dir) for w in workers} == {(2.0, described.snapshot_folder("esync"))}
    assert standalone.snapshot_dir == described.snapshot_folder("local") != described.snapshot_folder("esync")
    assert (evaluator.mode, evaluator.train_dir) == ("evaluate", described.snapshot_folder("esync"))
    assert evaluator.log_dir == described.mode_folder("esync")


def test_with_a_remote_tracker_rank_0_starts_the_evaluator_on_its_own_host(tmp_path):
    from launcher import commands

    hostfile = tmp_path / "hosts"
    described = parse("--devices", "cpu,cpu", "--tracker", "mpi", "-H", str(hostfile), "--host-ip", "10.1.1.34",
                      "--snapshot-seconds", "2")
    workers = [config.parse_args(argv[1:]) for argv in commands.workers_argv(described, "sync", "logs")]

    assert not described.evaluator_runs  # not the launcher's: the snapshots stay on rank 0's host
    assert {(w.snapshot_seconds, w.snapshot_dir, w.evaluator_beside) for w in workers} == \
        {(2.0, described.snapshot_folder("sync"), True)}


def test_snapshot_seconds_0_evaluates_at_the_end_only():
    from launcher import commands

    described = parse("--devices", "cpu,cpu", "--snapshot-seconds", "0")
    worker = config.parse_args(commands.worker_argv(described, "sync", 0, "logs")[1:])

    assert not described.evaluator_runs and worker.snapshot_dir is None and worker.eval_duration == 0


def test_clean_netns_with_too_many_arguments_is_a_usage_error():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), "clean-netns", "a-", "b-"], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)

    assert result.returncode == 2 and "usage: launch.py clean-netns [PREFIX]" in result.stderr


def test_no_figures_ends_with_the_summaries_and_table_without_loading_matplotlib(tmp_path, monkeypatch, capsys):
    from launcher import results
    from tests import logfactory

    logfactory.write_run(str(tmp_path), "esync")
    described = experiment.parse(["--modes", "esync", "-n", logfactory.NETWORK, "--max-time", "1", "--slowdown", "1,2",
                                  "-ld", str(tmp_path), "--no-figures"])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # importing it would now fail

    assert described.figures is False and results.summarize_and_draw(described) == 0
    printed = capsys.readouterr().out
    assert "esync" in printed
    assert not os.path.exists(tmp_path / logfactory.NETWORK / "figures")
    # what ran where, beside the summaries: `launch.py docs`' demo block prints the same table from them
    ran = json.load(open(tmp_path / logfactory.NETWORK / results.EXPERIMENT_FILE))
    assert ran["folders"] == ["esync"] and ran["cores"] == os.cpu_count() and "--no-figures" in ran["command"]
    table = [line.strip() for line in results.demo_block(str(tmp_path / logfactory.NETWORK)).splitlines()[2:]]
    assert table == [line.strip() for line in printed.splitlines()[1:3]] and table[1].startswith("esync ")


def test_a_flag_of_some_modes_reaches_the_workers_of_those_modes_only():
    from launcher import commands

    described = experiment.parse(["--modes", "fedasync,dcasgd-paper,sync", *LENET, "--devices", "cpu,cpu", "--",
                                  "-b", "10", "--proximal", "0.01", "--dc-adaptive=0.95", "--local-optimizer", "adam"])
    argvs = {mode: commands.worker_argv(described, mode, 0, "logs") for mode in described.modes}

    def extra(mode):
        """The extra arguments that reached the mode's worker, in their order."""
        return [arg for arg in argvs[mode] if arg in ("-b", "10", "--proximal", "0.01", "--dc-adaptive=0.95",
                                                       "--local-optimizer", "adam")]

    assert extra("fedasync") == ["-b", "10", "--proximal", "0.01", "--local-optimizer", "adam"]
    assert extra("dcasgd-paper") == ["-b", "10", "--dc-adaptive=0.95"]
    assert extra("sync") == ["-b", "10"]
    for argv in argvs.values():  # each passes main.py's parser, which refuses a flag of another mode
        config.parse_args(argv[1:])


@pytest.mark.parametrize("argv, flag", [
    (["--slowdown", "1,abc", "--max-time", "1"], "--slowdown"),
    (["tune", "--profile", "1,abc"], "--profile"),
    (["paper", "--slowdown", "1,abc"], "--slowdown"),
    (["regimes", "--profiles", "1,1,4/1,abc"], "--profiles"),
    (["sweep", "--lr", "0.1,0.2", "--modes", "sync", "--max-time", "1", "--slowdown", "2x"], "--slowdown"),
])
def test_a_bad_list_of_factors_is_one_line_naming_its_flag_and_exit_2_in_every_command(argv, flag, tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "launch.py"), *argv, "-ld", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)

    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"error: {flag}" in result.stderr and not os.listdir(tmp_path)


def test_a_profile_of_many_devices_is_written_as_runs_of_equal_factors():
    from analysis import regime_map
    from launcher import workers

    profile = ",".join(workers.parse_factors("48x1,16x4"))
    assert len(profile.split(",")) == 64 and regime_map.compact(profile) == "48x1,16x4"
    assert regime_map.compact("1,1,1,1,20,20") == "1,1,1,1,20,20"  # up to 8 devices as given
    assert regime_map.profile_folder(profile) == "48x1-16x4"
    run = experiment.parse(["--slowdown", "3x1,4", "--max-time", "1"])
    assert run.cluster.slowdowns == ("1", "1", "1", "4") and run.cluster.devices == ("cpu",) * 4
