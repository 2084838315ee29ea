"""`launch.py paper`: the ESync paper's experiment. Table 1's statistics on made-up repeats, the command lines of
its launcher runs, and its quick form run for real: every cell and figure comes from the repeats' logs."""
import glob
import json
import os
import statistics

import pytest

from analysis import paper, paper_figures, paper_text, timing, tuned
from analysis import summary as summaries
from launcher.studies import paper as paper_command
from launcher.cluster import ROOT
from tests.test_launch import PNG_SIGNATURE, launcher, recorded_pids, still_running
from training import config, esync_variants, runlog
from training.checks import UsageError
from training.evaluator import EVALUATOR_LOG, read_evaluations
from training.files import write_json

TARGET = 0.8


def run(times, accuracies, samples_per_s=100.0, traffic=1.0, elapsed=None):
    """A summary whose evaluating device logged `accuracies` at `times`."""
    points = [[i + 1, t, a] for i, (t, a) in enumerate(zip(times, accuracies))]
    return {"accuracy_device": "n/cpu-rank0", "devices": {"n": {"cpu-rank0": {"accuracy_points": points}}},
            "cluster_throughput": samples_per_s, "traffic_mb_per_s": traffic, "final_accuracy": accuracies[-1],
            "elapsed_time": elapsed or times[-1]}


def grid_of(**runs):
    return {mode: list(repeats) for mode, repeats in runs.items()}


# ----------------------------------------------------------------------------------------------
# Table 1's numbers


def test_statistics_are_the_mean_and_sample_stddev_of_the_repeats_that_have_a_value():
    stats = paper.statistics_of([2.0, None, 4.0])

    assert stats == {"mean": 3.0, "std": statistics.stdev([2.0, 4.0]), "n": 2, "values": [2.0, None, 4.0]}
    assert paper.statistics_of([5.0])["std"] is None
    assert paper.statistics_of([None])["mean"] is None


def test_a_speedup_is_ssgds_time_to_the_target_over_the_modes_within_each_repeat():
    runs = grid_of(sync=[run([10, 20], [0.5, 0.8]), run([30, 40], [0.7, 0.9])],
                   esync=[run([1, 2], [0.85, 0.9]), run([4, 8], [0.6, 0.81])],
                   local=[run([1], [0.9]), run([1], [0.9])])

    table = paper.cells(runs, TARGET)

    assert table["esync"]["speedup"]["values"] == [20 / 1, 40 / 8]
    assert table["sync"]["speedup"]["values"] == [1.0, 1.0]
    assert table["esync"]["time_to_target"]["values"] == [1, 8]
    assert "speedup" not in paper.cells(grid_of(esync=runs["esync"], local=runs["local"]), TARGET)["esync"]


def test_the_time_to_each_threshold_is_averaged_over_the_repeats_that_reached_it():
    runs = grid_of(nbsync=[run([1, 2, 3], [0.6, 0.75, 0.85]), run([2, 4, 6], [0.7, 0.8, 0.82])])

    times = paper.times_to_thresholds(runs, [0.7, 0.8, 0.9])["nbsync"]

    assert [times[t]["values"] for t in ("0.7", "0.8", "0.9")] == [[2, 2], [3, 4], [None, None]]
    assert times["0.8"]["mean"] == 3.5 and times["0.9"]["n"] == 0
    assert paper_text.thresholds_table(paper.times_to_thresholds(runs, [0.8])) == (
        "| mode | to 0.8 |\n|---|---|\n| NBSSGD | 3.5 ± 0.7 |")


