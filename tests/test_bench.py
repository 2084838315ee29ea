"""The benchmark's quick mode produces every section of its table (how fast is the full run's business)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from bench.sections import byzantine, heterogeneity, network, placement, sync_overhead
from launcher import experiment, netns
from launcher.cluster import ROOT


@pytest.mark.parametrize("steps, bound", [([1.0, 1.0, 4.0], 1.0), ([1.0, 1.0, 4.5], 0.9), ([2.0, 3.0], 0.8)])
def test_whole_step_bound_counts_the_whole_steps_that_fit_in_the_slowest_one(steps, bound):
    step_times = [{"step_seconds": c, "busy": 1.0} for c in steps]

    assert heterogeneity.whole_step_bound(step_times) == pytest.approx(bound)


def heterogeneity_run(mode, efficiency, time_to_85, profile="1,1,4", training_time=15.0):
    """One repeat's row of the heterogeneity section, made up (time_to_85 None: 85 % never reached)."""
    return {"profile": profile, "mode": mode, "samples_per_s": 1000 * efficiency, "standalone_sum": 1000.0,
            "efficiency": efficiency, "ideal_sync_efficiency": 0.33, "time_to_85": time_to_85,
            "time_to_85_bound": training_time if time_to_85 is None else None, "accuracy_at_budget": 0.9,
            "final_accuracy": 0.9, "bytes_per_s_per_worker": None, "busy": 0.8, "whole_step_bound": None,
            "check_ready": 0.01, "links": None}


def test_a_heterogeneity_row_is_the_mean_of_its_repeats_with_their_spread_and_a_time_never_reached_a_lower_bound():
    reached = heterogeneity.combined([heterogeneity_run("esync", e, t) for e, t in ((0.9, 3.0), (0.8, 5.0))])
    partly = heterogeneity.combined([heterogeneity_run("sync", 0.3, 10.0), heterogeneity_run("sync", 0.3, None)])

    assert (reached["repeats"], reached["efficiency"], reached["time_to_85"]) == (2, pytest.approx(0.85), 4.0)
    assert reached["spread"]["efficiency"] == pytest.approx(0.0707, abs=1e-4) and not reached["time_to_85_lower_bound"]
    assert (partly["time_to_85"], partly["time_to_85_lower_bound"]) == (12.5, True)
    assert partly["profile"] == "1,1,4" and partly["spread"]["samples_per_s"] == 0.0
    table = "\n".join(heterogeneity.markdown({"heterogeneity": [reached, partly]}))
    assert "| 0.85 ± 0.07 |" in table and "| 4.0 ± 1.4 |" in table and "| ≥ 12.5 ± 3.5 |" in table


def test_a_heterogeneity_leader_is_named_only_where_its_lead_holds_beyond_the_repeats_spread():
    clear = [heterogeneity.combined([heterogeneity_run(mode, e, t) for e, t in runs]) for mode, runs in (
        ("esync", ((0.90, 3.0), (0.91, 3.2), (0.92, 3.1), (0.90, 3.1), (0.91, 3.0))),
        ("sync", ((0.30, 10.0), (0.31, 11.0), (0.32, 10.5), (0.30, 10.2), (0.31, 10.8))))]
    close = [heterogeneity.combined([heterogeneity_run(mode, e, t) for e, t in runs]) for mode, runs in (
        ("esync", ((0.90, 3.0), (0.70, 6.0), (0.95, 2.5), (0.80, 3.3), (0.85, 3.6))),
        ("async", ((0.85, 3.5), (0.75, 2.0), (0.80, 4.0), (0.90, 3.2), (0.82, 3.1))))]

    assert heterogeneity.verdicts(clear, "efficiency", lower_is_better=False)["1,1,4"]["winner"] == "esync"
    assert heterogeneity.verdicts(clear, "time_to_85", lower_is_better=True)["1,1,4"]["winner"] == "esync"
    tied = heterogeneity.verdicts(close, "time_to_85", lower_is_better=True)["1,1,4"]
    assert tied["winner"] is None and sorted(tied["tied"]) == ["async", "esync"]
    lines = heterogeneity.verdict_lines(close)
    assert "- efficiency on 1,1,4: no winner: esync, async tie" in lines[0]


def network_run(collective, servers, mode, rounds_per_s, samples_per_s):
    """One repeat's row of the network section, made up: lenet at 100 Mbit/s on 4 workers."""
    return {"network": "lenet", "rate": "100mbit", "workers": 4, "collective": collective, "servers": servers,
            "mode": mode, "samples_per_s": samples_per_s, "rounds": 50, "rounds_per_s": rounds_per_s,
            "final_accuracy": 0.8, "sent_per_round": 178_000.0, "textbook_per_round": 178_000.0,
            "busiest_link_utilisation": 0.4, "ps_bytes": [100, 300] if servers == 2 else []}


