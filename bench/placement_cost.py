"""Where a device's CPU quota holds its worker (training/devices/cpu_quota.py): the worker of a ps-lite job with one
worker and one server times one pushpull of every parameter of a model, as the sync schemes aggregate, right after a
computing phase of a slow device, still inside its quota (the old placement: the whole training in the group) and
out of it (the new: only the computing phases in it), and after one of a fast device, inside its quota; and what
entering and leaving the group around each step costs a fast device's training step, against a loop that stays in
the group. Root (the quotas' groups are made here):

    DMLC_ROLE=worker DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 \\
        OMP_NUM_THREADS=1 python -m bench.placement_cost -n lenet --fast-cores 0.667 --pushpulls 20 --steps 200

with the scheduler and the server started as `main.py -m sync` in the same environment (DMLC_ROLE=scheduler, then
server). Prints one JSON object: the median seconds of a pushpull in each placement, and of a step each way.
"""
import argparse
import json
import statistics
import time

from training import mxnet_internals

mxnet_internals.install()  # before MXNet's import, as main.py: its operator cache and numpy's aliases

import mxnet as mx  # noqa: E402
import numpy as np
from mxnet import gluon

from bench.snapshot_cost import timed
from training.checks import first_sentence
from training.devices import cpu_quota
from training.model import Model
from training.schemes.base import PackedStatistics
from training.transport import collectives

BATCH = 64
SAMPLE_SHAPE = (1, 28, 28)  # mnist-5k's, the benchmark's data
PLACEMENTS = ("fast", "new", "old")
STEPS_PER_BLOCK = 5  # the two ways of timing a step take turns in blocks of this many steps


def computing_in(quota, action):
    """`action` as one computing phase of `quota`'s device, to its completion."""
    def phase():
        with quota.computing():
            action()
            mx.nd.waitall()
    return phase


def aggregation_arrays(model):
    """(keys, arrays) of one sync aggregation in the schemes' key layout (training/schemes/base.py): the trainable
    parameters' gradients, the packed BatchNorm statistics where the model has any, the control value."""
    stats = PackedStatistics(model)
    count = len(model.trainable)
    keys = list(range(count)) + ([count] if stats else []) + [count + 1]
    arrays = [p.grad() for p in model.trainable] + ([stats.buffer] if stats else []) + [mx.nd.zeros((1,))]
    return keys, arrays


def pushpull_seconds(model, repeats, fast, slow):
    """{placement: seconds of each of `repeats` pushpulls}, the placements taking turns, each pushpull right after
    a computing phase in its device's group: "fast" and "old" still inside it, "new" out of it."""
    transport = collectives.connect(collectives.PS, "dist_sync", timeout=None, on_timeout=None)
    keys, arrays = aggregation_arrays(model)
    transport.declare(keys, [a.copy() for a in arrays])

    def pushpull():
        transport.sum(keys, arrays)
    placements = {"fast": (fast, True), "new": (slow, False), "old": (slow, True)}
    rng = np.random.RandomState(0)
    for quota, inside in placements.values():  # the first pushpulls set up the server's and the engine's buffers
        pushpull_after_computing(pushpull, quota, inside, rng)
    times = {name: [] for name in PLACEMENTS}
    for _ in range(repeats):
        for name in PLACEMENTS:
            times[name].append(pushpull_after_computing(pushpull, *placements[name], rng))
    return times


def pushpull_after_computing(pushpull, quota, inside, rng):
    """The seconds of `pushpull` after a computing phase of `quota`'s device, in its group or out of it."""
    with quota.computing():
        spend_quota(quota, rng)
        if not inside:
            quota.leave()
        return timed(pushpull)


def spend_quota(quota, rng):
    """Compute until the group's quota has run out once and a random share of the next period's is spent: a device
    ends its step's computing at any point of a period, and a pushpull in its group then finds the rest of that
    period's quota, not a fresh one."""
    period_quota = cpu_quota.period_for(quota.cores) * quota.cores / 1e6
    budget = period_quota * (1 + rng.random_sample())
    started = time.thread_time()
    while time.thread_time() - started < budget:
        pass


def step_seconds(model, steps, fast):
    """{"per_step": the seconds of each step entered into and left around it, "entered_once": of each step of a
    loop inside the group}, in blocks of STEPS_PER_BLOCK steps each way; "switch": of entering and leaving alone."""
    trainer = gluon.Trainer(model.trainable, "sgd", {"learning_rate": 0.001}, kvstore=None)
    rng = np.random.RandomState(0)
    images = rng.randint(0, 256, (BATCH,) + SAMPLE_SHAPE).astype(np.uint8)
    labels = rng.randint(0, 10, BATCH)
    model.warm_up(BATCH)

    def step():
        model.forward_backward(images, labels)
        trainer.step(1)

    def entered_per_step():
        return [timed(computing_in(fast, step)) for _ in range(STEPS_PER_BLOCK)]

    def entered_once():
        with fast.computing():
            return [timed(step) for _ in range(STEPS_PER_BLOCK)]
    ways = {"per_step": entered_per_step, "entered_once": entered_once}
    times = {"per_step": [], "entered_once": [], "switch": []}
    for block in range(max(1, steps // STEPS_PER_BLOCK)):
        # ABBA...: a machine that speeds up or slows down steadily favours neither way
        for name in (ways if block % 2 == 0 else reversed(ways)):
            times[name] += ways[name]()
        times["switch"].append(timed(computing_in(fast, lambda: None)))
    return times


def medians(times):
    return {name: statistics.median(values) for name, values in times.items()}


def measure(network, pushpulls, steps, fast, slow):
    model = Model(network, [mx.cpu()], SAMPLE_SHAPE)
    pushpull = pushpull_seconds(model, pushpulls, fast, slow)
    result = {"network": network, "param_bytes": model.param_bytes, "fast_cores": fast.cores,
              "slow_cores": slow.cores, "pushpulls": pushpulls, "pushpull_seconds": medians(pushpull),
              "pushpull_times": pushpull}
    if steps:
        times = step_seconds(model, steps, fast)
        step = medians(times)
        result["step"] = {"steps": len(times["per_step"]), "batch": BATCH, "block": STEPS_PER_BLOCK, **step,
                          "overhead": step["per_step"] / step["entered_once"] - 1}
    return result


def main():
    p = argparse.ArgumentParser(description=first_sentence(__doc__))
    p.add_argument("-n", "--network", default="lenet")
    p.add_argument("--fast-cores", type=float, required=True, help="a fast device's share of a core")
    p.add_argument("--slowdown", type=float, default=20.0, help="the slow device: the fast one's share / this")
    p.add_argument("--pushpulls", type=int, default=20, help="pushpulls timed in each placement (default 20)")
    p.add_argument("--steps", type=int, default=0, help="fast steps timed each way (default 0: none)")
    p.add_argument("--tag", default="placement", help="the quotas' groups: <tag>fast-<pid>, <tag>slow-<pid>")
    args = p.parse_args()
    fast = cpu_quota.DeviceQuota(args.fast_cores, tag=f"{args.tag}fast")
    slow = cpu_quota.DeviceQuota(args.fast_cores / args.slowdown, tag=f"{args.tag}slow")
    try:
        result = measure(args.network, args.pushpulls, args.steps, fast, slow)
    finally:
        fast.close()
        slow.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
