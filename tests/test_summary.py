"""summary.py: pure math on records, and the command line on synthetic log folders."""
import json
import os
import subprocess
import sys

import pytest

from analysis import metrics, summary
from tests import logfactory
from tests.logfactory import MODES, NETWORK, NUM_PARAMS
from training import runlog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY_SCRIPT = os.path.join(ROOT, "summary.py")
SUMMARY_NAMES = {"esync": "ESync.json", "sync": "Sync.json", "async": "Async.json", "dcasgd": "DCASGD.json"}
TARGET = 0.85


def run_summary(*args):
    return subprocess.run([sys.executable, SUMMARY_SCRIPT, *args], capture_output=True, text=True, timeout=60)


def load_summary(base, mode, name=None, network=NETWORK):
    with open(os.path.join(base, network, mode, name or SUMMARY_NAMES[mode]), encoding="utf-8") as handle:
        return json.load(handle)


def device_summary(result, node, device):
    return result["devices"][node][device]


def last_total_time(records):
    return records[max(records)]["total_time"]


def logged_aggregation(record):
    return sum(step.get(phase, 0.0) for step in record["time"].values() for phase in runlog.AGGREGATION_PHASES)


def iter_path(base, mode, node, device, iteration, network=NETWORK):
    return os.path.join(base, network, mode, node, device, f"iter-{iteration}.txt")


@pytest.fixture(scope="module")
def four_modes(tmp_path_factory):
    """Logs of 2 nodes x 3 devices for esync, sync, async and dcasgd, summarized with --all."""
    base = str(tmp_path_factory.mktemp("logs"))
    written = logfactory.write_runs(base)
    result = run_summary("-b", base, "-n", NETWORK, "--all", "--target", str(TARGET))
    return base, written, result


@pytest.fixture
def one_run(tmp_path):
    """A fresh sync run per test, for tests that damage files."""
    base = str(tmp_path)
    return base, logfactory.write_run(base, "sync")


# ----------------------------------------------------------------------------------------------
# Command line on well-formed logs


def test_all_writes_one_named_summary_per_mode(four_modes):
    base, _, result = four_modes

    present = {mode: os.path.exists(os.path.join(base, NETWORK, mode, SUMMARY_NAMES[mode])) for mode in MODES}

    assert result.returncode == 0, result.stderr
    assert present == {mode: True for mode in MODES}


@pytest.mark.parametrize("mode", MODES)
def test_device_throughput_is_samples_over_last_total_time(four_modes, mode):
    base, written, _ = four_modes

    result = load_summary(base, mode)

    for (node, device), records in written[mode].items():
        expected = sum(r["num_samples"] for r in records.values()) / last_total_time(records)
        assert device_summary(result, node, device)["throughput"] == pytest.approx(expected)


@pytest.mark.parametrize("mode", MODES)
def test_cluster_throughput_sums_the_devices(four_modes, mode):
    base, written, _ = four_modes

    result = load_summary(base, mode)

    expected = sum(sum(r["num_samples"] for r in records.values()) / last_total_time(records)
                   for records in written[mode].values())
    assert result["cluster_throughput"] == pytest.approx(expected)


@pytest.mark.parametrize("mode", MODES)
def test_self_iters_list_counts_the_local_steps_of_each_round(four_modes, mode):
    base, written, _ = four_modes

    result = load_summary(base, mode)

    for (node, device), records in written[mode].items():
        expected = [len(records[i]["time"]) for i in sorted(records)]
        assert device_summary(result, node, device)["self_iters_list"] == expected


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_time_list_follows_logged_aggregation(four_modes, mode):
    base, written, _ = four_modes

    result = load_summary(base, mode)

    for (node, device), records in written[mode].items():
        expected = [logged_aggregation(records[i]) for i in sorted(records)]
        assert device_summary(result, node, device)["aggregate_time_list"] == pytest.approx(expected)


@pytest.mark.parametrize("mode", MODES)
def test_compute_ratio_is_one_minus_aggregation_share(four_modes, mode):
    base, written, _ = four_modes

    result = load_summary(base, mode)

    for (node, device), records in written[mode].items():
        aggregation = sum(logged_aggregation(r) for r in records.values())
        expected = 1.0 - aggregation / last_total_time(records)
        assert device_summary(result, node, device)["compute_ratio"] == pytest.approx(expected)


@pytest.mark.parametrize("mode", MODES)
def test_time_to_accuracy_is_first_time_target_is_reached(four_modes, mode):
    base, written, _ = four_modes

    result = load_summary(base, mode)

    expected = logfactory.expected_time_to_accuracy(written[mode], TARGET)
    assert result["time_to_accuracy"] == (None if expected is None else pytest.approx(expected))


