"""What the checkpoint tests share: the job's arguments, lenets, checkpoints written of them, and ways to damage
a file."""
import os

import mxnet as mx

from training import config
from tests.jobs import SAMPLE_DATA
from training.checkpoints import CheckpointWriter
from training.model import Model

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


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def flip_a_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
