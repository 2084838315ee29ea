"""The one training loop every mode runs; the synchronization scheme is the part that differs.

A global iteration (a round) is: local steps until the scheme says the round is done, then the scheme's
aggregation, then rank 0's evaluation when due, then one iteration log file.
"""
import contextlib
import gc
import logging
import os
from dataclasses import dataclass

from data import BatchStream, Prefetched, augmented, normalisation
from training import checkpoints, runlog
from training.clocks import REAL as REAL_CLOCK
from training.faults import divergence
from training.faults import fault_injection
from training.transport.state_server import RemoteCoordination
from training.transport import collectives
from training.devices import contexts, device_name
from training.files import atomic_write
from training.devices.heterogeneity import EmulatedSlowdown
from training.model import Model
from training.faults.failures import JobSetupError
from training.faults.watchdog import Watchdog

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

    def reason(self, iterations, elapsed, accuracy, epochs=0.0, diverged=None):
        """Why training should stop after `iterations` rounds and `epochs` passes over the share, or None;
        `diverged`: why the evaluations say the run has diverged (training/faults/divergence.py), or None."""
        if diverged:
            return f"{runlog.DIVERGED}: {diverged}"
        if self.max_iters is not None and iterations >= self.max_iters:
            return f"reached --max-iters {self.max_iters}"
        if self.max_epochs is not None and epochs >= self.max_epochs:
            return f"reached --epochs {self.max_epochs:g}"
        if self.max_time is not None and elapsed >= self.max_time:
            return f"reached --max-time {self.max_time:g} s"
        if self.target_accuracy is not None and accuracy is not None and accuracy >= self.target_accuracy:
            return f"reached --target-accuracy {self.target_accuracy:g}"
        return None


def divergence_of(reason):
    """Why the run stopped as diverged, from its StopCondition.reason; None for any other reason."""
    prefix = f"{runlog.DIVERGED}: "
    return reason[len(prefix):] if reason and reason.startswith(prefix) else None


class Timer:
    """Adds the seconds `clock` advanced during a `with` block to record[key]."""

    def __init__(self, record, key, clock):
        self.record, self.key, self.clock = record, key, clock

    def __enter__(self):
        self.start = self.clock.now()

    def __exit__(self, *exc):
        self.record[self.key] = self.record.get(self.key, 0.0) + self.clock.now() - self.start


