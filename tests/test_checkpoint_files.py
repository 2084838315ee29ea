"""Checkpoint files: what one holds, what a killed write leaves, and the optimizer state that survives one."""
import os
import pickle

import pytest

from data import load_dataset
from tests.checkpoint_helpers import DESCRIPTION, args_for, lenet, write_checkpoints
from tests.jobs import SAMPLE_DATA
from training import checkpoints
from training.checkpoints import CheckpointWriter, saved_steps
from training.files import atomic_write
from training.mxnet_internals import trainer_updaters
from training.schemes.esync import ESync
from training.schemes.local import Local


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


def test_one_device_steps_with_the_local_optimizer_it_is_given():
    data = load_dataset(SAMPLE_DATA, "mnist-5k")
    digests = {}
    for optimizer in ("sgd", "adam"):
        alone = Local(Local.Options.from_args(args_for("--local-optimizer", optimizer)), lenet(seed=3), None)
        alone.setup()
        alone.model.forward_backward(data.train_images[:64], data.train_labels[:64])
        alone.local_step()
        assert type(alone.trainer._optimizer).__name__.lower() == optimizer
        digests[optimizer] = alone.model.digest()
    assert digests["sgd"] != digests["adam"]


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
    old_states = trainer_updaters(trained.trainer)[0].get_states(dump_optimizer=False)  # the format of earlier releases
    restarted = Local(Local.Options.from_args(args_for("--momentum", "0.9")), lenet(), None)
    restarted.setup()

    restarted.load_local_optimizer_states(old_states)

    assert pickle.loads(restarted.local_optimizer_states())["states"] == old_states


def test_with_a_number_to_keep_each_older_checkpoint_goes_once_a_newer_one_is_whole(tmp_path):
    writer = CheckpointWriter(str(tmp_path), 10, DESCRIPTION, keep=2)
    model = lenet()
    for step in (10, 20, 30):
        writer.save(step, step / 10.0, 0.0, model, b"state")
    writer.finish(35, 3.5, 0.0, model, b"state")

    assert saved_steps(str(tmp_path)) == [30, 35]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-30.json", "ckpt-30.params", "ckpt-30.states", "ckpt-35.json",
                                            "ckpt-35.params", "ckpt-35.states", "final.json"]