def test_where_ssgd_never_reaches_the_target_the_speedup_is_a_lower_bound():
    runs = grid_of(sync=[run([10, 50], [0.3, 0.6]), run([10, 30], [0.3, 0.85])],
                   esync=[run([5], [0.9]), run([2], [0.9])], local=[run([1], [0.9])] * 2)

    table = paper.cells(runs, TARGET)

    # repeat 1: SSGD trained 50 s without reaching 0.8, so its time is >= 50 s and ESync's speedup >= 50 / 5
    assert table["esync"]["speedup"]["values"] == [10.0, 15.0] and table["esync"]["speedup"]["lower_bound"]
    assert paper.format_statistic(table["esync"]["speedup"], ".1f", "×") == "≥ 12.5×"
    assert paper.format_statistic(table["sync"]["time_to_target"], ".1f", " s") == "≥ 40.0 s (1 of 2 reached)"
    assert paper.format_statistic(table["esync"]["time_to_target"], ".1f", " s") == "3.5 ± 2.1 s"


def test_final_accuracy_is_compared_only_where_both_curves_levelled_off():
    levelled = run([10, 20, 30, 40, 55, 60, 70, 80], [0.5, 0.7, 0.8, 0.85, 0.86, 0.86, 0.865, 0.86])
    climbing = run([10, 20, 30, 40, 55, 60, 70, 80], [0.5, 0.6, 0.65, 0.7, 0.72, 0.75, 0.8, 0.83])
    runs = grid_of(esync=[levelled, levelled], local=[levelled, climbing])

    claims = paper.headline(runs, TARGET)

    assert claims["accuracy_compared"] == {"levelled": 1, "of": 2}
    assert claims["accuracy_minus_sequential"]["values"] == [0.0]
    assert "in the 1 of 2 repeats where both had levelled off" in paper_text.describe_headline(claims, TARGET)
    none = paper.headline(grid_of(esync=[climbing], local=[levelled]), TARGET)
    assert "not compared with sequential SGD's: both curves had levelled off in 0 of 1" in \
        paper_text.describe_headline(none, TARGET)


def test_the_headline_pairs_esync_with_ssgd_asgd_and_sequential_sgd_repeat_by_repeat():
    runs = grid_of(esync=[run([1], [0.9], 1000, 2.0), run([2], [0.92], 1200, 3.0)],
                   sync=[run([10], [0.85], 100, 4.0), run([10], [0.88], 200, 4.0)],
                   **{"async": [run([1], [0.9], 900, 20.0), run([1], [0.9], 800, 30.0)]},
                   local=[run([1], [0.91], 500, 0.0), run([1], [0.9], 500, 0.0)])

    claims = paper.headline(runs, TARGET)

    assert claims["speedup_vs_ssgd"]["values"] == [10.0, 5.0]
    assert claims["samples_per_s_vs_ssgd"]["values"] == [10.0, 6.0]
    assert claims["traffic_vs_asgd"]["values"] == [0.1, 0.1]
    assert claims["accuracy_compared"] == {"levelled": 0, "of": 2}  # one evaluation: no curve to judge by
    assert claims["async_later"]["later"] == 0
    assert (claims["local_later"]["later"], claims["local_later"]["of"]) == (0, 2)  # one device as soon or sooner
    assert "| one fast device | 0 of 2 | neither: a tie within the spread |" in paper_text.rivals_table(claims, TARGET)


def test_accuracy_against_ssgd_is_paired_by_repeat_and_names_a_lead_only_beyond_the_spread():
    ahead = grid_of(esync=[run([75], [a]) for a in (0.70, 0.72, 0.68, 0.71, 0.69)],
                    sync=[run([75], [a]) for a in (0.60, 0.59, 0.62, 0.61, 0.60)], local=[run([75], [0.8])] * 5)
    overlapping = grid_of(esync=[run([75], [a]) for a in (0.70, 0.50, 0.65, 0.60, 0.62)],
                          sync=[run([75], [a]) for a in (0.60, 0.66, 0.62, 0.61, 0.63)], local=ahead["local"])

    claim = paper.headline(ahead, TARGET)["accuracy_vs_ssgd"]
    tie = paper.headline(overlapping, TARGET)["accuracy_vs_ssgd"]
    swapped = grid_of(esync=ahead["sync"], sync=ahead["esync"], local=ahead["local"])
    behind = paper.headline(swapped, TARGET)["accuracy_vs_ssgd"]

    assert claim["difference"]["values"] == pytest.approx([0.10, 0.13, 0.06, 0.10, 0.09])
    assert claim["holds"] == "esync" and claim["p_value"] < 0.05
    assert tie["holds"] is None and tie["p_value"] >= 0.05
    assert behind["holds"] == "rival"
    assert "final accuracy +0.096 ± 0.025 against SSGD's after the same training time (ESync's lead holds" in \
        paper_text.describe_headline(paper.headline(ahead, TARGET), TARGET)
    assert "(a tie within the repeats' spread" in paper_text.describe_headline(paper.headline(overlapping, TARGET), TARGET)