def network_rows(measured):
    """{(collective, servers, mode): [(rounds/s, samples/s) per repeat]} -> the section's combined rows."""
    return [network.combined([network_run(collective, servers, mode, *repeat) for repeat in repeats])
            for (collective, servers, mode), repeats in measured.items()]


def test_the_network_section_names_a_transport_and_a_mode_only_where_the_repeats_support_it():
    rows = network_rows({("ps", 1, "sync"): [(7.4, 1950), (7.6, 1990), (7.5, 1960), (7.5, 1970), (7.5, 1980)],
                         ("ring", 1, "sync"): [(13.5, 3500), (13.9, 3650), (13.7, 3600), (13.7, 3550), (13.7, 3600)],
                         ("ps", 2, "sync"): [(11.0, 2900), (14.5, 3800), (12.0, 3100), (13.0, 3400), (14.0, 3600)],
                         ("ps", 1, "esync"): [(2.7, 5200), (2.8, 5300), (2.7, 5250), (2.7, 5250), (2.8, 5200)]})

    transports = network.transport_verdicts(rows)[("lenet at 100mbit, 4 workers", "sync")]
    assert transports["winner"] is None and sorted(transports["tied"]) == ["ps ×2", "ring"]
    modes = network.mode_verdicts(rows)[("lenet at 100mbit, 4 workers", "ps ×1")]
    assert modes["winner"] == "esync"
    assert rows[2]["ps_bytes"] == [500, 1500] and rows[1]["spread"]["rounds_per_s"] == pytest.approx(0.1414, abs=1e-4)
    table = "\n".join(network.markdown({"network": {"rows": rows}}))
    assert "| 13.70 ± 0.14 |" in table and "Each number the mean of 5 repeats" in table and "| 25% / 75% |" in table
    assert ("- rounds/s, lenet at 100mbit, 4 workers, sync: no winner: ring, ps ×2 tie; behind ring beyond the spread: "
            "ps ×1\n") in table
    assert "- samples/s, lenet at 100mbit, 4 workers, ps ×1: **esync**" in table

    clear = network_rows({("ps", 1, "sync"): [(7.4, 1950), (7.6, 1990), (7.5, 1960), (7.5, 1970), (7.5, 1980)],
                          ("ring", 1, "sync"): [(13.5, 3500), (13.9, 3650), (13.7, 3600), (13.7, 3550), (13.7, 3600)]})
    assert network.transport_verdicts(clear)[("lenet at 100mbit, 4 workers", "sync")]["winner"] == "ring"
    three = network_rows({("ps", 1, "sync"): [(7.4, 1950), (7.6, 1990), (7.5, 1960)],
                          ("ring", 1, "sync"): [(13.5, 3500), (13.9, 3650), (13.7, 3600)]})
    assert network.transport_verdicts(three)[("lenet at 100mbit, 4 workers", "sync")]["winner"] is None  # p >= 0.1
    once = network_rows({("ps", 1, "sync"): [(7.5, 1960)], ("ring", 1, "sync"): [(13.7, 3600)]})
    assert "One run per row: no leader is named." in network.markdown({"network": {"rows": once}})


def byzantine_run(mode, attacker, accuracy):
    return {"mode": mode, "attacker": attacker, "final_accuracy": accuracy, "samples_per_s": 4000.0,
            "attacker_layers_accepted": 0.0 if mode == "zeno" and attacker else None,
            "honest_layers_accepted": 0.7 if mode == "zeno" else None}


def test_a_byzantine_row_is_the_mean_of_its_repeats_and_the_accuracies_that_tie_are_named_together():
    measured = {("zeno", False): (0.93, 0.92, 0.94, 0.93, 0.93), ("sync", True): (0.10, 0.10, 0.11, 0.10, 0.11),
                ("zeno", True): (0.91, 0.93, 0.92, 0.92, 0.92)}
    rows = [byzantine.over_repeats([byzantine_run(mode, attacker, a) for a in accuracies], byzantine.SPREAD)
            for (mode, attacker), accuracies in measured.items()]
    table = "\n".join(byzantine.markdown({"byzantine": rows, "config": {"byzantine_profile": "1,1,1,1"}}))

    assert rows[2]["final_accuracy"] == pytest.approx(0.92) and rows[1]["attacker_layers_accepted"] is None
    assert "| zeno | yes | 0.920 ± 0.007 | 4000 ± 0 | 0% ± 0% | 70% ± 0% |" in table
    assert "- final accuracy: no winner: zeno, zeno with the attacker tie" in table


