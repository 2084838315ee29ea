"""The run-log format's one owner (training/runlog.py): writing a round, reading the three generations of logs,
and following a run while it trains."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from training import runlog


def steps_of(count, aggregation_phase=runlog.GLOBAL_AGGREGATE):
    timings = [{runlog.GET_BATCH: 0.001, runlog.FORWARD_BACKWARD: 0.01} for _ in range(count)]
    timings[-1][aggregation_phase] = 0.02
    return timings


def write_rounds(folder, rounds):
    writer = runlog.RunLogWriter(str(folder), "node", "cpu-rank0", {"rank": 0})
    for n, count in enumerate(rounds, 1):
        writer.write(n, steps_of(count), num_samples=32 * count, total_time=0.1 * n, accuracy=0.5 if n == 2 else None)
    writer.flush()
    writer.close()
    return writer.folder


ENDING_AT_ONCE = textwrap.dedent("""
    import sys, time
    from training import files, runlog
    from training.faults import failures
    write_text = files.write_text
    files.write_text = lambda *args: (time.sleep(0.2), write_text(*args))  # a disk that lags behind the rounds
    writer = runlog.RunLogWriter(sys.argv[1], "node", "cpu-rank0", {"rank": 0})
    for n in range(1, 6):
        writer.write(n, [{runlog.FORWARD_BACKWARD: 0.01}], num_samples=32, total_time=0.1 * n)
    failures.end_now(failures.EXIT_INTERRUPTED)
""")


def test_a_process_that_ends_at_once_still_writes_the_rounds_it_handed_over(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", ENDING_AT_ONCE, str(tmp_path)], cwd=root, timeout=60)
    assert result.returncode == 130
    folder = os.path.join(tmp_path, "node", "cpu-rank0")
    assert sorted(os.listdir(folder)) == sorted(["meta.json"] + [f"iter-{n}.txt" for n in range(1, 6)])


def test_a_round_is_encoded_when_handed_over_and_a_failed_write_is_raised_by_the_next_call(tmp_path):
    writer = runlog.RunLogWriter(str(tmp_path), "node", "cpu-worker0", {"rank": 0})
    steps = steps_of(1)
    writer.write(1, steps, num_samples=32, total_time=0.1)
    steps[-1][runlog.CHECKPOINT] = 5.0  # timed later into the same dict: the round handed over stays as it was
    writer.flush()
    assert runlog.CHECKPOINT not in json.load(open(os.path.join(writer.folder, "iter-1.txt")))["time"]["0"]

    os.rename(writer.folder, writer.folder + "-gone")
    writer.write(2, steps, num_samples=32, total_time=0.2)
    with pytest.raises(FileNotFoundError):
        writer.flush()
    with pytest.raises(FileNotFoundError):
        writer.write(3, steps, num_samples=32, total_time=0.3)
    writer.close()
    assert not writer._writer.is_alive()


def test_a_round_is_written_as_the_original_scripts_wrote_it(tmp_path):
    folder = write_rounds(tmp_path, [3, 1])

    with open(os.path.join(folder, "iter-2.txt")) as f:
        record = json.load(f)

    assert sorted(os.listdir(folder)) == ["iter-1.txt", "iter-2.txt", "meta.json"]
    assert record["num_iters"] == 2 and list(record["time"]) == ["0"] and record["accuracy"] == 0.5
    assert runlog.read_meta(folder)["log_format"] == runlog.FORMAT


def test_written_rounds_read_back_numbered_from_1_with_their_local_steps(tmp_path):
    folder = write_rounds(tmp_path, [3, 1, 2])

    device = runlog.DeviceLog(folder)

    assert sorted(device.rounds) == [1, 2, 3]
    assert [runlog.local_steps(r) for r in device.ordered()] == [3, 1, 2]
    assert [runlog.aggregation_seconds(r) for r in device.ordered()] == [0.02] * 3


def original_round(n, local_steps):
    """A round as the original scripts' utils.Measure wrote it: num_iters is the global iteration."""
    timings = {str(i): {"check ready": 0.001, "get_batch": 0.002, "forward and backward": 0.03, "local update": 0.004}
               for i in range(local_steps)}
    timings[str(local_steps - 1)].update({"global update": 0.05, "evaluation": 0.5})
    return {"num_iters": n, "time": timings, "num_samples": 64 * local_steps, "total_time": 0.2 * n,
            "accuracy": 0.1 * n}


def test_logs_of_the_original_scripts_give_the_local_steps_they_hold(tmp_path):
    folder = tmp_path / "gpu0"
    folder.mkdir()
    held = {1: 4, 2: 3, 3: 5}
    for n, count in held.items():
        (folder / f"iter-{n}.txt").write_text(json.dumps(original_round(n, count)))

    device = runlog.DeviceLog(str(folder))

    assert device.meta == {}
    assert {n: runlog.local_steps(r) for n, r in device.rounds.items()} == held


