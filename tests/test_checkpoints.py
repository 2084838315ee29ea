"""Checkpoint files, the evaluator's exactly-once pickup, --resume, and their bad input."""
import argparse
import json
import os
import pickle
import zlib

import mxnet as mx
import numpy as np
import pytest

from training import config
from launcher.cluster import free_port
from data import BatchStream, load_dataset, load_test_set
from tests.jobs import SAMPLE_DATA, run_main
from training import checkpoints
from training.checkpoints import CheckpointError, CheckpointWriter, check_train_dir, saved_steps
from training.evaluator import EVALUATOR_LOG, EvaluationLog, Evaluator, pending_steps, read_evaluations
from training.files import atomic_write
from training.loop import StopCondition
from training.model import Model
from training.schemes.base import _updaters
from training.schemes.esync import ESync
from training.schemes.local import Local

BASE = ["-n", "lenet", "--dataset", "mnist-5k", "-dd", SAMPLE_DATA, "-c", "1"]
DESCRIPTION = {"mode": "sync", "network": "lenet", "dataset": "mnist-5k"}


def lenet(seed=0):
    return Model("lenet", [mx.cpu()], (1, 28, 28), seed)


def args_for(*argv):
    return config.parse_args(list(BASE) + list(argv))


def write_checkpoints(train_dir, steps, final=True):
    """Checkpoints of differently seeded lenets at `steps`; returns {step: model}."""
    writer = CheckpointWriter(str(train_dir), 10, DESCRIPTION)
    models = {}
    for step in steps:
        models[step] = lenet(seed=step)
        save = writer.finish if final and step == steps[-1] else writer.save
        save(step, step / 10.0, 0.0, models[step], None)
    return models


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


# ----------------------------------------------------------------------------------------------
# Checkpoint files


def test_a_checkpoint_is_its_params_states_and_json_and_the_marker_follows_the_last(tmp_path):
    write_checkpoints(tmp_path, [10, 20])

    assert saved_steps(str(tmp_path)) == [10, 20]
    assert checkpoints.final_step(str(tmp_path)) == 20
    meta = checkpoints.read_checkpoint(str(tmp_path), 20)
    assert meta["step"] == 20 and meta["time"] == 2.0 and meta["network"] == "lenet"
    assert os.path.exists(tmp_path / "ckpt-20.params")


def test_parameters_without_their_json_are_not_a_checkpoint(tmp_path):
    write_checkpoints(tmp_path, [10], final=False)
    lenet().save(str(tmp_path / "ckpt-20.params"))  # rank 0 killed between the two files

    assert saved_steps(str(tmp_path)) == [10]


def test_a_write_killed_halfway_leaves_no_file_behind(tmp_path):
    def killed(path):
        with open(path, "w") as f:
            f.write('{"step": 1')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(str(tmp_path / "ckpt-1.json"), killed)

    assert os.listdir(tmp_path) == []


def test_a_new_writer_removes_the_marker_and_leftovers_of_a_killed_process(tmp_path):
    write_checkpoints(tmp_path, [10])
    (tmp_path / ".ckpt-20.params.abc.tmp").write_text("half")

    CheckpointWriter(str(tmp_path), 10, DESCRIPTION)

    assert sorted(os.listdir(tmp_path)) == ["ckpt-10.json", "ckpt-10.params"]


def test_the_loaded_checkpoint_has_the_saved_weights(tmp_path):
    models = write_checkpoints(tmp_path, [10])
    model = lenet(seed=99)

    model.load(str(tmp_path / "ckpt-10.params"))

    assert model.digest() == models[10].digest()


