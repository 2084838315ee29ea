"""SSGD with backup workers (Chen, Pan, Monga, Bengio, Jozefowicz, "Revisiting Distributed Synchronous SGD", 2016):
of N + b workers, each step applies the mean of the first N gradients computed at its weights and drops the b late
ones, so that no step waits for the slowest worker.

The state server counts the gradients of each step as they are ready (/arrive/ answers whether this one is among
the first N). Over dist_sync, or an MPI allreduce, every worker must add something to every step's sum, so each
worker has an aggregator thread that does it for it, step after step: the gradient its training thread handed over
when the state server accepted it, or zeros once the step closed without it (/watch/; what a worker asks the state
server is the rule's worker side, coordination/rules/backup.py). A late training thread drops
its gradient and computes the next one at the newest weights (once the step it was late for has arrived). Every
worker applies every step's sum, in order, to its copy of the global weights W (SGD with -l, --momentum, --wd, the
sum divided by the gradients in it), so all hold the same W; the training thread copies W into the model before
each step. BatchNorm statistics are averaged over the accepted gradients' workers. A worker's round is one step of
its own: a late worker's round spans several of the job's steps.
"""
import threading

from coordination.rules.backup import Steps
from training import argtypes, runlog
from training.faults import watchdog
from training.lazy import mx
from training.options import CoordinatedOptions, ModeError, declaration, option
from training.schemes.base import Scheme


@declaration
class BackupOptions(CoordinatedOptions):
    backup_workers: int = option("--backup-workers", default=1, type=argtypes.POSITIVE_INT,
                                 help="each step applies the first (workers - b) gradients and drops the b late ones "
                                      "(default 1)")

    @classmethod
    def check(cls, args, num_workers):
        if args.backup_workers >= num_workers:
            raise ModeError(f"--backup-workers {args.backup_workers} leaves no gradient to apply: the job has "
                            f"{num_workers} workers (DMLC_NUM_WORKER); give fewer than that")