def test_claims_that_no_run_measured_say_so():
    never = [run([10, 75], [0.3, 0.6])] * 2
    claims = paper.headline(grid_of(esync=never, sync=never, **{"async": never}, local=never), TARGET)

    text = paper_text.describe_headline(claims, TARGET)

    assert "no speedup to 0.8 against SSGD" in text
    assert "| ASGD | neither reached it |" in paper_text.rivals_table(claims, TARGET)


def test_a_missing_run_names_its_folder(tmp_path):
    with pytest.raises(paper.PaperError, match="repeat-1.lenet.esync: that run did not finish"):
        paper.load_grid(str(tmp_path), "lenet", ("esync",), [1])


# ----------------------------------------------------------------------------------------------
# The command line


def parse(*argv):
    return paper_command.parse(["-ld", "runs", "--dataset", "mnist-5k", *argv])


def test_each_repeat_runs_both_splits_with_its_own_seed_and_the_standalone_with_the_iid_modes():
    ns, networks, runs, rows = parse("--repeats", "2", "--seed", "7", "--max-time", "3", "--esync-variants", "",
                                     "--no-fast-only", "--", "-b", "32")

    assert networks == ("lenet",) and rows == paper_command.PAPER_MODES
    assert [(r.experiment.seed, r.experiment.non_iid) for r in runs] == [(7, False), (7, True), (8, False), (8, True)]
    assert [r.experiment.modes for r in runs[:2]] == [paper_command.PAPER_MODES + ("local",),
                                                      paper_command.PAPER_MODES]
    first = runs[0].experiment
    assert first.cluster.slowdowns == ("1", "1", "1", "1", "20", "20") and first.max_time == 3.0
    assert first.esync_policy == "apply"  # the paper's rule, whatever the project's default
    assert parse("--esync-policy", "adaptive")[2][0].experiment.esync_policy == "adaptive"
    assert first.log_dir == os.path.abspath(os.path.join("runs", "repeat-1"))
    assert first.worker_args == ("-b", "32") and not first.figures
    assert first.snapshot_seconds == 0.5 and first.evaluator_runs  # accuracy off the training path
    assert runs[0].record == os.path.join("runs", "repeat-1", "paper-lenet-iid.json")


def test_splits_choose_the_runs_of_each_repeat_and_the_first_carries_the_standalone_baseline():
    _, _, runs, _ = parse("--repeats", "2", "--splits", "niid", "--esync-variants", "", "--no-fast-only")

    assert [(r.experiment.seed, r.experiment.non_iid) for r in runs] == [(0, True), (1, True)]
    assert runs[0].experiment.modes == paper_command.PAPER_MODES + ("local",)
    _, _, runs, _ = parse("--repeats", "1", "--splits", "niid,iid", "--esync-variants", "", "--no-fast-only")
    assert [(r.experiment.non_iid, "local" in r.experiment.modes) for r in runs] == [(True, True), (False, False)]