def test_the_local_optimizer_state_survives_a_checkpoint(tmp_path):
    args = args_for("--momentum", "0.9")
    data = load_dataset(SAMPLE_DATA, "mnist-5k")
    trained = Local(Local.Options.from_args(args), lenet(), None)
    trained.setup()
    trained.model.forward_backward(data.train_images[:64], data.train_labels[:64])
    trained.local_step()
    CheckpointWriter(str(tmp_path), 1, DESCRIPTION).save(1, 0.5, 0.0, trained.model, trained.local_optimizer_states())
    restarted = Local(Local.Options.from_args(args), lenet(), None)
    restarted.setup()

    checkpoints.load_optimizer_state(checkpoints.ResumePoint(1, 0.5, 0.0, None, str(tmp_path / "ckpt-1.states")),
                                     restarted)

    assert restarted.local_optimizer_states() == trained.local_optimizer_states()
    assert pickle.loads(trained.local_optimizer_states())  # momentum of every trained parameter


def esync_worker(*flags, model=None):
    """An ESync worker's local optimizer on lenet, without its cluster (setup() would join one)."""
    scheme = ESync(ESync.Options.from_args(args_for("-m", "esync", *flags)), model or lenet(), None)
    scheme.local_trainer(scheme.options.local_lr, scheme.options.local_optimizer)
    return scheme


def local_steps(scheme, data, count):
    for _ in range(count):
        scheme.model.forward_backward(data.train_images[:64], data.train_labels[:64])
        scheme.local_step()


def resumed(tmp_path, trained, *flags):
    """A new worker of `flags` resumed from a checkpoint of `trained`."""
    CheckpointWriter(str(tmp_path), 1, DESCRIPTION).save(1, 0.5, 0.0, trained.model, trained.local_optimizer_states())
    model = lenet(seed=7)
    model.load(str(tmp_path / "ckpt-1.params"))
    restarted = esync_worker(*flags, model=model)
    checkpoints.load_optimizer_state(checkpoints.ResumePoint(1, 0.5, 0.0, None, str(tmp_path / "ckpt-1.states")),
                                     restarted)
    return restarted


def test_a_resumed_adam_takes_the_step_the_uninterrupted_one_takes(tmp_path):
    data = load_dataset(SAMPLE_DATA, "mnist-5k")
    trained = esync_worker("--local-optimizer", "adam", "--wd", "0.001")
    local_steps(trained, data, 2)
    restarted = resumed(tmp_path, trained, "--local-optimizer", "adam", "--wd", "0.001")
    fresh = esync_worker("--local-optimizer", "adam", "--wd", "0.001", model=lenet(seed=7))
    fresh.model.load(str(tmp_path / "ckpt-1.params"))

    for scheme in (trained, restarted, fresh):
        local_steps(scheme, data, 1)

    # Adam's moments and its step count (bias correction) came back; without them the step differs.
    assert restarted.model.digest() == trained.model.digest()
    assert fresh.model.digest() != trained.model.digest()


def test_a_checkpoint_of_another_optimizer_leaves_this_one_fresh_with_a_warning(tmp_path, caplog):
    data = load_dataset(SAMPLE_DATA, "mnist-5k")
    trained = esync_worker("--local-optimizer", "momentum")
    local_steps(trained, data, 1)

    restarted = resumed(tmp_path, trained, "--local-optimizer", "adam")
    local_steps(restarted, data, 1)

    assert "holds the state of a momentum optimizer, this run's is adam" in caplog.text
    assert pickle.loads(restarted.local_optimizer_states())["update_counts"][0] == 1


def test_an_optimizer_state_saved_before_the_rule_was_recorded_still_loads(tmp_path):
    data = load_dataset(SAMPLE_DATA, "mnist-5k")
    trained = Local(Local.Options.from_args(args_for("--momentum", "0.9")), lenet(), None)
    trained.setup()
    local_steps(trained, data, 1)
    old_states = _updaters(trained.trainer)[0].get_states(dump_optimizer=False)  # the format of earlier releases
    restarted = Local(Local.Options.from_args(args_for("--momentum", "0.9")), lenet(), None)
    restarted.setup()

    restarted.load_local_optimizer_states(old_states)

    assert pickle.loads(restarted.local_optimizer_states())["states"] == old_states


# ----------------------------------------------------------------------------------------------
# What --resume and a new job accept


def test_resume_without_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        check_train_dir(args_for("--train-dir", str(tmp_path), "--resume"))