def train(args, scheme_cls, data, resume=checkpoints.ResumePoint(), quota=None, clock=REAL_CLOCK, transport=None):
    """Train until a stop condition; return the last test accuracy (None where this worker never evaluated).
    `resume` is where training starts (checkpoints.check_train_dir); `quota` (a cpu_quota.DeviceQuota, or None)
    holds the worker's computing phases under its CPU quota; `clock` is what the loop reads its time from; a job on a
    virtual clock hands each worker its `transport` (training/transport/virtual.py)."""
    ctxs = contexts(args.gpu, args.cpu)
    watchdog = Watchdog(args.sync_timeout if scheme_cls.kvstore and clock.bounds_waits else None)
    fault_injection.point("worker", "start")
    if transport is None:
        with watchdog.guard("joining the cluster (is every scheduler, server and worker started?)"):
            transport = collectives.connect(args.collective, scheme_cls.kvstore, args.sync_timeout, watchdog.expire)
        if transport:  # the job's state server, where its scheme asks one
            transport.coordination = RemoteCoordination((args.state_server_ip, args.state_server_port),
                                                        args.sync_timeout)
    rank = transport.rank if transport else 0
    model = Model(args.network, ctxs, data.train_images.shape[1:], args.seed, normalisation(args.dataset),
                  args.eval_batch_size)
    scheme = scheme_cls(scheme_cls.Options.from_args(args), model, transport)
    scheme.clock = clock
    scheme.train_samples = len(data.train_labels)
    stop = StopCondition(args.max_iters, args.max_time, args.target_accuracy, args.epochs)
    if stop.unbounded:
        log.warning("no stop condition (--max-iters, --max-time, --target-accuracy, --epochs): "
                    "training until interrupted")
    fault_injection.point("worker", "setup", rank)
    if rank == 0 and resume.params:
        checkpoints.load_weights(resume, model)  # setup() broadcasts rank 0's weights to every worker
    if transport:
        with watchdog.guard(during(transport, "gathering the positions the workers claim")):
            shared = collectives.check_one_worker_a_position(
                collectives.positions_claimed(transport, args.worker_index))
        if shared:
            raise JobSetupError(shared)
    with watchdog.guard(during(transport, "setting up the job (initial weights, state server)")):
        scheme.setup()
    model.warm_up(scheme.step_batch_size)
    checkpoints.load_optimizer_state(resume, scheme)
    share = scheme.training_share(data.train_labels)
    scheme.share = (data.train_images[share], data.train_labels[share])  # one copy, the stream's too
    stream_seed = args.seed + scheme.index
    stream = BatchStream(*scheme.share, scheme.step_batch_size, stream_seed)
    if args.augment != "none":
        stream = Prefetched(augmented(stream, args.augment, stream_seed))
    if scheme.attack:
        stream = scheme.attack.poison(stream)
    device = device_name(args.gpu, args.cpu)
    run_log = runlog.RunLogWriter(args.log_dir, args.node_name,
                                  runlog.device_folder(device, _folder_index(scheme), scheme.role),
                                  _meta(args, scheme, model, device, len(share)), completed_rounds=resume.step,
                                  in_thread=not args.device_share)
    log.info("%s %s %d of %d (rank %d) on %s (pid %d): %s, %d training samples, %d parameters (%.1f MB)%s%s",
             scheme.name, scheme.role, scheme.index, scheme.num_workers, scheme.rank, device, os.getpid(), args.network, len(share),
             model.num_params, model.param_bytes / 1e6,
             f", emulated slowdown x{args.slowdown:g} ({'CPU quota' if args.device_share else 'sleeping'})"
             if args.slowdown > 1 else "",
             f", Byzantine ({scheme.attack.kind} x{scheme.attack.scale:g})" if scheme.attack else "")
    if args.digest_weights:
        log.info("weights digest at global step %d: %s", resume.step, model.digest())
    rounds = Rounds(args, scheme, model, stream, data, run_log, stop, watchdog, resume,
                    _checkpoint_writer(args, scheme, rank), _snapshot_writer(args, scheme),
                    quota.computing if quota else contextlib.nullcontext, clock)
    if transport:  # every worker's training clock starts together, whatever its start-up cost
        with watchdog.guard(during(transport, "waiting for every worker to be ready to train")):
            transport.barrier()
    try:
        accuracy = rounds.run()
        run_log.flush()
    finally:
        run_log.close()
        scheme.finish()
    model_path = run_log.path(runlog.FINAL_MODEL_FILE)
    atomic_write(model_path, model.save)
    log.info("saved the final weights to %s", model_path)
    fault_injection.point("worker", "leaving", rank)
    with watchdog.guard("leaving the cluster"):
        scheme.kv = scheme.transport = transport = None
        gc.collect()  # the kvstore's destructor waits for every other node at a barrier
    if rounds.snapshots and rounds.snapshots.evaluator:
        rounds.snapshots.evaluator.wait()
    return accuracy


def _folder_index(scheme):
    """The position in the log folder's name: every cluster worker's, and each process of a job without one
    (Hogwild!)."""
    return scheme.index if scheme.transport or scheme.num_workers > 1 else None


def during(transport, phase):
    """How the watchdog names `phase`: with the collective when it is not the parameter server."""
    return transport.during(phase) if transport else phase


