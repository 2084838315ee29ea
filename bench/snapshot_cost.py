"""What an evaluation snapshot costs the training thread of rank 0, against one training step (forward, backward, SGD
update), one compute thread as each launcher worker:

    OMP_NUM_THREADS=1 python -m bench.snapshot_cost -n resnet18-v1 --steps 20

Each step and each snapshot is timed on its own, to completion (MXNet's queue drained before and after): the
snapshot's time includes the engine's copy of the large parameters, which in training runs beside the next batch's
preparation, so it bounds the cost from above. Prints one JSON object: the median step and snapshot times, their
ratio, and what the writer thread then spends saving one snapshot to a file.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

from training import mxnet_internals

mxnet_internals.install()  # before MXNet's import, as main.py: its operator cache and numpy's aliases

import mxnet as mx  # noqa: E402
import numpy as np
from mxnet import gluon

from training.checks import first_sentence
from training.model import Model, save_snapshot

BATCH = 64


def timed(action):
    mx.nd.waitall()
    started = time.perf_counter()
    action()
    mx.nd.waitall()
    return time.perf_counter() - started


def writer_seconds(model, repeats=3):
    arrays = model.snapshot()
    with tempfile.TemporaryDirectory(prefix="esync-snapshot-cost-") as folder:
        times = []
        for index in range(repeats):
            started = time.perf_counter()
            save_snapshot(os.path.join(folder, f"s{index}.params"), arrays)
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(network, steps):
    model = Model(network, [mx.cpu()], (1, 28, 28))
    trainer = gluon.Trainer(model.net.collect_params(), "sgd", {"learning_rate": 0.001})
    rng = np.random.RandomState(0)
    images = rng.randint(0, 256, (BATCH, 1, 28, 28)).astype(np.uint8)
    labels = rng.randint(0, 10, BATCH)
    model.warm_up(BATCH)

    def step():
        model.forward_backward(images, labels)
        trainer.step(1)
    step_times, snapshot_times = [], []
    for _ in range(steps):  # each snapshot of the weights the step before it wrote, as at the end of a round
        step_times.append(timed(step))
        snapshot_times.append(timed(model.snapshot))
    step_seconds, snapshot_seconds = statistics.median(step_times), statistics.median(snapshot_times)
    return {"network": network, "step_seconds": step_seconds, "snapshot_seconds": snapshot_seconds,
            "share_of_step": snapshot_seconds / step_seconds, "writer_seconds": writer_seconds(model),
            "param_bytes": model.param_bytes}


def main():
    p = argparse.ArgumentParser(description=first_sentence(__doc__))
    p.add_argument("-n", "--network", default="lenet")
    p.add_argument("--steps", type=int, default=100, help="steps timed, and as many snapshots (default 100)")
    args = p.parse_args()
    print(json.dumps(measure(args.network, args.steps)))


if __name__ == "__main__":
    main()