def test_a_table_of_one_split_reads_its_runs_alone_and_draws_its_figures(tmp_path):
    network_dir = os.path.join(str(tmp_path), "repeat-1", "lenet")
    for folder, accuracies in (("sync", [0.5, 0.7]), ("local", [0.7, 0.9])):
        summary = {**run([1.0, 2.0], accuracies), "mode": folder, "links": "loopback (no link limit)"}
        os.makedirs(os.path.join(network_dir, folder))
        write_json(summaries.summary_path(network_dir, folder), summary)
    description = {"dataset": "fashion-mnist", "seeds": [0], "esync_policy": "apply"}

    report, grid = paper.build_report(str(tmp_path), "lenet", ("sync",), [1], TARGET, description, splits=("iid",))

    assert report["splits"] == ["iid"] and list(grid) == ["iid"] and list(report["cells"]) == ["iid"]
    text = paper_text.format_report(report)
    assert "## i.i.d. data" in text and "non-i.i.d." not in text
    drawn = paper_figures.draw_all(report, grid, ("sync",), str(tmp_path / "figures"))
    assert len(drawn) == 3 and all(open(path, "rb").read(8) == PNG_SIGNATURE for path in drawn)


def test_the_fast_devices_row_reads_its_own_runs_and_shows_computed_and_applied_samples(tmp_path):
    repeat = os.path.join(str(tmp_path), "repeat-1")
    for folder, mode, accuracies, applied in ((os.path.join(repeat, "lenet"), "sync", [0.5, 0.7], 100.0),
                                              (os.path.join(repeat, "lenet"), "local", [0.7, 0.9], 50.0),
                                              (os.path.join(repeat, "fast-only", "lenet"), "sync", [0.6, 0.85], 80.0)):
        summary = {**run([1.0, 2.0], accuracies), "mode": mode, "applied_throughput": applied,
                   "links": "loopback (no link limit)"}
        os.makedirs(os.path.join(folder, mode))
        write_json(summaries.summary_path(folder, mode), summary)
    description = {"dataset": "fashion-mnist", "seeds": [0], "esync_policy": "apply"}

    report, grid = paper.build_report(str(tmp_path), "lenet", ("sync", "fast-only"), [1], TARGET, description,
                                      splits=("iid",))

    cells = report["cells"]["iid"]
    assert cells["fast-only"]["final_accuracy"]["mean"] == 0.85 and cells["sync"]["final_accuracy"]["mean"] == 0.7
    assert [cells[row]["applied_samples_per_s"]["mean"] for row in ("sync", "fast-only", "local")] == [100, 80, 50]
    text = paper_text.format_report(report)
    assert "| SSGD, fast devices alone |" in text and "applied samples/s" in text


def test_each_esync_variant_is_a_run_of_its_own_beside_the_modes_of_each_repeat_and_split():
    _, _, runs, rows = parse("--repeats", "1", "--esync-variants", "adaptive-drift", "--no-fast-only", "--", "-b",
                             "32")

    assert rows == paper_command.PAPER_MODES + ("esync-adaptive-drift",)
    variant = runs[1].experiment
    assert [r.experiment.non_iid for r in runs] == [False, False, True, True]
    assert variant.modes == ("esync",) and variant.esync_policy == "adaptive"
    assert variant.worker_args == ("-b", "32", *esync_variants.DRIFT_CORRECTION)
    assert variant.log_dir == os.path.abspath(os.path.join("runs", "repeat-1", "esync-adaptive-drift"))
    assert "ESync (adaptive, drift correction)" in runs[1].label
    assert paper.display("esync-adaptive-drift") == "ESync (adaptive, drift correction)"
    assert paper.display("esync", "apply") == "ESync (the paper's rule)"


def test_by_default_the_projects_esync_runs_beside_the_papers_rule_spelled_out():
    _, _, runs, rows = parse("--repeats", "1")

    assert rows == paper_command.PAPER_MODES + ("esync-default", "fast-only")
    default = runs[1].experiment
    assert default.modes == ("esync",) and default.esync_policy == config.default("esync_policy")
    assert paper_command.record_of(default)["esync_policy"] == config.default("esync_policy")  # what --resume keeps
    assert paper.display("esync-default") == f"ESync ({config.default('esync_policy')}, the default)"