@dataclass
class Rounds:
    """The rounds of one worker, from its first (or resumed) round to a stop condition."""
    args: object
    scheme: object
    model: object
    stream: object
    data: object
    run_log: runlog.RunLogWriter
    stop: StopCondition
    watchdog: Watchdog
    resume: checkpoints.ResumePoint
    checkpoints: object     # a CheckpointWriter on rank 0 with --train-dir, else None
    snapshots: object       # a SnapshotWriter on the evaluating worker with --snapshot-dir, else None
    computing: object       # a context for each computing phase: under the device's CPU quota (--device-share)
    clock: object = REAL_CLOCK  # what every logged time, phase and time-based stop is read from

    def run(self):
        """Train round after round; the last test accuracy (None where this worker never evaluated)."""
        # Under --device-share the CPU quota makes the device slow, on a virtual clock its charge; otherwise each step
        # is padded with sleep.
        self.slowdown = EmulatedSlowdown(1.0 if self.args.device_share or self.clock.charges_steps else
                                         self.args.slowdown)
        self.started = self.clock.now() - self.resume.elapsed  # a resumed job's clock continues from its checkpoint
        self.samples = 0
        self.accuracy = None
        self.diverged = None     # why the evaluations say the run diverged
        self.evaluations = []    # this worker's own evaluations (without an evaluator process), for divergence
        self.last_progress = self.resume.elapsed
        self.last_evaluation = self.clock.now()
        n = self.resume.step
        while True:
            n += 1
            stopping, reason = self.round(n)
            if stopping:
                log.info("finished: %d global iterations in %.1f s (%s)%s", n, self.clock.now() - self.started,
                         reason or "another worker reached a stop condition", self.accuracy_note())
                return self.accuracy

    def accuracy_note(self):
        if self.snapshots:
            return "; the evaluator process tests the final model's snapshot"
        return f", final test accuracy {self.accuracy:.4f}" if self.accuracy is not None else ""

    def round(self, n):
        """Round n (from 1): local steps, the aggregation, evaluation and checkpoint when due, its log file.
        Returns (whether every worker stops now, this worker's reason to stop or None)."""
        scheme = self.scheme
        fault_injection.point("worker", "training", scheme.rank)
        if not scheme.schedule.constant:
            scheme.scale_learning_rates(scheme.schedule.factor_at(self.epochs))
        opening = {}
        with Timer(opening, runlog.CHECK_READY, self.clock):
            scheme.begin_round(n - 1)
        sitting_out = scheme.sits_out()
        self.n, self.voted = n, False
        steps = [{}] if sitting_out else self.local_steps()  # a round sat out logs its aggregation alone
        if scheme.coordinated:
            steps[0][runlog.CHECK_READY] = steps[0].get(runlog.CHECK_READY, 0.0) + opening[runlog.CHECK_READY]
        if not self.voted:
            self.reason = self.stop.reason(n, self.clock.now() - self.started, self.accuracy, self.epochs,
                                           self.diverged)
        reason = self.reason
        round_samples = 0 if sitting_out else len(steps) * scheme.step_batch_size  # before the aggregation, which
        # may plan another batch size
        stopping = self.aggregate(n, steps[-1], reason is not None)
        self.samples += round_samples
        evaluated = self.evaluate(n, steps[-1], stopping)
        elapsed = self.clock.now() - self.started
        self.take_snapshot(n, steps[-1], stopping, elapsed)
        extra = {runlog.WEIGHTS_DIGEST: self.model.digest(scheme.global_arrays())} if self.args.digest_weights else {}
        if sitting_out:
            extra[runlog.SAT_OUT] = True
        diverged = divergence_of(reason)  # the reason, not the last evaluation's verdict: one at the stop may differ
        if diverged:
            extra[runlog.DIVERGED] = diverged
        if not scheme.schedule.constant:
            extra[runlog.LR_FACTOR] = scheme.lr_factor
        if scheme.transport:
            extra.update(scheme.transport.traffic.take())
        extra.update(scheme.round_record())
        # The round's log before its checkpoint: a job killed in between resumes at round n + 1, so a checkpoint of
        # round n must never exist without round n's log; the log is written again with the checkpoint's time.
        self.run_log.write(n, steps, round_samples, elapsed, evaluated, **extra)
        if self.save_checkpoint(n, steps[-1], stopping, elapsed):
            self.run_log.write(n, steps, round_samples, elapsed, evaluated, **extra)
        self.report_progress(n, elapsed, stopping)
        return stopping, reason

    @property
    def epochs(self):
        return self.resume.epochs + self.stream.passes

    def local_steps(self):
        """Local steps until the scheme ends the round; per step, the seconds of each phase."""
        scheme = self.scheme
        steps = []
        while True:
            t = {}
            step_start = self.clock.now()
            with self.computing():
                samples = self.compute_step(t, steps)
            if scheme.during_backward and not self.voted:  # a device under a CPU quota exchanges outside it
                self.queue_round()
            if samples is None:
                steps[-1][runlog.ABANDONED_STEP] = self.clock.now() - step_start
                return steps
            if self.slowdown.active:
                t[runlog.EMULATED_SLOWDOWN] = self.slowdown.pad(t[runlog.FORWARD_BACKWARD]
                                                               + t.get(runlog.LOCAL_UPDATE, 0.0), samples)
            steps.append(t)
            step_seconds = self.clock.now() - step_start
            if scheme.coordinated:
                with Timer(t, runlog.CHECK_READY, self.clock):
                    done = scheme.round_done(len(steps), step_seconds)
            else:
                done = scheme.round_done(len(steps), step_seconds)
            if done:
                return steps

    def compute_step(self, t, steps):
        """One local step's computing: its batch, forward and backward pass and local update, timed into `t`; the
        step's samples, or None where the scheme dropped the step instead of applying it."""
        scheme = self.scheme
        with Timer(t, runlog.GET_BATCH, self.clock):
            images, labels = self.stream.next(scheme.step_batch_size)
        with Timer(t, runlog.FORWARD_BACKWARD, self.clock):
            # Under a CPU quota the exchange waits for the device to leave it: the quota emulates its computing
            # alone (docs/logs-and-figures.md), and a process's threads all share its quota.
            overlap = scheme.during_backward and not self.args.device_share
            self.model.forward_backward(images, labels, self.queue_round if overlap else None)
            self.clock.charge_step(len(labels))  # on a virtual clock, the step's time
        if scheme.coordinated and steps and scheme.abandons_step():
            return None
        if scheme.updates_locally:
            with Timer(t, runlog.LOCAL_UPDATE, self.clock):
                scheme.local_step()
                self.model.wait_for_weights()  # computed before the device leaves its quota, and timed
        return len(labels)

    def queue_round(self):
        """A scheme that queues its round while the backward pass runs (a step per round) queues its stop vote with
        it: the round's stop condition is judged here, once the step's batch is drawn, rather than after its step."""
        self.reason = self.stop.reason(self.n, self.clock.now() - self.started, self.accuracy, self.epochs,
                                       self.diverged)
        self.voted = True
        self.scheme.during_backward(self.reason is not None)

    def aggregate(self, n, last_step, stop_vote):
        """The scheme's aggregation, timed in the round's last step; whether every worker stops now."""
        scheme = self.scheme
        if not scheme.aggregates:
            return stop_vote
        phase = during(scheme.transport, f"the aggregation of global iteration {n}")
        with Timer(last_step, scheme.aggregation_phase, self.clock), self.watchdog.guard(phase):
            fault_injection.point("worker", "aggregation", scheme.rank)
            stopping = scheme.aggregate(stop_vote)
            scheme.settle()
        return stopping

    def evaluate(self, n, last_step, stopping):
        """Rank 0's test accuracy when due (-e or --eval-seconds), else None; never with snapshots (the evaluator
        process tests them)."""
        if self.snapshots or not self.scheme.evaluates or not (stopping or self.evaluation_due(n)):
            return None
        with Timer(last_step, runlog.EVALUATION, self.clock), self.computing():
            self.accuracy, loss = self.model.test(self.data.test_images, self.data.test_labels)
        self.last_evaluation = self.clock.now()
        self.evaluations.append({"step": n, "accuracy": self.accuracy, "loss": loss})
        self.diverged = divergence.verdict(self.evaluations, divergence.chance_accuracy(self.data.test_labels))
        return self.accuracy

    def evaluation_due(self, n):
        if self.args.eval_seconds:
            return self.clock.now() - self.last_evaluation >= self.args.eval_seconds
        every = self.args.eval_duration
        return bool(every) and n % every == 0

    def save_checkpoint(self, n, last_step, stopping, elapsed):
        """Save round n's checkpoint when due; whether it did."""
        writer = self.checkpoints
        if not writer or not (stopping or writer.due(n)):
            return False
        self.run_log.flush()  # round n's log is on disk before its checkpoint is
        with Timer(last_step, runlog.CHECKPOINT, self.clock):
            fault_injection.point("worker", "checkpoint", self.scheme.rank)
            save = writer.finish if stopping else writer.save
            save(n, elapsed, self.epochs, self.model, self.scheme.local_optimizer_states())
        return True

    def take_snapshot(self, n, last_step, stopping, elapsed):
        """A copy of the model for the evaluator when due; the evaluator's latest accuracy becomes this worker's."""
        writer = self.snapshots
        if writer and (stopping or writer.due(elapsed)):
            with Timer(last_step, runlog.SNAPSHOT, self.clock):
                take = writer.finish if stopping else writer.take
                take(n, elapsed, self.epochs, self.model)
            self.accuracy, self.diverged = writer.reported_evaluation()

    def report_progress(self, n, elapsed, stopping):
        if stopping or elapsed - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = elapsed
            log.info("iter %d  %.1f s  %s  %.0f samples/s", n, elapsed,
                     f"test accuracy {self.accuracy:.4f}" if self.accuracy is not None else "",
                     self.samples / (elapsed - self.resume.elapsed))


