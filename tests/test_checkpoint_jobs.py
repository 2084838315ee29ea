"""Real ps-lite jobs with checkpoints: an evaluator process beside a sync job, and a killed job resumed."""
import os
import re
import signal
import time

import mxnet as mx
import pytest

from launcher.cluster import ROOT, ProcessGroup
from data import load_test_set
from tests.jobs import (
    LENET_ARGS,
    SAMPLE_DATA,
    finish,
    iter_records,
    meta,
    start_job,
    worker_folders,
)
from training.checkpoints import damage, read_checkpoint, saved_steps
from training.evaluator import EVALUATOR_LOG, read_evaluations
from training.model import Model

pytestmark = pytest.mark.slow  # real processes

MAIN = os.path.join(ROOT, "main.py")


def checkpoint_model(train_dir, step):
    model = Model("lenet", [mx.cpu()], (1, 28, 28))
    model.load(os.path.join(train_dir, f"ckpt-{step}.params"))
    return model


def rank0(folders):
    return next(f for f in folders if meta(f)["rank"] == 0)


def test_the_evaluator_beside_a_sync_job_tests_each_checkpoint_once_as_inline_evaluation_would(processes,
                                                                                             tmp_path):
    train_dir, log_dir = str(tmp_path / "train"), str(tmp_path / "logs")
    evaluator = processes.start_python("evaluator", [MAIN, "-m", "evaluate", "--train-dir", train_dir, "-ld", log_dir,
                                                     "--eval-timeout", "120", *LENET_ARGS],
                                       {"OMP_NUM_THREADS": "1"})  # one core, as each worker has
    # Rank 0 also evaluates at every checkpoint's step, to compare with.
    workers = start_job(processes, "sync", LENET_ARGS + ["--max-steps", "60", "--train-dir", train_dir,
                                                         "--save-freq", "10", "-e", "10"], log_dir=log_dir)

    finish(processes, workers, timeout=180)
    assert processes.wait([evaluator], timeout=60) and evaluator.poll() == 0, open(evaluator.output).read()

    records = read_evaluations(os.path.join(log_dir, EVALUATOR_LOG))
    assert [r["step"] for r in records] == saved_steps(train_dir) == [10, 20, 30, 40, 50, 60]
    images, labels = load_test_set(SAMPLE_DATA, "mnist-5k")
    inline = iter_records(rank0(worker_folders(log_dir)))
    for r in records:
        assert r["accuracy"] == checkpoint_model(train_dir, r["step"]).accuracy(images, labels)
        assert r["accuracy"] == inline[r["step"] - 1]["accuracy"]
        assert r["time"] == read_checkpoint(train_dir, r["step"])["time"] == inline[r["step"] - 1]["total_time"]


def test_rank_0_starts_the_evaluator_beside_itself_and_exits_once_it_tested_the_final_snapshot(processes, tmp_path):
    snapshots, log_dir = str(tmp_path / "snapshots"), str(tmp_path / "logs")
    workers = start_job(processes, "sync", LENET_ARGS + ["--max-steps", "40", "--snapshot-seconds", "0.3",
                                                         "--snapshot-dir", snapshots, "--evaluator-beside"],
                        log_dir=log_dir)

    outputs = finish(processes, workers, timeout=180)

    records = read_evaluations(os.path.join(log_dir, EVALUATOR_LOG))
    assert records and records[-1]["step"] == 40 and records[-1]["accuracy"] > 0.1, outputs
    assert [r["step"] for r in records] == sorted(saved_steps(snapshots))  # every snapshot, once
    started = re.findall(r"evaluator beside this worker: pid (\d+)", outputs)
    assert len(started) == 1, outputs  # by the worker that snapshots only
    assert not running(int(started[0])), "the evaluator outlived the worker that waited for it"