def test_ssgd_on_the_fast_devices_alone_is_a_run_of_its_own_where_the_profile_has_stragglers(tmp_path):
    _, _, runs, rows = parse("--repeats", "1", "--splits", "iid", "--esync-variants", "", "--devices",
                             "cpu,cpu1,cpu,cpu,cpu,cpu", "--", "-b", "32")

    assert rows == paper_command.PAPER_MODES + ("fast-only",) and len(runs) == 2
    fast = runs[1].experiment
    assert fast.modes == ("sync",) and fast.cluster.slowdowns == ("1", "1", "1", "1") and not fast.non_iid
    assert fast.cluster.devices == ("cpu", "cpu1", "cpu", "cpu") and fast.worker_args == ("-b", "32")
    assert fast.log_dir == os.path.abspath(os.path.join("runs", "repeat-1", "fast-only"))
    assert paper.display("fast-only") == "SSGD, fast devices alone" in runs[1].label
    assert len(parse("--repeats", "1", "--slowdown", "1,1", "--esync-variants", "")[2]) == 2  # no stragglers: none


def test_resume_keeps_a_run_only_when_it_finished_as_the_same_experiment(tmp_path):
    common = ["-ld", str(tmp_path), "--repeats", "1", "--esync-variants", ""]
    _, _, runs, _ = paper_command.parse([*common, "--max-time", "3"])
    _, _, longer, _ = paper_command.parse([*common, "--max-time", "4"])
    _, _, quieter, _ = paper_command.parse([*common, "--max-time", "3", "--progress-every", "60"])
    _, _, other_workers, _ = paper_command.parse([*common, "--max-time", "3", "--", "-b", "32"])
    os.makedirs(os.path.dirname(runs[0].record))
    write_json(runs[0].record, {"experiment": paper_command.record_of(runs[0].experiment)})

    assert paper_command.finished_before(runs[0]) and not paper_command.finished_before(runs[1])
    assert paper_command.finished_before(quieter[0])      # how often it prints is not what it measured
    assert not paper_command.finished_before(longer[0])
    assert not paper_command.finished_before(other_workers[0])


def test_resume_runs_again_what_a_record_does_not_name(tmp_path, caplog):
    _, _, runs, _ = paper_command.parse(["-ld", str(tmp_path), "--repeats", "1", "--esync-variants", ""])
    assert not paper_command.finished_before(runs[0]) and caplog.records == []  # not run yet: nothing to warn of
    os.makedirs(os.path.dirname(runs[0].record))
    for record in ({"argv": ["--modes", "sync"]}, ["not", "a", "record"]):
        write_json(runs[0].record, record)
        assert not paper_command.finished_before(runs[0])


@pytest.mark.parametrize("argv, message", [
    (["--modes", "esync,local"], "the standalone baseline always runs"),
    (["--repeats", "0"], "must be positive"),
    (["--target", "80"], "not an accuracy"),
    (["--thresholds", "0.8,90"], "must be in \\(0, 1\\]"),
    (["--thresholds", "high"], "give accuracies"),
    (["--slowdown", "1,0.5"], "must be >= 1"),
    (["--", "-m", "sync"], "set by the launcher"),
    (["--esync-variants", "fastest"], "ESync has no configuration 'fastest'"),
    (["--esync-variants", "plan,plan"], "names a configuration twice"),
    (["--splits", "iid,iid"], "names an entry twice"),
    (["--splits", "shuffled"], "give iid, niid or both"),
])
def test_bad_input_is_refused_before_anything_runs(argv, message):
    with pytest.raises(UsageError, match=message):
        parse(*argv)


# ----------------------------------------------------------------------------------------------
# The quick form, for real: its checks do not depend on timing, so its tests run beside the timed ones (conftest.py)

TUNED_RATES = {"sync": 0.0042, "local": 0.0075}