def test_the_sync_overhead_table_compares_each_of_ours_with_the_trainer_updating_in_the_same_place():
    row = {"network": "lenet", "ours": 100.0, "trainer": 80.0, "ratio": 1.25, "ratios": [1.25, 1.3],
           "ours_servers_update": 60.0, "ratio_servers_update": 0.75, "trainer_workers_update": 120.0,
           "ratio_workers_update": 0.83}
    earlier = {"network": "lenet", "ours": 100.0, "trainer": 80.0, "ratio": 1.25}  # before the other comparisons

    lines = sync_overhead.markdown({"sync_overhead": [row, earlier]})

    table = [line for line in "\n".join(lines).splitlines() if line.startswith("| lenet")]
    assert table[0].endswith("| 100 | 80 | **1.25** (1.25, 1.30) |") and "MXNet's default" in table[0]
    assert "SSGD --update-on-servers" in table[1] and table[1].endswith("| 60 | 80 | **0.75** |")
    assert "update_on_kvstore=False" in table[2] and table[2].endswith("| 100 | 120 | **0.83** |")
    assert table[3].endswith("| 100 | 80 | **1.25** |") and len(table) == 4


@pytest.mark.slow
@pytest.mark.benchmark
@pytest.mark.beside_others  # it checks that every section is produced, no speed
def test_quick_benchmark_writes_every_section(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)

    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["network"] for r in results["sync_overhead"]] == ["lenet"]
    assert all(r[key] > 0 for r in results["sync_overhead"]
               for key in ("ours", "ours_servers_update", "trainer", "trainer_workers_update", "ours_async",
                           "trainer_async"))
    config = results["config"]
    assert {r["mode"] for r in results["heterogeneity"]} == {*config["modes"], *config["accuracy_profile_modes"],
                                                             *(f"esync-{p}" for p in config["esync_policies"])}
    assert all(0 < r["efficiency"] and r["bytes_per_s_per_worker"] > 0 for r in results["heterogeneity"])
    assert all(0 < r["busy"] <= 1 for r in results["heterogeneity"])
    assert all(0 < r["whole_step_bound"] <= 1 for r in results["heterogeneity"] if r["mode"].startswith("esync"))
    assert results["state_server"]["p99_ms"] >= results["state_server"]["p50_ms"] > 0
    assert set(results["state_server"]["share"]) == {"adaptive", *config["esync_policies"]}  # the default first
    assert {(r["mode"], r["attacker"]) for r in results["byzantine"]} == {tuple(run) for run in config["byzantine_runs"]}
    network = results["network"]
    if "skipped" not in network:  # namespaces need root
        expected = {(run[0], run[3], mode) for run in config["network_runs"] for mode in run[-1]}
        assert {(r["network"], r["collective"], r["mode"]) for r in network["rows"]} == expected
        assert all(r["samples_per_s"] > 0 and 0 < r["busiest_link_utilisation"] < 1.05 for r in network["rows"])
        assert all(r["sent_per_round"] > 0 and r["textbook_per_round"] > 0 for r in network["rows"])
    (pipeline,) = results["input_pipeline"]
    assert pipeline["network"] == "lenet" and all(seconds > 0 for seconds in pipeline["seconds"].values())
    evaluation = results["evaluation"]
    assert {r["mode"] for r in evaluation["runs"]} == set(config["evaluation_modes"])
    assert all(r["snapshots"] > 0 and r["samples_per_s_with"] > 0 and r["samples_per_s_without"] > 0
               for r in evaluation["runs"])
    assert [r["network"] for r in evaluation["snapshot_costs"]] == list(config["snapshot_networks"])
    assert all(r["snapshot_seconds"] > 0 for r in evaluation["snapshot_costs"])
    assert [r["emulation"] for r in results["devices"]] == config["devices_emulations"]
    for row in results["devices"]:
        assert set(row["fast_step_seconds"]) == {"sync", "esync", "local"}
        assert all(seconds > 0 for seconds in row["fast_step_seconds"].values()) and row["all_at_once_seconds"] > 0
        assert set(row["samples_per_s"]) == set(config["devices_throughput_modes"]) and row["esync_slow_over_fast"] > 1
    assert [r["mode"] for r in results["virtual_clock"]["rows"]] == config["virtual_modes"]
    assert all(r["real_wall_seconds"] > 0 and r["virtual_wall_seconds"] > 0 for r in results["virtual_clock"]["rows"])
    assert [(r["workers"], r["rounds"] > 0, r["peak_mb"] > 0) for r in results["virtual_clock"]["scale"]] == [
        (8, True, True)]
    engines = results["virtual_engine"]
    assert engines["same_logs"] and set(engines["runs"]) == {"naive", "threaded"}
    assert all(r["cpu_seconds"] > 0 for runs in engines["runs"].values() for r in runs)
    placed = results["placement"]
    if "skipped" not in placed:  # CPU quotas need root
        assert [r["network"] for r in placed["rows"]] == list(config["placement_networks"])
        assert all(seconds > 0 for r in placed["rows"] for seconds in r["pushpull_seconds"].values())
        assert placed["rows"][0]["step"]["per_step"] > 0 and placed["rows"][0]["step"]["entered_once"] > 0
    table = (tmp_path / "results.md").read_text()
    for heading in ("Sync overhead", "Heterogeneity", "State server", "Byzantine workers", "Network", "Input pipeline",
                    "Evaluation off the training path", "Devices", "Placement of a device's CPU quota",
                    "The virtual job's engine"):
        assert heading in table