def test_async_that_never_reaches_target_has_null_time_to_accuracy(four_modes):
    base, written, _ = four_modes

    result = load_summary(base, "async")

    assert logfactory.expected_time_to_accuracy(written["async"], TARGET) is None
    assert result["time_to_accuracy"] is None


@pytest.mark.parametrize("mode", MODES)
def test_traffic_is_push_and_pull_of_all_parameters_per_worker_per_round(four_modes, mode):
    base, written, _ = four_modes

    result = load_summary(base, mode)

    workers = len(written[mode])
    rounds = max(len(records) for records in written[mode].values())
    elapsed = max(last_total_time(records) for records in written[mode].values())
    expected = 2 * NUM_PARAMS * 4 * workers * rounds / elapsed / 1e6
    assert result["traffic_mb_per_s"] == pytest.approx(expected)


def test_accuracy_list_has_one_entry_per_iteration_and_null_where_not_evaluated(four_modes):
    base, written, _ = four_modes

    result = load_summary(base, "esync")

    node, device = result["accuracy_device"].split("/")
    records = written["esync"][(node, device)]
    assert device_summary(result, node, device)["accuracy_list"] == [records[i].get("accuracy")
                                                                     for i in sorted(records)]


def test_accuracy_points_pair_iteration_time_and_accuracy(four_modes):
    base, written, _ = four_modes

    result = load_summary(base, "sync")

    node, device = result["accuracy_device"].split("/")
    records = written["sync"][(node, device)]
    expected = [[i, records[i]["total_time"], records[i]["accuracy"]] for i in sorted(records)
                if "accuracy" in records[i]]
    assert device_summary(result, node, device)["accuracy_points"] == expected


def test_the_fast_step_is_the_fastest_devices_median_forward_and_backward_pass(four_modes):
    base, written, _ = four_modes
    result = load_summary(base, "esync")

    # rank 0 (slowdown 1) steps once per round in 0.01 s; the slower ranks' steps (0.01, 0.02, ...) do not count
    assert result["fast_compute_seconds"] == pytest.approx(0.01)
    assert result["probe_compute_seconds"] is None  # no --comm-ratio probe ran before these logs


def test_model_size_workers_and_ranks_come_from_meta(four_modes):
    base, written, _ = four_modes

    result = load_summary(base, "dcasgd")

    ranks = sorted(device_summary(result, node, device)["rank"] for node, device in written["dcasgd"])
    assert (result["num_params"], result["param_bytes"], result["num_workers"]) == (NUM_PARAMS, NUM_PARAMS * 4, 6)
    assert ranks == list(range(6))


def test_non_iid_folder_gets_non_iid_summary(tmp_path):
    logfactory.write_run(str(tmp_path), "esync-niid")

    result = run_summary("-b", str(tmp_path), "-n", NETWORK, "-m", "esync-niid")

    written = load_summary(str(tmp_path), "esync-niid", "ESync-Non-IID.json")
    assert result.returncode == 0, result.stderr
    assert (written["algorithm"], written["non_iid"]) == ("ESync", True)


def test_standalone_run_has_no_parameter_server_traffic(tmp_path):
    logfactory.write_run(str(tmp_path), "local", nodes=("host1",), devices=("gpu0",))

    run_summary("-b", str(tmp_path), "-n", NETWORK, "-m", "local")

    assert load_summary(str(tmp_path), "local", "Standalone.json")["traffic_mb_per_s"] == 0.0


# ----------------------------------------------------------------------------------------------
# Damaged or unusual logs


def test_truncated_iter_file_is_reported_and_skipped(one_run):
    base, _ = one_run
    damaged = iter_path(base, "sync", "host1", "gpu0-rank1", 3)
    with open(damaged, "w", encoding="utf-8") as handle:
        handle.write('{"num_iters": 1, "time": {"0": {"get_ba')

    result = run_summary("-b", base, "-n", NETWORK, "-m", "sync")

    assert result.returncode == 0
    assert damaged in result.stderr
    assert 3 not in device_summary(load_summary(base, "sync"), "host1", "gpu0-rank1")["iterations"]


def test_empty_iter_file_is_reported_and_skipped(one_run):
    base, _ = one_run
    damaged = iter_path(base, "sync", "host2", "cpu-rank3", 0)
    open(damaged, "w").close()

    result = run_summary("-b", base, "-n", NETWORK, "-m", "sync")

    assert result.returncode == 0
    assert damaged in result.stderr


