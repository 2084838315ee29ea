"""8. Input pipeline: a training step on CIFAR-10-shaped batches (3x32x32, normalised) without augmentation, with
CIFAR-10's crops and flips made in the step, with them made one batch ahead (--augment crop), and with d2l's resized
crops made one batch ahead by Gluon's transforms (--augment resized-crop)."""
import statistics
import time

from analysis.tables import markdown_table

PIPELINES = ("plain", "augmented in the step", "augmented ahead", "resized crops ahead")


def pipeline_streams(images, labels, batch):
    from data import Augmented, BatchStream, Prefetched, ResizedCropped

    return {"plain": BatchStream(images, labels, batch, seed=1),
            "augmented in the step": Augmented(BatchStream(images, labels, batch, seed=1), seed=2),
            "augmented ahead": Prefetched(Augmented(BatchStream(images, labels, batch, seed=1), seed=2)),
            "resized crops ahead": Prefetched(ResizedCropped(BatchStream(images, labels, batch, seed=1), seed=2))}


def timed_steps(model, trainer, stream, steps):
    """Seconds per step (the batch, forward and backward, the update) over `steps` steps."""
    import mxnet as mx

    start = time.perf_counter()
    for _ in range(steps):
        images, labels = stream.next()
        model.forward_backward(images, labels)
        trainer.step(1)
    mx.nd.waitall()
    return (time.perf_counter() - start) / steps


def measure(cfg, workdir, earlier):
    """Per network, the median over 3 interleaved blocks of each pipeline's seconds per step, in one process."""
    import mxnet as mx
    import numpy as np
    from mxnet import gluon

    from data import CIFAR10_MEAN, CIFAR10_STD
    from training.model import Model

    batch = cfg["pipeline_batch"]
    rows = []
    for network, steps in cfg["pipeline_networks"].items():
        images = np.random.RandomState(0).randint(0, 256, size=(4 * batch, 3, 32, 32)).astype(np.uint8)
        labels = np.arange(len(images)) % 10
        model = Model(network, [mx.cpu()], (3, 32, 32), normalise=(CIFAR10_MEAN, CIFAR10_STD))
        trainer = gluon.Trainer(model.trainable, "sgd", {"learning_rate": 1e-4, "momentum": 0.9}, kvstore=None)
        streams = pipeline_streams(images, labels, batch)
        timed_steps(model, trainer, streams["plain"], 2)  # warm-up
        blocks = {name: [] for name in PIPELINES}
        for _ in range(3):
            for name in PIPELINES:
                blocks[name].append(timed_steps(model, trainer, streams[name], steps))
        step = {name: statistics.median(times) for name, times in blocks.items()}
        rows.append({"network": network, "batch": batch, "steps": steps, "seconds": step,
                     "ratio": {name: step[name] / step["plain"] for name in PIPELINES}})
    return rows


def markdown(results):
    rows = [[row["network"], str(row["batch"])]
            + [f"{1000 * row['seconds'][p]:.1f} ({row['ratio'][p]:.2f})" for p in PIPELINES]
            for row in results["input_pipeline"]]
    return ["### Input pipeline: a step on CIFAR-10-shaped batches (ms; ratio to no augmentation)", "",
            markdown_table(["network", "batch", *PIPELINES], rows), ""]