def test_logs_written_before_log_format_2_are_numbered_from_0_and_read_from_1(tmp_path):
    folder = tmp_path / "cpu-rank0"
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"rank": 0}))  # no log_format: the earlier generation
    for n in range(3):
        record = {"num_iters": 2, "time": {"0": {"get_batch": 0.1}, "1": {"global update": 0.2}},
                  "num_samples": 128, "total_time": 0.5 * (n + 1)}
        (folder / f"iter-{n}.txt").write_text(json.dumps(record))

    device = runlog.DeviceLog(str(folder))

    assert sorted(device.rounds) == [1, 2, 3]
    assert device.rounds[1]["total_time"] == 0.5 and runlog.local_steps(device.rounds[3]) == 2


@pytest.mark.parametrize("content, problem", [
    ('{"num_iters": 1, "ti', None),
    ('[1, 2]', None),
    ('{"time": {"0": {"get_batch": 0.1}}, "num_samples": 64}', "total_time"),
    ('{"time": {"0": {"get_batch": "slow"}}, "num_samples": 64, "total_time": 1}', "phase time"),
    ('{"time": {}, "num_samples": 64, "total_time": 1}', "'time'"),
])
def test_an_unusable_round_is_skipped_with_a_warning_naming_it(tmp_path, caplog, content, problem):
    folder = write_rounds(tmp_path, [1, 1])
    with open(os.path.join(folder, "iter-3.txt"), "w") as f:
        f.write(content)

    device = runlog.DeviceLog(folder)

    assert sorted(device.rounds) == [1, 2]
    assert "iter-3.txt" in caplog.text and (problem is None or problem in caplog.text)


def test_unfinished_writes_and_worker_files_are_not_rounds(tmp_path, caplog):
    folder = write_rounds(tmp_path, [1])
    for name in (".iter-2.txt.k3j9.tmp", runlog.FINAL_MODEL_FILE):
        with open(os.path.join(folder, name), "w") as f:
            f.write("x")

    device = runlog.DeviceLog(folder)

    assert sorted(device.rounds) == [1] and caplog.text == ""


def test_a_restarted_worker_slot_removes_the_later_rounds_and_unfinished_files_of_the_run_before(tmp_path):
    folder = write_rounds(tmp_path, [1, 1, 1, 1])
    open(os.path.join(folder, ".iter-5.txt.x1y2.tmp"), "w").close()

    runlog.RunLogWriter(str(tmp_path), "node", "cpu-rank0", {"rank": 0}, completed_rounds=2)

    assert sorted(os.listdir(folder)) == ["iter-1.txt", "iter-2.txt", "meta.json"]


@pytest.mark.parametrize("device, index, role, name", [
    ("cpu", None, "worker", "cpu"), ("gpu1", 3, "worker", "gpu1-worker3"),
    ("cpu", 4, "validator", "cpu-worker4-validator"),
])
def test_device_folders_are_named_and_parsed_in_one_place(device, index, role, name):
    assert runlog.device_folder(device, index, role) == name
    assert runlog.index_in_folder(name) == index
    assert runlog.is_validator_folder(name) == (role == "validator")


@pytest.mark.parametrize("name, index, device", [("gpu1-rank3", 3, "gpu1"), ("cpu-rank4-validator", 4, "cpu"),
                                                 ("gpu0", None, "gpu0")])
def test_the_folders_of_older_logs_name_their_worker_too(name, index, device):
    assert runlog.index_in_folder(name) == index and runlog.without_index(name) == device


def test_the_follower_reads_each_new_round_once_and_leaves_the_validator_out(tmp_path):
    mode_dir = tmp_path / "esync"
    worker = runlog.RunLogWriter(str(mode_dir), "node", "cpu-rank0", {"rank": 0})
    validator = runlog.RunLogWriter(str(mode_dir), "node", "cpu-rank1-validator", {"rank": 1})
    follower = runlog.RunFollower(str(mode_dir))
    worker.write(1, steps_of(2), num_samples=64, total_time=0.5)
    validator.write(1, steps_of(1), num_samples=999, total_time=9.0)
    worker.flush()
    validator.flush()

    follower.update()
    worker.write(2, steps_of(1), num_samples=32, total_time=1.0, accuracy=0.7)
    worker.flush()
    follower.update()
    follower.update()

    assert (follower.rounds, follower.samples, follower.training_time, follower.accuracy) == (2, 96, 1.0, 0.7)
    assert follower.throughput == 96


def test_a_device_under_a_cpu_quota_writes_its_rounds_itself(tmp_path):
    """Its threads all share the quota while it computes: the round is written by the loop, outside the quota."""
    writer = runlog.RunLogWriter(str(tmp_path), "node", "cpu-worker0", {"rank": 0}, in_thread=False)
    writer.write(1, steps_of(1), num_samples=32, total_time=0.1)

    assert os.path.exists(os.path.join(writer.folder, "iter-1.txt")) and not writer._writer.is_alive()
