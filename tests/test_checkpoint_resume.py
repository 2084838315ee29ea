"""What --resume and a new job accept, damaged checkpoints, and bad checkpoint input on the command line."""
import json
import os
import zlib

import pytest

from launcher.cluster import free_port
from tests.checkpoint_helpers import BASE, DESCRIPTION, args_for, flip_a_byte, lenet, truncate, write_checkpoints
from tests.jobs import run_main
from training import checkpoints
from training.checkpoints import CheckpointError, CheckpointWriter, check_train_dir
from training.schemes.local import Local


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
