"""What an evaluation snapshot costs the training thread of rank 0: steps (forward, backward, SGD update) timed
without and with Model.snapshot() after each, in alternating blocks, one compute thread as each launcher worker:

    OMP_NUM_THREADS=1 python -m bench.snapshot_cost -n resnet18-v1 --steps 20

Prints one JSON object: the median step time, the median extra time per snapshot on the training thread (the copy
of the small parameters, and the wait of the next update for the engine's copy of the large ones), that extra as a
share of a step, and what the writer thread then spends saving one snapshot to a file.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import mxnet as mx
import numpy as np
from mxnet import gluon

from training.model import Model, save_snapshot

BLOCKS = 5          # alternating blocks of steps without and with snapshots
BATCH = 64


def timed_steps(model, trainer, images, labels, steps, snapshot):
    started = time.perf_counter()
    for _ in range(steps):
        model.forward_backward(images, labels)
        trainer.step(1)
        if snapshot:
            model.snapshot()
    mx.nd.waitall()
    return (time.perf_counter() - started) / steps


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
    timed_steps(model, trainer, images, labels, max(2, steps // 10), snapshot=True)
    plain, with_snapshot = [], []
    for _ in range(BLOCKS):
        plain.append(timed_steps(model, trainer, images, labels, steps, snapshot=False))
        with_snapshot.append(timed_steps(model, trainer, images, labels, steps, snapshot=True))
    step = statistics.median(plain)
    extra = statistics.median(w - p for w, p in zip(with_snapshot, plain))
    return {"network": network, "step_seconds": step, "snapshot_seconds": extra, "share_of_step": extra / step,
            "writer_seconds": writer_seconds(model), "param_bytes": model.param_bytes}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--network", default="lenet")
    p.add_argument("--steps", type=int, default=100, help="steps per block")
    args = p.parse_args()
    print(json.dumps(measure(args.network, args.steps)))


if __name__ == "__main__":
    main()
