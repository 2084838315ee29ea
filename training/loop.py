"""The one training loop every mode runs; the synchronization scheme is the part that differs.

A global iteration (a round) is: local steps until the scheme says the round is done, then the scheme's
aggregation, then rank 0's evaluation when due, then one iteration log file.
"""
import gc
import logging
import os
import time

import mxnet as mx

from data import BatchStream
from training import checkpoints, fault_injection
from training.devices import contexts, device_name
from training.files import atomic_write
from training.heterogeneity import EmulatedSlowdown
from training.iterlog import IterationLog
from training.model import Model
from training.watchdog import Watchdog

log = logging.getLogger("worker")

PROGRESS_EVERY = 1.0  # seconds between progress lines


class StopCondition:
    def __init__(self, max_iters=None, max_time=None, target_accuracy=None, max_epochs=None):
        self.max_iters = max_iters
        self.max_time = max_time
        self.target_accuracy = target_accuracy
        self.max_epochs = max_epochs

    @property
    def unbounded(self):
        return (self.max_iters is None and self.max_time is None and self.target_accuracy is None
                and self.max_epochs is None)

    def reason(self, iterations, elapsed, accuracy, epochs=0.0):
        """Why training should stop after `iterations` rounds and `epochs` passes over the share, or None."""
        if self.max_iters is not None and iterations >= self.max_iters:
            return f"reached --max-iters {self.max_iters}"
        if self.max_epochs is not None and epochs >= self.max_epochs:
            return f"reached --epochs {self.max_epochs:g}"
        if self.max_time is not None and elapsed >= self.max_time:
            return f"reached --max-time {self.max_time:g} s"
        if self.target_accuracy is not None and accuracy is not None and accuracy >= self.target_accuracy:
            return f"reached --target-accuracy {self.target_accuracy:g}"
        return None


class Timer:
    """Adds the seconds spent in a `with` block to record[key]."""

    def __init__(self, record, key):
        self.record, self.key = record, key

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.record[self.key] = self.record.get(self.key, 0.0) + time.perf_counter() - self.start


def train(args, scheme_cls, data, resume=checkpoints.ResumePoint()):
    """Train until a stop condition; return the last test accuracy (None where this worker never evaluated).
    `resume` is where training starts (checkpoints.check_train_dir)."""
    ctxs = contexts(args.gpu, args.cpu)
    watchdog = Watchdog(args.sync_timeout if scheme_cls.kvstore else None)
    fault_injection.point("worker", "start")
    with watchdog.guard("joining the cluster (is every scheduler, server and worker started?)"):
        kv = mx.kv.create(scheme_cls.kvstore) if scheme_cls.kvstore else None
    rank = kv.rank if kv else 0
    model = Model(args.network, ctxs, data.train_images.shape[1:], args.seed)
    scheme = scheme_cls(args, model, kv)
    stop = StopCondition(args.max_iters, args.max_time, args.target_accuracy, args.epochs)
    if stop.unbounded:
        log.warning("no stop condition (--max-iters, --max-time, --target-accuracy, --epochs): "
                    "training until interrupted")
    fault_injection.point("worker", "setup", rank)
    if rank == 0 and resume.params:
        checkpoints.load_weights(resume, model)  # setup() broadcasts rank 0's weights to every worker
    with watchdog.guard("setting up the job (initial weights, state server)"):
        scheme.setup()
    checkpoints.load_optimizer_state(resume, scheme)
    share = scheme.training_share(data.train_labels)
    stream = BatchStream(data.train_images[share], data.train_labels[share], scheme.step_batch_size,
                         args.seed + rank)
    if scheme.attack:
        stream = scheme.attack.poison(stream)
    device = device_name(args.gpu, args.cpu)
    folder = device if kv is None else f"{device}-rank{rank}" + ("" if scheme.role == "worker" else f"-{scheme.role}")
    iterlog = IterationLog(args.log_dir, args.node_name, folder,
                           _meta(args, scheme, model, device, len(share)), resume.step)
    log.info("%s %s rank %d of %d on %s (pid %d): %s, %d training samples, %d parameters (%.1f MB)%s%s",
             scheme.name, scheme.role, rank, scheme.num_workers, device, os.getpid(), args.network, len(share),
             model.num_params, model.param_bytes / 1e6,
             f", emulated slowdown x{args.slowdown:g}" if args.slowdown > 1 else "",
             f", Byzantine ({scheme.attack.kind} x{scheme.attack.scale:g})" if scheme.attack else "")
    if args.digest_weights:
        log.info("weights digest at global step %d: %s", resume.step, model.digest())
    writer = _checkpoint_writer(args, scheme, rank)
    try:
        accuracy = _run(args, scheme, model, stream, data, iterlog, stop, watchdog, scheme.evaluates, resume, writer)
    finally:
        scheme.finish()
    model_path = iterlog.path("model-final.params")
    atomic_write(model_path, model.save)
    log.info("saved the final weights to %s", model_path)
    fault_injection.point("worker", "leaving", rank)
    with watchdog.guard("leaving the cluster"):
        scheme.kv = kv = None
        gc.collect()  # the kvstore's destructor waits for every other node at a barrier
    return accuracy


