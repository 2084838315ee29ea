"""Accuracy off the training path, as the launcher measures it: rank 0 never evaluates in its loop, it snapshots the
model every --snapshot-seconds of training and at the end, the evaluator process tests every snapshot, and the
summaries, the table and the figures take their accuracy from the evaluator's log. The evaluator ends with the job,
also when something fails."""
import glob
import os

import pytest

from analysis import summary
from tests.test_launch import LENET, kill_once_training, launcher, pid_of, read_output, recorded_pids, still_running, \
    table_rows
from training import runlog
from training.evaluator import EVALUATOR_LOG, read_evaluations

pytestmark = [pytest.mark.slow, pytest.mark.beside_others]  # nothing here depends on timing

PERIOD = 0.5
MODES = ("esync", "sync")


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    logs = str(tmp_path_factory.mktemp("evaluation") / "logs")
    args = ["--modes", ",".join(MODES), "--devices", "cpu,cpu", "--slowdown", "1,2", "--max-time", "3",
            "--snapshot-seconds", str(PERIOD), *LENET]
    with launcher(args, logs) as proc:
        proc.wait(timeout=300)
        output = read_output(proc)
    return logs, proc.returncode, output


def mode_dir(logs, mode):
    return os.path.join(logs, "lenet", mode)


def rank0_records(logs, mode):
    folder = next(f for _, name, f in runlog.device_folders(mode_dir(logs, mode)) if name.endswith("-worker0"))
    return runlog.DeviceLog(folder).ordered()


def test_the_run_ends_well_and_leaves_no_process_behind(evaluated_run):
    logs, code, output = evaluated_run

    assert code == 0, output
    for mode in MODES:
        assert pid_of(logs, mode, "evaluator") in recorded_pids(logs)
    assert still_running(recorded_pids(logs)) == []


@pytest.mark.parametrize("mode", MODES)
def test_rank_0_never_evaluates_in_its_loop_and_snapshots_at_the_period(evaluated_run, mode):
    logs, _, _ = evaluated_run
    records = rank0_records(logs, mode)

    phases = {phase for record in records for step in record["time"].values() for phase in step}
    snapshot_rounds = [r for r in records if any(runlog.SNAPSHOT in step for step in r["time"].values())]
    evaluations = read_evaluations(os.path.join(mode_dir(logs, mode), EVALUATOR_LOG))

    assert runlog.EVALUATION not in phases and all(r.get("accuracy") is None for r in records)
    assert [e["time"] for e in evaluations] == [r["total_time"] for r in snapshot_rounds]
    gaps = [b["time"] - a["time"] for a, b in zip(evaluations, evaluations[1:-1])]
    assert len(evaluations) >= 3 and min(gaps) >= PERIOD  # a snapshot at the end of the round the period ends in
    assert evaluations[-1]["step"] == records[-1]["num_iters"]  # the last snapshot is the final model
    assert all(e["test_samples"] == 1000 and e["cpu_seconds"] > 0 for e in evaluations)


@pytest.mark.parametrize("mode", MODES)
def test_the_summary_and_the_table_take_their_accuracy_from_the_evaluator(evaluated_run, mode):
    logs, _, output = evaluated_run
    run = summary.load_summary(os.path.join(logs, "lenet"), mode)
    evaluations = read_evaluations(os.path.join(mode_dir(logs, mode), EVALUATOR_LOG))

    row = next(r for r in table_rows(output) if r[0] == mode)

    assert run["accuracy_source"] == "evaluator"
    assert run["final_accuracy"] == evaluations[-1]["accuracy"] > 0.3
    assert run["best_accuracy"] == max(e["accuracy"] for e in evaluations)
    assert run["evaluator"]["points"] == [[e["step"], e["time"], e["accuracy"]] for e in evaluations]
    assert row[3] == f"{run['final_accuracy']:.4f}"


def test_the_figures_draw_the_evaluators_curves(evaluated_run):
    logs, _, output = evaluated_run

    figure = os.path.join(logs, "lenet", "figures", "accuracy_vs_time.png")

    assert os.path.exists(figure) and figure in output


def test_a_failing_evaluator_stops_the_run_and_is_named(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--modes", "sync", "--devices", "cpu,cpu", "--max-time", "120", *LENET]

    code, victim, output = kill_once_training(args, logs, "evaluator")

    assert code == 1, output
    assert f"evaluator (evaluator, pid {victim}) exited with signal SIGKILL" in output
    assert still_running(recorded_pids(logs)) == []


def test_a_target_accuracy_stops_the_job_once_the_evaluator_has_measured_it(tmp_path):
    logs = str(tmp_path / "logs")
    args = ["--modes", "sync", "--devices", "cpu,cpu", "--max-time", "120", "--target-accuracy", "0.5", "--no-figures",
            *LENET]
    with launcher(args, logs) as proc:
        proc.wait(timeout=300)
        output = read_output(proc)

    evaluations = read_evaluations(os.path.join(mode_dir(logs, "sync"), EVALUATOR_LOG))
    records = rank0_records(logs, "sync")
    outputs = "".join(open(path).read() for path in glob.glob(os.path.join(mode_dir(logs, "sync"), "processes",
                                                                             "worker-*.log")))
    assert proc.returncode == 0, output
    assert "reached --target-accuracy 0.5" in outputs  # rank 0's, whichever process ps-lite made rank 0
    assert records[-1]["total_time"] < 120
    assert any(e["accuracy"] >= 0.5 for e in evaluations[:-1])  # measured before training stopped
