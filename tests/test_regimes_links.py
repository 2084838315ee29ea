"""Communication regimes: links stated as a ratio of transfer to step (--comm-ratio), the check that a run's links
carried what it claims, and Table 1's claims about the rivals."""
import json

import pytest

from analysis import paper
from launcher import comm_ratio, experiment, netns, runner
from launcher.studies import paper as paper_command
from training.checks import UsageError

# Its jobs' checks do not depend on timing: they run beside the in-process tests (tests/conftest.py).
pytestmark = pytest.mark.beside_others


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
                            "--hosts", "netns", "--comm-ratio", "3", "--", "-b", "32", "--local-optimizer", "adam"])

    argv = comm_ratio.probe_argv(run, "/tmp/probe")

    assert argv[argv.index("-m") + 1] == "local" and argv[argv.index("--slowdown") + 1] == "1"
    assert argv[argv.index("-b") + 1] == "32" and argv[argv.index("-e") + 1] == "0"
    assert "--snapshot-dir" not in argv and "--eval-seconds" not in argv
    assert argv[argv.index("--local-optimizer") + 1] == "adam"  # the workers' step, its update included
    assert run.cluster.links_pending and run.cluster.worker_rate is None


def test_a_resolved_experiment_carries_the_rate_and_what_it_came_from(capsys):
    run = experiment.parse(["--modes", "sync", "-n", "lenet", "--slowdown", "1,4", "--max-time", "5",
                            "--hosts", "netns", "--comm-ratio", "4"])
    measured = {comm_ratio.probe_key(run): comm_ratio.Probe(0.01, 0.008, 100_000, 0.012, 0.0)}

    resolved = comm_ratio.resolve(run, measured)

    assert resolved.cluster.worker_rate == resolved.cluster.ps_rate == 20_000_000 and not resolved.cluster.links_pending
    assert resolved.cluster.regime["transfer_seconds"] == pytest.approx(0.04)
    assert "--comm-ratio 4" in resolved.describe_links() and "20mbit" in resolved.describe_links()
    assert "20.000 Mbit/s" in capsys.readouterr().out


def test_a_given_parameter_server_rate_stays_beside_the_ratio():
    run = experiment.parse(["--modes", "sync", "-n", "lenet", "--slowdown", "1,4", "--max-time", "5",
                            "--hosts", "netns", "--comm-ratio", "4", "--ps-bandwidth", "1gbit"])

    resolved = comm_ratio.resolve(run, {comm_ratio.probe_key(run): comm_ratio.Probe(0.01, 0.008, 100_000, 0.012, 0.0)})

    assert (resolved.cluster.worker_rate, resolved.cluster.ps_rate) == (20_000_000, 10 ** 9)


@pytest.mark.parametrize("args, message", [
    (["--comm-ratio", "0", "--hosts", "netns"], "give a positive ratio"),
    (["--comm-ratio", "-3", "--hosts", "netns"], "give a positive ratio"),
    (["--comm-ratio", "3"], "give --hosts netns too"),
    (["--comm-ratio", "3", "--hosts", "netns", "--bandwidth", "1gbit"], "leave out --bandwidth"),
])
def test_a_ratio_is_positive_on_shaped_links_and_alone(args, message):
    with pytest.raises(UsageError, match=message):
        experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", *args])


@pytest.mark.parametrize("args, message", [
    (["--link-slowdown", "1,3"], "--link-slowdown 1,3 scales the workers' links, which are free on the virtual clock "
                                 "without --comm-ratio"),
    (["--ps-bandwidth", "6x"], "--ps-bandwidth 6x scales the workers' links"),
])
def test_a_multiple_of_free_virtual_links_is_refused(args, message):
    virtual = ["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", "--clock", "virtual", "--step-seconds", "0.01"]
    with pytest.raises(UsageError, match=message):
        experiment.parse([*virtual, *args])
    assert experiment.parse([*virtual, *args, "--comm-ratio", "12"]).cluster.comm_ratio == 12
    assert experiment.parse([*virtual, "--ps-bandwidth", "100mbit"]).cluster.ps_link == "100mbit"


def test_the_link_options_are_handed_on_as_given():
    parser = paper_command.build_parser()
    ns = parser.parse_args(["--hosts", "netns", "--comm-ratio", "12", "-s", "2", "--netns-prefix", "p-"])

    run = experiment.build(experiment.options(modes="sync", slowdown="1,4", max_time=5.0,
                                              **experiment.handed_on(ns)))
    cluster = run.cluster
    assert (cluster.hosts, cluster.comm_ratio, cluster.num_servers, cluster.netns_prefix) == ("netns", 12.0, 2, "p-")
    assert run == experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", "--hosts", "netns",
                                    "--comm-ratio", "12", "-s", "2", "--netns-prefix", "p-"])


def test_options_are_the_defaults_with_what_a_command_gives_and_nothing_unknown():
    assert vars(experiment.options()) == vars(experiment.build_parser().parse_args([]))
    assert experiment.options(max_time=3.0, non_iid=True).non_iid is True
    with pytest.raises(TypeError, match="no option max_seconds"):
        experiment.options(max_seconds=3.0)


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

    code = runner.report_links(run, "sync", "sync 1/1", FixedMeter(idle), str(tmp_path), {})

    assert code == 1
    assert "w0 carried 100 bytes in and 100 out" in capsys.readouterr().err
    recorded = json.load(open(tmp_path / "network.json"))
    assert len(recorded["problems"]) == 2 and recorded["links_described"].startswith("network namespaces")


# ----------------------------------------------------------------------------------------------
# Table 1's claims about the rivals


def times(values, training=10.0):
    return {"time_to_target": values, "time_to_target_bound": [training if v is None else None for v in values]}


def test_a_rival_is_later_where_it_reached_the_target_after_esync_or_never():
    count = paper.later_than(times([3.0, None, 1.0, None]), times([2.0, 5.0, 2.0, None]))

    assert (count["later"], count["of"]) == (2, 3)
    assert count["holds"] is None  # 2, 5, 2, 10 against 3, 10, 1, 10: within the spread


def test_a_rivals_lateness_holds_where_the_test_says_so_either_way():
    fast, slow = times([2.0, 2.5, 3.0, 2.2, 2.8]), times([8.0, None, 9.0, 8.5, 9.5])  # one miss: 10 s counts

    assert paper.later_than(slow, fast)["holds"] == "esync"
    assert paper.later_than(fast, slow)["holds"] == "rival"
    assert paper.later_than(slow, fast)["p_value"] < 0.05