class BackupSync(Scheme):
    name = "backup"
    description = ("SSGD with backup workers, each step the mean of the first workers - --backup-workers gradients, "
                   "the late ones dropped (dist_sync)")
    Options = BackupOptions
    kvstore = "dist_sync"
    virtual_clock = ("sums its steps on a thread of its own beside the worker's, which a clock of one thread a worker "
                     "cannot order")

    @property
    def accept(self):
        """N: the gradients each step applies."""
        return self.num_workers - self.options.backup_workers

    def setup(self):
        options = self.options
        self.steps = Steps((options.state_server_ip, options.state_server_port), self.rank, self.num_workers,
                           self.accept, options.sync_timeout, watchdog.give_up)
        if self.rank == 0:
            self.steps.set_up_job()
        self.control = mx.nd.zeros((2,))  # [stop votes, gradients in the sum]
        self.broadcast_initial_weights()  # ends in a barrier: /init/ precedes every worker's first request
        ctx0 = self.model.ctxs[0]
        self.weights = [p.data(ctx0).copy() for p in self.model.trainable]  # W
        self.sent = [mx.nd.zeros(p.shape, ctx=ctx0, dtype=p.dtype) for p in self.model.trainable]
        self.buffers = self.exchanged(self.sent)
        self.optimizer = mx.optimizer.SGD(learning_rate=options.learning_rate, momentum=options.momentum,
                                          wd=options.wd)
        self.updater = mx.optimizer.get_updater(self.optimizer)
        self.changed = threading.Condition()
        self.applied = 0          # steps applied to W (guarded by `changed`, as are the next three)
        self.handed = {}          # step -> this worker's stop vote, for the steps the state server accepted it in
        self.votes = 0.0          # stop votes of dropped gradients, for the next push
        self.stopped = False      # a step brought a stop vote: every worker stops after it
        self.failure = None       # what ended the aggregator thread early
        self.computed_at = 0      # the step the model's weights are W of
        self.last = {}            # this round's record
        if self.stats:
            self.stats.gather()
            self.global_statistics = self.stats.buffer.copy()
        threading.Thread(target=self.aggregate_steps, name="backup-aggregator", daemon=True).start()

    def take_newest_weights(self):
        """The model takes the newest W (and statistics): its next gradient will be one of that step's, and rank 0
        evaluates the newest model."""
        with self.changed:
            self.computed_at = self.applied
            for p, weight in zip(self.model.trainable, self.weights):
                for data in p.list_data():
                    weight.copyto(data)
            if self.stats:
                self.stats.scatter(source=self.global_statistics)

    def aggregate(self, stop_vote):
        """Hand the gradient to the aggregator if the state server accepts it for its step, and wait for that step;
        else drop it. True once a step has brought a stop vote."""
        self.check_aggregator()
        self.last = {}
        if self.stopped:
            self.take_newest_weights()
            return True
        self.model.reduce_gradients()
        t = self.computed_at
        accepted = self.steps.accepted(t)
        self.last = {runlog.BACKUP_STEP: t, runlog.DROPPED: not accepted}
        with self.changed:
            if accepted:
                for p, sent in zip(self.model.trainable, self.sent):
                    p.grad(self.model.ctxs[0]).copyto(sent)
                self.stats.gather()
                self.handed[t] = float(stop_vote)
                self.changed.notify_all()
            else:
                self.votes += float(stop_vote)
            # Late or not, step t has closed or will once this gradient is in: its weights are the next to compute at.
            self.changed.wait_for(lambda: self.applied > t or self.stopped or self.failure is not None)
            if not accepted:
                self.last[runlog.LATE_BY] = self.applied - t  # steps applied since the one it was computed for
        self.check_aggregator()
        self.take_newest_weights()
        return self.stopped

    def aggregate_steps(self):
        """The aggregator thread: one contribution to every step's sum until a step brings a stop vote."""
        try:
            step = 0
            while not self.stopped:
                self.contribute(step, self.steps.closed(step))
                step += 1
        except BaseException as error:  # the training thread raises it at its next aggregation
            with self.changed:
                self.failure = error
                self.changed.notify_all()

    def contribute(self, step, accepted):
        """Add this worker's gradient (or zeros) to the step's sum and apply the sum to W."""
        with self.changed:
            if self.rank in accepted:
                self.changed.wait_for(lambda: step in self.handed)
                vote, counted = self.handed.pop(step), 1.0
            else:
                for sent in self.sent:
                    sent[:] = 0
                if self.stats:
                    self.stats.buffer[:] = 0
                vote, counted = 0.0, 0.0
            self.control[0] = vote + self.votes
            self.control[1] = counted
            self.votes = 0.0
        self.transport.sum(self.keys, self.buffers)
        votes, gradients = self.control.asnumpy().tolist()
        with self.changed:
            self.optimizer.rescale_grad = 1.0 / gradients
            for i, (weight, total) in enumerate(zip(self.weights, self.sent)):
                self.updater(i, total, weight)
            if self.stats:
                self.global_statistics = self.stats.buffer / gradients
            self.applied = step + 1
            self.stopped = votes > 0
            self.changed.notify_all()

    def check_aggregator(self):
        if self.failure is not None:
            raise self.failure

    def settle(self):
        with self.changed:
            for weight in self.weights:
                weight.wait_to_read()

    def round_record(self):
        return dict(self.last)

    def global_arrays(self):
        """W, the same on every worker once it has applied the same steps."""
        return list(self.weights)

    def scale_learning_rates(self, factor):
        self.lr_factor = factor
        self.optimizer.set_learning_rate(self.options.learning_rate * factor)

    def finish(self):
        """The model ends as W (the last step's weights on every worker)."""
        if hasattr(self, "weights"):
            self.take_newest_weights()
        if hasattr(self, "steps"):
            self.steps.close()