def test_the_evaluator_beside_a_worker_ends_with_the_worker_when_it_dies(processes, tmp_path):
    snapshots, log_dir = str(tmp_path / "snapshots"), str(tmp_path / "logs")
    workers = start_job(processes, "sync", LENET_ARGS + ["--max-time", "60", "--snapshot-seconds", "0.3",
                                                         "--snapshot-dir", snapshots, "--evaluator-beside"],
                        log_dir=log_dir)
    deadline = time.monotonic() + 60
    while not read_evaluations(os.path.join(log_dir, EVALUATOR_LOG)) and time.monotonic() < deadline:
        time.sleep(0.2)
    output = "".join(open(w.output).read() for w in workers)
    pid = int(re.search(r"evaluator beside this worker: pid (\d+)", output).group(1))
    rank0 = next(w for w in workers if f"pid {pid}" in open(w.output).read())

    os.kill(rank0.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid), "the evaluator outlived the worker that started it"


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_killed_sync_job_resumes_from_its_last_checkpoint_with_its_step_and_weights(processes, tmp_path):
    train_dir, log_dir = str(tmp_path / "train"), str(tmp_path / "logs")
    job = LENET_ARGS + ["--train-dir", train_dir, "--save-freq", "20", "-e", "0", "--digest-weights",
                        "--momentum", "0.9"]
    start_job(processes, "sync", job + ["--max-time", "300"], log_dir=log_dir)
    deadline = time.monotonic() + 120
    while not three_checkpoints_logged(train_dir, log_dir) and time.monotonic() < deadline and not processes.failed():
        time.sleep(0.1)
    processes.stop()  # the whole job, by PID, with no chance to finish
    killed_at = time.time()
    step = saved_steps(train_dir)[-1]
    assert step >= 60

    with ProcessGroup(str(tmp_path / "resumed")) as resumed:
        workers = start_job(resumed, "sync", job + ["--resume", "--max-steps", str(step + 20)], log_dir=log_dir)
        finish(resumed, workers, timeout=180)

    digest = checkpoint_model(train_dir, step).digest()
    for worker in workers:
        output = open(worker.output).read()
        assert re.search(rf"weights digest at global step {step}: {digest}", output), output[-2000:]
    for folder in worker_folders(log_dir):
        rounds = range(1, step + 21)
        assert sorted(os.listdir(folder)) == sorted([f"iter-{n}.txt" for n in rounds] + ["meta.json",
                                                                                         "model-final.params"])
        rewritten = [n for n in rounds if os.path.getmtime(os.path.join(folder, f"iter-{n}.txt")) > killed_at]
        assert rewritten == list(range(step + 1, step + 21))  # the first new round is the one after the checkpoint
        records = iter_records(folder)
        assert records[step]["total_time"] > read_checkpoint(train_dir, step)["time"]  # records[step]: round step+1
    assert saved_steps(train_dir)[-1] == step + 20


def three_checkpoints_logged(train_dir, log_dir):
    """Three checkpoints saved, and every worker's log of the last one's round written (the other worker writes its
    own a moment after rank 0's checkpoint: docs/checkpoints.md)."""
    steps = saved_steps(train_dir)
    folders = worker_folders(log_dir)
    return (len(steps) >= 3 and len(folders) == 2
            and all(os.path.exists(os.path.join(folder, f"iter-{steps[-1]}.txt")) for folder in folders))


def damage_parameters(train_dir, step):
    path = os.path.join(train_dir, f"ckpt-{step}.params")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def checkpointed_job(tmp_path, steps):
    """Checkpoints of a finished 2-worker sync job at `steps` (saved every 10 global iterations)."""
    train_dir, log_dir = str(tmp_path / "train"), str(tmp_path / "logs")
    job = LENET_ARGS + ["--train-dir", train_dir, "--save-freq", "10", "-e", "0", "--sync-timeout", "10"]
    with ProcessGroup(str(tmp_path / "first")) as first:
        finish(first, start_job(first, "sync", job + ["--max-steps", str(steps[-1])], log_dir=log_dir), 120)
    assert saved_steps(train_dir) == steps
    return job, train_dir, log_dir


def test_a_resumed_job_skips_a_damaged_checkpoint_and_trains_on_from_the_one_before(processes, tmp_path):
    job, train_dir, log_dir = checkpointed_job(tmp_path, [10, 20])
    damage_parameters(train_dir, 20)

    workers = start_job(processes, "sync", job + ["--resume", "--max-steps", "30"], log_dir=log_dir)
    finish(processes, workers, timeout=120)

    for worker in workers:
        output = open(worker.output).read()
        assert f"checkpoint at step 20 in {train_dir} is damaged (ckpt-20.params holds" in output, output
    rank0_output = next(open(w.output).read() for w in workers if "resuming at global step" in open(w.output).read())
    assert "resuming at global step 10 from" in rank0_output
    assert saved_steps(train_dir) == [10, 20, 30]
    assert damage(train_dir, 20) is None  # the job saved step 20 again on its way to 30
    for folder in worker_folders(log_dir):
        assert len(iter_records(folder)) == 30


def test_with_every_checkpoint_damaged_every_process_exits_2_in_one_line(processes, tmp_path):
    job, train_dir, log_dir = checkpointed_job(tmp_path, [10])
    damage_parameters(train_dir, 10)
    resume = ["--resume", "--train-dir", train_dir, "--sync-timeout", "10"]

    started = time.monotonic()
    start_job(processes, "sync", job + ["--resume"], log_dir=log_dir, ps_args=resume)
    ended = processes.wait(processes.procs, timeout=10 + 10)

    assert ended, "still running 20 s after the start"
    print(f"every process ended {time.monotonic() - started:.1f} s after the start")
    for proc in processes.procs:
        errors = [line for line in open(proc.output).read().splitlines() if "error" in line.lower()]
        assert proc.poll() == 2, f"{proc.name}: {errors}"
        assert len(errors) == 1 and f"--resume: every checkpoint in {train_dir} is damaged" in errors[0]