def test_resume_of_another_network_is_refused(tmp_path):
    write_checkpoints(tmp_path, [10])

    with pytest.raises(CheckpointError, match="network lenet, not mlp"):
        check_train_dir(args_for("--train-dir", str(tmp_path), "--resume", "-n", "mlp"))


def test_a_new_job_does_not_mix_its_checkpoints_with_an_earlier_one(tmp_path):
    write_checkpoints(tmp_path, [10])

    with pytest.raises(CheckpointError, match="add --resume"):
        check_train_dir(args_for("--train-dir", str(tmp_path)))


def test_resume_point_is_the_latest_checkpoint(tmp_path):
    write_checkpoints(tmp_path, [10, 20, 30])

    point = check_train_dir(args_for("--train-dir", str(tmp_path), "--resume"))

    assert (point.step, point.elapsed, point.params) == (30, 3.0, str(tmp_path / "ckpt-30.params"))


# ----------------------------------------------------------------------------------------------
# Damaged checkpoints


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def flip_a_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_checkpoint_records_the_size_and_crc32_of_each_of_its_files(tmp_path):
    write_checkpoints(tmp_path, [10])
    params = tmp_path / "ckpt-10.params"

    files = checkpoints.read_checkpoint(str(tmp_path), 10)["files"]

    assert files == {"ckpt-10.params": {"bytes": os.path.getsize(params),
                                        "crc32": f"{zlib.crc32(params.read_bytes()):08x}"}}


@pytest.mark.parametrize("damage, problem", [
    (truncate, "ckpt-20.params holds"),
    (flip_a_byte, "ckpt-20.params does not match its checksum"),
    (os.remove, "ckpt-20.params is missing"),
])
def test_resume_skips_a_damaged_checkpoint_naming_it_and_takes_the_one_before(tmp_path, caplog, damage, problem):
    write_checkpoints(tmp_path, [10, 20])
    damage(str(tmp_path / "ckpt-20.params"))

    point = check_train_dir(args_for("--train-dir", str(tmp_path), "--resume"))

    assert (point.step, point.params) == (10, str(tmp_path / "ckpt-10.params"))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and f"checkpoint at step 20 in {tmp_path} is damaged ({problem}" in warnings[0]


def test_a_damaged_optimizer_state_makes_its_checkpoint_damaged(tmp_path):
    trained = Local(Local.Options.from_args(args_for("--momentum", "0.9")), lenet(), None)
    trained.setup()
    writer = CheckpointWriter(str(tmp_path), 1, DESCRIPTION)
    writer.save(1, 0.5, 0.0, trained.model, trained.local_optimizer_states())
    writer.save(2, 1.0, 0.0, trained.model, trained.local_optimizer_states())
    truncate(str(tmp_path / "ckpt-2.states"))

    assert checkpoints.damage(str(tmp_path), 1) is None
    assert "ckpt-2.states holds" in checkpoints.damage(str(tmp_path), 2)


def test_an_unreadable_checkpoint_description_makes_it_damaged(tmp_path):
    write_checkpoints(tmp_path, [10])
    (tmp_path / "ckpt-10.json").write_text('{"step": 1')

    assert "ckpt-10.json unreadable" in checkpoints.damage(str(tmp_path), 10)


def test_a_checkpoint_from_before_checksums_is_trusted_while_its_parameters_exist(tmp_path):
    write_checkpoints(tmp_path, [10])
    meta = checkpoints.read_checkpoint(str(tmp_path), 10)
    del meta["files"]
    (tmp_path / "ckpt-10.json").write_text(json.dumps(meta))

    assert checkpoints.damage(str(tmp_path), 10) is None
    os.remove(tmp_path / "ckpt-10.params")
    assert checkpoints.damage(str(tmp_path), 10) == "ckpt-10.params is missing"


def test_resume_with_every_checkpoint_damaged_is_refused_naming_them(tmp_path):
    write_checkpoints(tmp_path, [10, 20])
    truncate(str(tmp_path / "ckpt-10.params"))
    truncate(str(tmp_path / "ckpt-20.params"))

    with pytest.raises(CheckpointError, match=r"every checkpoint in .* is damaged \(steps 10, 20\)"):
        check_train_dir(args_for("--train-dir", str(tmp_path), "--resume"))