def placement_row(network, fast, old, new, step=None):
    """One network's row of the placement section, made up: median seconds of a pushpull in each placement."""
    row = {"network": network, "param_bytes": 177_704, "pushpulls": 50,
           "pushpull_seconds": {"fast": fast, "old": old, "new": new}}
    if step:
        per_step, entered_once = step
        row["step"] = {"steps": 400, "batch": 64, "block": 5, "per_step": per_step, "entered_once": entered_once,
                       "switch": 4e-5, "overhead": per_step / entered_once - 1}
    return row


def test_the_placement_table_gives_each_placement_against_the_fast_device_and_says_where_a_target_is_missed():
    section = {"profile": "1,1,4", "cores": 2, "fast_cores": 0.667, "slowdown": 20,
               "rows": [placement_row("lenet", 0.001, 0.030, 0.0012, step=(0.00715, 0.00700)),
                        placement_row("resnet18-v1", 0.068, 0.598, 0.110)]}
    table = "\n".join(placement.markdown({"placement": section}))

    assert "0.0334 of a core" in table
    assert "| lenet | 0.2 | 50 | 1.0 | 30.0 | 1.2 | 30.0 | 1.20 | yes |" in table
    assert "| resnet18-v1 | 0.2 | 50 | 68.0 | 598.0 | 110.0 | 8.8 | 1.62 | **no** |" in table
    assert "| lenet | 400 | 7.15 | 7.00 | +2.1% | 0.040 | **no** |" in table
    skipped = placement.markdown({"placement": {"skipped": "no cgroup CPU controller"}})
    assert "Skipped: no cgroup CPU controller." in skipped


@pytest.mark.parametrize("args, message", [
    (["--hosts", "netns", "--bandwidth", "10mbit"], "add --only heterogeneity"),
    (["--only", "heterogeneity", "--comm-ratio", "3"], "give --hosts netns too"),
    (["--only", "heterogeneity", "--collective", "ring", "-s", "2"], "--collective ring has no servers"),
])
def test_link_options_that_the_heterogeneity_runs_cannot_take_are_one_line_and_exit_2(tmp_path, args, message):
    result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--out", str(tmp_path), *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)

    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.long  # a benchmark section on shaped links
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tc"), reason="network namespaces need root and iproute2")
def test_the_heterogeneity_section_runs_on_links_set_by_a_ratio_and_says_so(tmp_path):
    prefix = f"esynctest-{os.urandom(3).hex()}-"
    try:
        result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--only", "heterogeneity",
                                 "--out", str(tmp_path), "--hosts", "netns", "--comm-ratio", "4",
                                 "--netns-prefix", prefix, "--netns-subnet", "10.213.94.0/24"],
                                cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        leftover = netns.remove_namespaces(prefix)

    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "results-heterogeneity.json").read_text())["heterogeneity"]
    assert rows and all("--comm-ratio 4" in r["links"] and r["samples_per_s"] > 0 for r in rows)
    assert f"Links: {rows[0]['links']}." in (tmp_path / "results-heterogeneity.md").read_text()
    assert leftover == []


def test_every_transport_of_the_network_section_runs_on_the_same_devices():
    built = {(collective, servers): experiment.build(experiment.options(
        modes="sync", slowdown="1,1,1,1", max_time=1.0, **network.launcher_options("100mbit", collective, servers,
                                                                                   "esync-t-")))
             for collective, servers in network.TRANSPORTS}

    assert len({run.cluster.device_share for run in built.values()}) == 1
    assert len({run.cluster.devices_described for run in built.values()}) == 1