def test_iter_file_without_required_keys_is_reported_and_skipped(one_run):
    base, _ = one_run
    damaged = iter_path(base, "sync", "host1", "cpu-rank0", 5)
    with open(damaged, "w", encoding="utf-8") as handle:
        json.dump({"num_iters": 1, "time": {"0": {}}}, handle)

    result = run_summary("-b", base, "-n", NETWORK, "-m", "sync")

    assert result.returncode == 0
    assert damaged in result.stderr


def test_stray_file_is_reported_and_skipped(one_run):
    base, written = one_run
    stray = os.path.join(base, NETWORK, "sync", "host2", "gpu1-rank5", "notes.txt")
    with open(stray, "w", encoding="utf-8") as handle:
        handle.write("rerun after power cut\n")

    result = run_summary("-b", base, "-n", NETWORK, "-m", "sync")

    assert result.returncode == 0
    assert stray in result.stderr
    expected = sorted(written[("host2", "gpu1-rank5")])
    assert device_summary(load_summary(base, "sync"), "host2", "gpu1-rank5")["iterations"] == expected


def test_gap_in_iterations_is_reported(one_run):
    base, _ = one_run
    for iteration in (4, 5):
        os.remove(iter_path(base, "sync", "host2", "gpu0-rank4", iteration))

    result = run_summary("-b", base, "-n", NETWORK, "-m", "sync")

    assert result.returncode == 0
    assert "host2/gpu0-rank4: missing iterations 4-5" in result.stderr
    assert device_summary(load_summary(base, "sync"), "host2", "gpu0-rank4")["missing_iterations"] == [4, 5]


def test_original_layout_is_summarized(tmp_path):
    written = logfactory.write_run(str(tmp_path), "esync", nodes=logfactory.ORIGINAL_NODES, original=True)

    result = run_summary("-b", str(tmp_path), "-n", NETWORK, "-m", "esync", "--num-params", str(NUM_PARAMS))

    summarized = load_summary(str(tmp_path), "esync")
    assert result.returncode == 0, result.stderr
    assert summarized["devices"]["cloud3"].keys() == {"cpu", "gpu0", "gpu1"}
    assert summarized["param_bytes"] == NUM_PARAMS * 4
    records = written[("cloud3", "gpu1")]
    expected = sum(r["num_samples"] for r in records.values()) / last_total_time(records)
    assert summarized["devices"]["cloud3"]["gpu1"]["throughput"] == pytest.approx(expected)


def test_original_logs_give_the_local_steps_each_round_holds(tmp_path):
    written = logfactory.write_run(str(tmp_path), "esync", nodes=logfactory.ORIGINAL_NODES, original=True)

    run_summary("-b", str(tmp_path), "-n", NETWORK, "-m", "esync", "--num-params", str(NUM_PARAMS))

    summarized = load_summary(str(tmp_path), "esync")
    for (node, device), records in written.items():
        stats = summarized["devices"][node][device]
        assert stats["iterations"] == [records[n]["num_iters"] for n in sorted(records)]  # num_iters is the round
        assert stats["self_iters_list"] == [len(records[n]["time"]) for n in sorted(records)]
    assert {len(r["time"]) for records in written.values() for r in records.values()} == {1, 2, 3}


def test_logs_written_before_log_format_2_summarize_as_todays(tmp_path):
    old, new = str(tmp_path / "old"), str(tmp_path / "new")
    logfactory.write_run(old, "esync", legacy=True)
    logfactory.write_run(new, "esync")

    for base in (old, new):
        assert run_summary("-b", base, "-n", NETWORK, "-m", "esync").returncode == 0

    assert load_summary(old, "esync")["devices"] == load_summary(new, "esync")["devices"]


def test_original_layout_without_num_params_leaves_traffic_null(tmp_path):
    logfactory.write_run(str(tmp_path), "sync", nodes=logfactory.ORIGINAL_NODES, original=True)

    result = run_summary("-b", str(tmp_path), "-n", NETWORK, "-m", "sync")

    summarized = load_summary(str(tmp_path), "sync")
    assert summarized["traffic_mb_per_s"] is None
    assert "param_bytes unknown" in result.stderr


def test_wrong_base_folder_exits_2_with_one_line_message(tmp_path):
    result = run_summary("-b", str(tmp_path / "nowhere"), "-n", NETWORK, "-m", "esync")

    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_mode_folder_without_iter_files_exits_2(tmp_path):
    os.makedirs(tmp_path / NETWORK / "esync" / "host1" / "cpu-rank0")

    result = run_summary("-b", str(tmp_path), "-n", NETWORK, "-m", "esync")

    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_unknown_mode_exits_2(tmp_path):
    logfactory.write_run(str(tmp_path), "sync", nodes=("host1",), devices=("cpu",))

    result = run_summary("-b", str(tmp_path), "-n", NETWORK, "-m", "gossip")

    assert result.returncode == 2
    assert "unknown mode" in result.stderr