def worker_env():
    # Nothing listens there: a worker that tried to join the cluster would hang, and the test would time out.
    return {"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2"}


def server_env():
    return {**worker_env(), "DMLC_ROLE": "server"}


@pytest.mark.parametrize("argv, env, message", [
    (["-m", "sync", "--resume", "--train-dir", "{empty}"], worker_env, "--resume: no checkpoint in"),
    (["-m", "sync", "--resume", "--train-dir", "{saved}", "-n", "mlp"], worker_env, "of network lenet, not mlp"),
    (["-m", "sync", "--resume"], worker_env, "--resume needs --train-dir"),
    (["-m", "sync", "--resume", "--train-dir", "{damaged}"], worker_env, "every checkpoint in"),
    (["-m", "sync", "--resume", "--train-dir", "{damaged}"], server_env, "every checkpoint in"),
    (["-m", "sync", "--train-dir", "{saved}"], worker_env, "holds checkpoints of an earlier job"),
    (["-m", "evaluate"], dict, "-m evaluate needs --train-dir"),
    (["-m", "evaluate", "--train-dir", "{saved}"], worker_env, "-m evaluate runs beside the cluster"),
    (["-m", "evaluate", "--train-dir", "{saved}", "-dd", "/nonexistent"], dict, "missing /nonexistent/mnist-5k/t10k"),
])
def test_bad_checkpoint_input_is_one_line_and_exits_2_before_the_network(tmp_path, argv, env, message):
    write_checkpoints(tmp_path / "saved", [10])
    write_checkpoints(tmp_path / "damaged", [10])
    truncate(str(tmp_path / "damaged" / "ckpt-10.params"))
    os.makedirs(tmp_path / "empty")
    argv = [a.format(empty=tmp_path / "empty", saved=tmp_path / "saved", damaged=tmp_path / "damaged")
            for a in argv]

    result = run_main(BASE + argv, env(), timeout=60)

    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr


# ----------------------------------------------------------------------------------------------
# The evaluator: each checkpoint exactly once


def test_pending_steps_are_the_unevaluated_ones_oldest_first():
    assert pending_steps([30, 10, 20, 40], [10, 30]) == [20, 40]


def evaluator(tmp_path, timeout=5.0):
    images, labels = load_test_set(SAMPLE_DATA, "mnist-5k")
    args = args_for("-m", "evaluate", "--train-dir", str(tmp_path / "train"), "-ld", str(tmp_path / "logs"),
                    "--eval-timeout", str(timeout))
    return Evaluator(args, lenet(seed=7), images, labels)


def test_the_evaluator_tests_every_checkpoint_once_and_stops_at_the_final_marker(tmp_path):
    models = write_checkpoints(tmp_path / "train", [10, 20, 30])
    images, labels = load_test_set(SAMPLE_DATA, "mnist-5k")
    clock = FakeClock()

    evaluated = evaluator(tmp_path).run(clock, clock.sleep)

    records = read_evaluations(str(tmp_path / "logs" / EVALUATOR_LOG))
    assert evaluated == 3 and [r["step"] for r in records] == [10, 20, 30]
    assert [r["accuracy"] for r in records] == [models[s].accuracy(images, labels) for s in (10, 20, 30)]
    assert [r["time"] for r in records] == [1.0, 2.0, 3.0]


def test_a_restarted_evaluator_skips_what_it_already_evaluated(tmp_path):
    write_checkpoints(tmp_path / "train", [10, 20])
    clock = FakeClock()
    evaluator(tmp_path).run(clock, clock.sleep)

    again = evaluator(tmp_path).run(clock, clock.sleep)

    assert again == 0
    assert [r["step"] for r in read_evaluations(str(tmp_path / "logs" / EVALUATOR_LOG))] == [10, 20]