def _run(args, scheme, model, stream, data, iterlog, stop, watchdog, evaluates, resume, writer):
    slowdown = EmulatedSlowdown(args.slowdown)
    started = time.time() - resume.elapsed  # a resumed job's clock continues from its checkpoint
    samples = 0
    accuracy = None
    last_progress = resume.elapsed
    iteration = resume.step
    while True:
        round_overhead = {}
        fault_injection.point("worker", "training", scheme.rank)
        with Timer(round_overhead, "check ready"):
            scheme.begin_round(iteration)
        steps = _local_steps(scheme, model, stream, slowdown)
        if scheme.coordinated:
            steps[0]["check ready"] = steps[0].get("check ready", 0.0) + round_overhead["check ready"]
        reason = stop.reason(iteration + 1, time.time() - started, accuracy, resume.epochs + stream.passes)
        if scheme.aggregate_key:
            phase = f"the aggregation of global iteration {iteration}"
            with Timer(steps[-1], scheme.aggregate_key), watchdog.guard(phase):
                fault_injection.point("worker", "aggregation", scheme.rank)
                stop_all = scheme.aggregate(reason is not None)
                mx.nd.waitall()
        else:
            stop_all = reason is not None
        iteration += 1
        round_samples = len(steps) * scheme.step_batch_size
        samples += round_samples
        evaluated = None
        if evaluates and (stop_all or (args.eval_duration and iteration % args.eval_duration == 0)):
            with Timer(steps[-1], "evaluation"):
                evaluated = accuracy = model.accuracy(data.test_images, data.test_labels)
        elapsed = time.time() - started
        if writer and (stop_all or writer.due(iteration)):
            with Timer(steps[-1], "checkpoint"):
                fault_injection.point("worker", "checkpoint", scheme.rank)
                save = writer.finish if stop_all else writer.save
                save(iteration, elapsed, resume.epochs + stream.passes, model, scheme)
        extra = {"weights_digest": model.digest()} if args.digest_weights else {}
        extra.update(scheme.round_record())
        iterlog.write(iteration - 1, steps, round_samples, elapsed, evaluated, **extra)
        if stop_all or elapsed - last_progress >= PROGRESS_EVERY:
            last_progress = elapsed
            log.info("iter %d  %.1f s  %s  %.0f samples/s", iteration, elapsed,
                     f"test accuracy {accuracy:.4f}" if accuracy is not None else "",
                     samples / (elapsed - resume.elapsed))
        if stop_all:
            log.info("finished: %d global iterations in %.1f s (%s)%s", iteration, elapsed,
                     reason or "another worker reached a stop condition",
                     f", final test accuracy {accuracy:.4f}" if accuracy is not None else "")
            return accuracy


def _local_steps(scheme, model, stream, slowdown):
    """Local steps until the scheme ends the round; per step, the seconds of each phase."""
    steps = []
    while True:
        t = {}
        step_start = time.perf_counter()
        with Timer(t, "get_batch"):
            images, labels = stream.next()
        with Timer(t, "forward and backward"):
            model.forward_backward(images, labels)
        if scheme.updates_locally:
            with Timer(t, "local update"):
                scheme.local_step()
        if slowdown.active:
            t["emulated slowdown"] = slowdown.pad(t["forward and backward"] + t.get("local update", 0.0))
        steps.append(t)
        step_seconds = time.perf_counter() - step_start
        if scheme.coordinated:
            with Timer(t, "check ready"):
                done = scheme.round_done(len(steps), step_seconds)
        else:
            done = scheme.round_done(len(steps), step_seconds)
        if done:
            return steps


def _checkpoint_writer(args, scheme, rank):
    """Rank 0 saves the global model with --train-dir; the others never do."""
    if rank != 0 or not args.train_dir:
        return None
    description = {"mode": scheme.name, "network": args.network, "dataset": args.dataset,
                   "num_workers": scheme.num_workers, "batch_size": args.batch_size, "seed": args.seed}
    return checkpoints.CheckpointWriter(args.train_dir, args.save_freq, description)


def _meta(args, scheme, model, device, num_samples):
    return {
        "rank": scheme.rank, "num_workers": scheme.training_workers, "role": scheme.role,
        "byzantine": scheme.attack.kind if scheme.attack else None, "mode": scheme.name, "network": args.network,
        "dataset": args.dataset, "device": device, "node": args.node_name, "batch_size": args.batch_size,
        "num_params": model.num_params, "param_bytes": model.param_bytes, "slowdown": args.slowdown,
        "emulated_slowdown": args.slowdown > 1, "non_iid": bool(args.split_by_class),
        "train_samples": num_samples, "pid": os.getpid(), "config": vars(args),
    }