# ----------------------------------------------------------------------------------------------
# Pure functions


def test_summarize_device_without_files():
    records = logfactory.device_records("esync", rank=1, rounds=4, evaluates=True)

    stats = metrics.summarize_device(records)

    assert stats["self_iters_list"] == [2, 2, 2, 2]
    assert stats["throughput"] == pytest.approx(4 * 64 / records[4]["total_time"])
    assert stats["accuracy_points"] == [[1, records[1]["total_time"], 0.5], [3, records[3]["total_time"], 0.68]]


@pytest.mark.parametrize("phase", runlog.AGGREGATION_PHASES)
def test_aggregate_time_reads_either_aggregation_phase(phase):
    record = {"time": {"0": {"forward and backward": 0.2, phase: 0.05}}, "num_samples": 64, "total_time": 0.3}

    assert metrics.summarize_device({1: record})["aggregate_time_list"] == [pytest.approx(0.05)]


def test_missing_iterations_lists_the_gaps():
    assert metrics.missing_iterations([1, 4, 6]) == [2, 3, 5]


def test_iterations_numbered_from_one_have_no_gap():
    assert metrics.missing_iterations([1, 2, 3]) == []


def test_time_to_reach_is_none_when_never_reached():
    assert metrics.time_to_reach([[0, 1.0, 0.5], [1, 2.0, 0.8]], 0.85) is None


def test_summary_file_name_for_non_iid_mode():
    assert summary.summary_file_name("dcasgd-niid") == "DCASGD-Non-IID.json"


@pytest.mark.parametrize("mode, base, non_iid, attacked, name", [
    ("zeno-attack", "zeno", False, True, "Zeno-Attack.json"),
    ("sync-attack-niid", "sync", True, True, "Sync-Attack-Non-IID.json"),
    ("zeno", "zeno", False, False, "Zeno.json"),
])
def test_attack_folders_keep_their_algorithm(mode, base, non_iid, attacked, name):
    assert summary.split_mode(mode) == (base, non_iid)
    assert summary.is_attacked(mode) == attacked
    assert summary.summary_file_name(mode) == name


def test_validation_counts_add_up_the_judged_layers():
    records = [{"zeno_layers": 10, "zeno_accepted_layers": 7}, {"zeno_layers": 10, "zeno_accepted_layers": 0}, {}]

    assert metrics.validation_counts(records) == {"accepted_layers": 7, "rejected_layers": 13}
    assert metrics.validation_counts([{}]) == {}


def test_all_reports_an_unusable_mode_and_summarizes_the_others(tmp_path):
    logfactory.write_run(str(tmp_path), "sync", nodes=("host1",), devices=("cpu",))
    broken = iter_path(str(tmp_path), "async", "host1", "cpu-rank0", 0)
    os.makedirs(os.path.dirname(broken))
    open(broken, "w").close()

    result = run_summary("-b", str(tmp_path), "-n", NETWORK, "--all")

    assert result.returncode == 0
    assert broken in result.stderr
    assert os.path.exists(os.path.join(tmp_path, NETWORK, "sync", "Sync.json"))


def test_traffic_is_what_the_workers_logged_when_every_one_did():
    stats = [{"sent_bytes": 3e6, "received_bytes": 1e6}, {"sent_bytes": 2e6, "received_bytes": 2e6}]
    assert metrics.traffic_mb_per_s(stats, param_bytes=10, num_workers=2, rounds=5, elapsed=2.0) == (4.0, True)

    stats[1]["sent_bytes"] = None  # a log from before the counts: every worker is estimated
    traffic, measured = metrics.traffic_mb_per_s(stats, param_bytes=1e6, num_workers=2, rounds=5, elapsed=2.0)
    assert traffic == pytest.approx(10.0) and not measured


def test_a_device_sums_the_bytes_of_its_rounds_only_when_every_round_logged_them():
    step = {"0": {runlog.FORWARD_BACKWARD: 0.1}}
    records = {n: {"num_samples": 64, "total_time": 0.1 * n, "time": step, runlog.SENT_BYTES: 100 * n,
                   runlog.RECEIVED_BYTES: 50} for n in (1, 2, 3)}

    device = metrics.summarize_device(records)
    assert (device["sent_bytes"], device["received_bytes"], device["bytes_per_round"]) == (600, 150, 250)

    del records[2][runlog.RECEIVED_BYTES]
    assert metrics.summarize_device(records)["received_bytes"] is None