def untimed(test):
    return pytest.mark.slow(pytest.mark.beside_others(test))


@pytest.fixture(scope="module")
def quick_form(tmp_path_factory):
    """2 repeats of sync on a fast and a 20x slower worker, half a second each, and the standalone baseline (ESync's
    own runs are the benchmark's and the full form's; a real run of every ESync policy is in test_esync.py, one of a
    named ESync configuration in the regime map's, test_regimes_runs.py)."""
    logs = str(tmp_path_factory.mktemp("paper") / "logs")
    # every mode at its tuned values, where the cell of each split has some
    tuned_path = str(tmp_path_factory.mktemp("tuned") / "tuned.json")
    for split in paper.SPLITS:
        tuned.write(tuned_path, f"lenet/fashion-mnist/1,20/loopback/{split}",
                    {"schemes": {"sync": {"flags": {"--learning-rate": TUNED_RATES["sync"]}},
                                 "local": {"flags": {"--learning-rate": TUNED_RATES["local"]}}}})
    # no --dataset: the paper's, Fashion-MNIST, as tiny files in its layout where the tests put it (tests/conftest.py)
    args = ["--repeats", "2", "--max-time", "0.5", "--slowdown", "1,20", "--modes", "sync", "--esync-variants", "",
            "--no-fast-only", "--progress-every", "0.5", "--tuned", tuned_path]
    with launcher(args, logs, subprogram=["paper"]) as proc:
        proc.wait(timeout=300)
        with open(proc.output) as f:
            output = f.read()
    return logs, proc.returncode, output


def repeat_folder(logs, repeat, folder):
    return os.path.join(logs, f"repeat-{repeat}", "lenet", folder)


def run_folder(logs, repeat, row, split):
    """Where a Table 1 row's run of one repeat and split logged: the project's ESync in a launcher run of its own."""
    if row == "fast-only":
        return os.path.join(logs, f"repeat-{repeat}", "fast-only", "lenet", runlog.run_folder("sync", non_iid=split == "niid"))
    if row == "esync-default":
        return os.path.join(logs, f"repeat-{repeat}", "esync-default", "lenet",
                            runlog.run_folder("esync", non_iid=split == "niid"))
    return repeat_folder(logs, repeat, runlog.run_folder(row, non_iid=split == "niid" and row != "local"))


def logged_accuracies(mode_dir):
    """The test accuracies the evaluator process logged for the run's snapshots, in step order."""
    return [r["accuracy"] for r in sorted(read_evaluations(os.path.join(mode_dir, EVALUATOR_LOG)),
                                          key=lambda r: r["step"])]


@untimed
def test_the_quick_form_exits_0_and_leaves_no_process_behind(quick_form):
    logs, code, output = quick_form

    assert code == 0, output
    assert still_running(recorded_pids(os.path.join(logs, "repeat-1"))) == []
    assert still_running(recorded_pids(os.path.join(logs, "repeat-2"))) == []


@untimed
def test_every_cell_of_table_1_comes_from_the_repeats_logs(quick_form):
    logs, _, output = quick_form
    report = json.load(open(os.path.join(logs, "lenet", paper.RESULTS_FILE)))

    assert report["repeats"] == [1, 2] and report["seeds"] == [0, 1] and report["dataset"] == "fashion-mnist"
    for split in paper.SPLITS:
        assert list(report["cells"][split]) == ["sync", "local"]
        for mode, cells in report["cells"][split].items():
            finals = [logged_accuracies(run_folder(logs, r, mode, split))[-1] for r in (1, 2)]
            assert cells["final_accuracy"]["values"] == finals, (split, mode)
            assert cells["final_accuracy"]["n"] == 2 and cells["samples_per_s"]["n"] == 2, (split, mode)
            assert all(v > 0 for v in cells["samples_per_s"]["values"]), (split, mode)
        assert report["cells"][split]["sync"]["traffic_mb_per_s"]["n"] == 2
    for split in paper.SPLITS:  # the time to each of the default thresholds, per repeat
        assert list(report["thresholds"][split]["sync"]) == ["0.7", "0.8", "0.9"]
        assert all(len(t["values"]) == 2 for t in report["thresholds"][split]["sync"].values())
    table = open(os.path.join(logs, "lenet", paper.TABLE_FILE)).read()
    assert table.count("| Sync |") == table.count("| Standalone |") == 4  # Table 1 and the thresholds, per split
    assert table in output + "\n"
    assert report["command"].startswith(f"python launch.py paper --logs {logs} --repeats 2") and report["wall_seconds"] > 0
    assert table.endswith(f"Run by ({timing.describe(report['wall_seconds'])}):\n\n    {report['command']}\n\n")