def test_the_evaluator_picks_up_checkpoints_written_while_it_waits(tmp_path):
    write_checkpoints(tmp_path / "train", [10], final=False)
    clock = FakeClock()
    later = {1.0: 20, 2.0: 30}

    def sleep(seconds):
        clock.sleep(seconds)
        if clock.now in later:
            step = later.pop(clock.now)
            writer = CheckpointWriter(str(tmp_path / "train"), 10, DESCRIPTION)
            (writer.finish if step == 30 else writer.save)(step, 1.0, 0.0, lenet(step), None)

    evaluator(tmp_path).run(clock, sleep)

    assert [r["step"] for r in read_evaluations(str(tmp_path / "logs" / EVALUATOR_LOG))] == [10, 20, 30]


def test_the_evaluator_gives_up_after_the_timeout_without_a_new_checkpoint(tmp_path):
    write_checkpoints(tmp_path / "train", [10], final=False)
    clock = FakeClock()

    evaluated = evaluator(tmp_path, timeout=5.0).run(clock, clock.sleep)

    assert evaluated == 1 and 5.0 <= clock.now <= 6.0


def test_a_checkpoint_of_another_network_stops_the_evaluator(tmp_path):
    writer = CheckpointWriter(str(tmp_path / "train"), 10, {**DESCRIPTION, "network": "mlp"})
    writer.finish(10, 1.0, 0.0, lenet(), None)
    clock = FakeClock()

    with pytest.raises(CheckpointError, match="network mlp, not lenet"):
        evaluator(tmp_path).run(clock, clock.sleep)


def test_the_evaluator_skips_a_damaged_checkpoint_once_with_a_warning_and_evaluates_the_rest(tmp_path, caplog):
    write_checkpoints(tmp_path / "train", [10, 20, 30])
    flip_a_byte(str(tmp_path / "train" / "ckpt-20.params"))
    clock = FakeClock()

    evaluated = evaluator(tmp_path).run(clock, clock.sleep)

    assert evaluated == 2
    assert [r["step"] for r in read_evaluations(str(tmp_path / "logs" / EVALUATOR_LOG))] == [10, 30]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "checkpoint at step 20" in warnings[0] and "damaged" in warnings[0]


def test_an_unreadable_evaluation_line_is_skipped(tmp_path):
    path = tmp_path / EVALUATOR_LOG
    path.write_text(json.dumps({"step": 10, "accuracy": 0.5}) + "\n" + '{"step": 2')

    assert EvaluationLog(str(path)).steps == [10]


# ----------------------------------------------------------------------------------------------
# --epochs


def test_passes_count_whole_batches_of_the_share():
    stream = BatchStream(np.zeros((100, 1, 2, 2), np.uint8), np.zeros(100, np.int32), batch_size=32)
    passes = []
    for _ in range(4):
        stream.next()
        passes.append(stream.passes)

    assert passes == pytest.approx([1 / 3, 2 / 3, 1.0, 1 + 1 / 3])


def test_epochs_stop_training():
    stop = StopCondition(max_epochs=2)

    assert stop.reason(10, 1.0, None, epochs=1.9) is None
    assert stop.reason(10, 1.0, None, epochs=2.0) == "reached --epochs 2"


def test_max_steps_and_eval_freq_are_aliases():
    args = config.parse_args(["--max-steps", "7", "--eval-freq", "3"])

    assert (args.max_iters, args.eval_duration) == (7, 3)


def test_a_local_job_stops_after_its_epochs(tmp_path):
    # 4000 samples, batch 100: 40 steps per pass.
    result = run_main(["-m", "local", *BASE, "-b", "100", "--epochs", "1.5", "-e", "0", "-ld", str(tmp_path)])

    assert result.returncode == 0, result.stderr
    assert "finished: 60 global iterations" in result.stderr and "reached --epochs 1.5" in result.stderr


def test_args_namespace_has_checkpoint_defaults():
    args = config.parse_args([])

    assert isinstance(args, argparse.Namespace)
    assert (args.train_dir, args.save_freq, args.resume, args.epochs) == (None, 100, False, None)