def _checkpoint_writer(args, scheme, rank):
    """Rank 0 saves the global model with --train-dir; the others never do."""
    if rank != 0 or not args.train_dir:
        return None
    description = {"mode": scheme.name, "network": args.network, "dataset": args.dataset,
                   "num_workers": scheme.num_workers, "batch_size": args.batch_size, "seed": args.seed}
    return checkpoints.CheckpointWriter(args.train_dir, args.save_freq, description, args.keep_checkpoints)


def _snapshot_writer(args, scheme):
    """The evaluating worker snapshots the model with --snapshot-dir; the others never do."""
    if not args.snapshot_dir or not scheme.evaluates:
        return None
    from training.snapshots import SnapshotWriter

    description = {"mode": scheme.name, "network": args.network, "dataset": args.dataset,
                   "num_workers": scheme.num_workers, "seed": args.seed, "snapshot": True}
    writer = SnapshotWriter(args.snapshot_dir, args.snapshot_seconds, description, resumed=args.resume)
    if args.evaluator_beside:
        from training.snapshots import EvaluatorBeside

        writer.evaluator = EvaluatorBeside(args)
    return writer


def _meta(args, scheme, model, device, num_samples):
    labels = scheme.share[1]
    return runlog.worker_meta(
        index=scheme.index, rank=scheme.rank, job_id=args.job_id, num_workers=scheme.training_workers,
        role=scheme.role,
        byzantine=scheme.attack.kind if scheme.attack else None, mode=scheme.name, network=args.network,
        dataset=args.dataset, device=device, node=args.node_name, batch_size=args.batch_size,
        num_params=model.num_params, param_bytes=model.param_bytes, slowdown=args.slowdown,
        device_share=args.device_share,
        non_iid=bool(args.split_by_class), train_samples=num_samples,
        classes=sorted(int(c) for c in set(labels.tolist())) if args.split_by_class else None, config=vars(args),
        clock=getattr(args, "clock", None))