@untimed
def test_with_tuned_values_every_run_of_the_quick_form_trains_at_its_schemes(quick_form):
    logs, _, _ = quick_form
    for repeat in (1, 2):
        for row, split in (("sync", "iid"), ("sync", "niid"), ("local", "iid")):
            folders = [folder for *_, folder in runlog.device_folders(run_folder(logs, repeat, row, split))]
            assert folders and all(runlog.read_meta(folder)["config"]["learning_rate"] == TUNED_RATES[row]
                                   for folder in folders), (repeat, row, split)


@untimed
def test_the_standalone_baseline_runs_once_per_repeat_on_the_fastest_device_with_each_repeats_seed(quick_form):
    logs, _, _ = quick_form

    for repeat, seed in ((1, 0), (2, 1)):
        assert not os.path.exists(repeat_folder(logs, repeat, "local-niid"))
        metas = [runlog.read_meta(f) for _, _, f in runlog.device_folders(repeat_folder(logs, repeat, "local"))]
        assert [(m["slowdown"], m["config"]["seed"]) for m in metas] == [(1.0, seed)]
        workers = glob.glob(os.path.join(repeat_folder(logs, repeat, "sync-niid"), "*", "*", "meta.json"))
        assert {json.load(open(p))["config"]["seed"] for p in workers} == {seed}


@untimed
def test_figures_3_to_5_are_drawn(quick_form):
    logs, _, output = quick_form

    figures = sorted(glob.glob(os.path.join(logs, "lenet", "figures", "*.png")))

    assert [os.path.basename(f) for f in figures] == ["figure3_accuracy.png", "figure4_throughput_traffic.png",
                                                     "figure5_compute_ratio.png"]
    for figure in figures:
        with open(figure, "rb") as f:
            assert f.read(8) == PNG_SIGNATURE
        assert figure in output


@untimed
def test_each_run_reports_its_progress_table_and_process_outputs(quick_form):
    logs, _, output = quick_form

    progress = [line for line in output.splitlines() if line.startswith("[sync 1/2]") and "samples/s" in line]
    assert len(progress) >= 2 and "finished:" in progress[-1], output
    assert "[local 2/2] 1 worker (cpu), no cluster" in output
    outputs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(repeat_folder(logs, 1, "sync"),
                                                                          "processes", "*.log")))
    assert outputs == ["evaluator.log", "scheduler.log", "server-0.log", "worker-0.log", "worker-1.log"]
    assert output.count("[paper ") == 4  # per repeat and split: one launcher run of the modes


def test_missing_data_ends_the_command_in_one_line_before_any_run(tmp_path):
    import subprocess
    import sys

    from tests.test_launch import LAUNCH_PY, launcher_env

    result = subprocess.run([sys.executable, LAUNCH_PY, "paper", "-ld", str(tmp_path / "logs"),
                             "-dd", str(tmp_path / "nowhere")], cwd=ROOT, env=launcher_env(), capture_output=True,
                            text=True, timeout=60)

    assert result.returncode == 2
    assert result.stderr.startswith("launch.py paper: error:") and len(result.stderr.splitlines()) == 1
    assert "not found" in result.stderr and not os.path.exists(tmp_path / "logs" / "repeat-2")
