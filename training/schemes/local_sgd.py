"""Local SGD with synchronous delta averaging, shared by ESync and FedAvg: every worker runs local steps from the
round's start weights W, then all aggregate synchronously (over the ps-lite servers or any MPI collective): sum
the deltas, and weights = W + global_lr x sum / num_workers (global_lr 1: the average of the workers' models).
BatchNorm statistics are averaged. The local optimizer's state carries over from round to round. The schemes
differ in when a worker's round ends.

What the global model does with the workers' average delta is its outer optimizer (--outer-optimizer): MXNet's
optimizer of that name applied to the average as a pseudo-gradient (W minus the average model, -average delta),
with learning rate -gl and momentum --server-momentum. sgd without momentum is the plain average move above.

Against the drift of the workers' models on non-i.i.d. data, parts of their own (training/schemes/averaging/):
--proximal rho adds FedProx's (rho / 2) |x - W|^2 to the local steps' loss, --scaffold corrects every local
step's gradient by SCAFFOLD's control variates and --client-momentum beta mixes beta of the global model's last move
into it (FedCM; corrections.py); --normalised-averaging weighs each worker's delta
by its local work (FedNova, weighting.py); --server-momentum beta moves W by a velocity of the averages (SlowMo,
FedAvgM; with --outer-optimizer nag Nesterov's, DiLoCo's outer step; outer.py).

When the average reaches the workers is the last part (timing.py): at once, or with --overlap a round late while
they run the next round's local steps (delayed averaging, as overlap local SGD).
"""
from training import argtypes
from training.lazy import mx
from training.options import (
    Choice,
    OptionError,
    Options,
    Range,
    declaration,
    global_lr,
    local_lr,
    local_optimizer,
    option,
    proximal,
)
from training.schemes.averaging.corrections import corrections
from coordination.records import smoothed
from training.schemes.averaging.outer import OUTER_OPTIMIZERS, OuterOptimizer
from training.schemes.averaging.timing import timing
from training.schemes.averaging.weighting import weighting
from training.schemes.base import LocallyUpdating

# The correction of non-i.i.d. drift chosen by measurement (docs/esync.md#non-iid-drift), --drift-correction: each
# delta divided by the root of its steps, the global model moved by a velocity of the averages.
DRIFT_CORRECTION = {"normalised_averaging": True, "normalisation_power": 0.5, "server_momentum": 0.8}


@declaration
class LocalSGDOptions(Options):
    local_lr: float = local_lr()
    local_optimizer: str = local_optimizer()
    global_lr: float = global_lr()
    overlap: bool = option(
        "--overlap", switch=True,
        help="send a round's delta and go on with the next round's local steps while it is aggregated; the average "
             "is applied at the end of that round, keeping the local progress made meanwhile (delayed averaging)")
    proximal: float = proximal()
    outer_optimizer: str = option(
        "--outer-optimizer", default="sgd", choices=OUTER_OPTIMIZERS, search=Choice(("sgd", "nag")),
        help="what the global model does with the workers' average delta: MXNet's optimizer of that name applied "
             "to it as a pseudo-gradient, learning rate -gl, momentum --server-momentum (sgd: without momentum the "
             "average itself, FedAvg's and ESync's; nag: Nesterov's momentum, DiLoCo's outer step; adam: FedAdam's)")
    server_momentum: float = option(
        "--server-momentum", default=0.0, type=argtypes.momentum, search=Range(0.0, 0.95, limits=(0.0, 0.99)),
        help="the outer optimizer's momentum beta (sgd, nag): each aggregation moves the global model by beta x its "
             "last move + the average of the deltas (default 0: the average alone)")
    normalised_averaging: bool = option(
        "--normalised-averaging", switch=True,
        help="average each worker's delta divided by its local steps and scale the average by the workers' mean "
             "steps (FedNova), so that a worker's share counts the same however many steps it took; SGD and momentum "
             "local optimizers")
    normalisation_power: float = option(
        "--normalisation-power", default=1.0, type=argtypes.SHARE,
        help="with --normalised-averaging: divide each delta by a_i to this power p instead of a_i, the sum scaled "
             "so that the global model still moves the workers' mean a_i steps (1: FedNova; below 1 a slow worker's "
             "share counts more than in the plain average without FedNova's amplified noise)")
    scaffold: bool = option(
        "--scaffold", switch=True,
        help="correct every local step's gradient by SCAFFOLD's control variates c - c_i (option II), which travel "
             "with the deltas")
    client_momentum: float = option(
        "--client-momentum", default=0.0, type=argtypes.momentum,
        help="each local step follows (1 - beta) x its own gradient + beta x the global model's last move spread "
             "over the worker's steps (FedCM's client-level momentum, alpha = 1 - beta; default 0: its gradient alone)")
    drift_correction: bool = option(
        "--drift-correction", switch=True,
        help="the correction of non-i.i.d. drift chosen by measurement (docs/esync.md): "
             + ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in DRIFT_CORRECTION.items()
                         if value is not True) + " with --normalised-averaging")

    @classmethod
    def resolve(cls, args):
        """--drift-correction sets its flags, which must then be left at their defaults."""
        if not getattr(args, "drift_correction", False):
            return
        for name, value in DRIFT_CORRECTION.items():
            if getattr(args, name) != cls.__dataclass_fields__[name].default:
                raise OptionError(f"--drift-correction sets --{name.replace('_', '-')}: leave it out")
            setattr(args, name, value)


class DeltaAveraging(LocallyUpdating):
    kvstore = "dist_sync"
    reports_aggregation = False  # time every aggregation (aggregation_seconds; ESync's adaptive policy reads it)
    round_steps = 0              # local steps since the last delta was sent

    @classmethod
    def virtual_refusal(cls, args):
        if getattr(args, "overlap", False):
            return (f"{cls.name} --overlap computes while its sum travels; the virtual clock charges a sum as "
                    "blocking")
        return super().virtual_refusal(args)

    def __init__(self, options, model, transport):
        super().__init__(options, model, transport)
        self.weighting = weighting(options)  # how a delta is weighted in the sum (training/schemes/averaging/)
        self.corrections = corrections(options)  # what a local step adds to its gradient

    def setup(self):
        options = self.options
        if self.weighting.control_entries:
            self.control = mx.nd.zeros((1 + self.weighting.control_entries,))  # after the stop vote, summed too
        self.broadcast_initial_weights()
        self.local_trainer(options.local_lr, options.local_optimizer)
        self.start = [[d.copy() for d in p.list_data()] for p in self.model.trainable]
        self.delta = self.zeros_like_weights()
        self.buffers = self.exchanged(self.delta)
        self.sum_keys = self.keys
        for correction in self.corrections:
            keys, arrays = correction.setup(self)
            self.sum_keys, self.buffers = self.sum_keys + keys, self.buffers + list(arrays)
        self.outer = OuterOptimizer(options.outer_optimizer, options.server_momentum, self.delta)
        self.aggregation_seconds = None  # smoothed: how long an aggregation takes, when reports_aggregation
        self.timing = timing(self)       # when the average reaches the workers (training/schemes/averaging/)
        self.model.steps_overlap_transfers = self.timing.overlaps

    def zeros_like_weights(self):
        """One zero array per trainable parameter, on the first device."""
        return [mx.nd.zeros(p.shape, ctx=self.model.ctxs[0], dtype=p.dtype) for p in self.model.trainable]

    def aggregate(self, stop_vote):
        return self.timing.aggregate(stop_vote)

    def aggregate_now(self, stop_vote):
        started = self.clock.now()
        self.fill_buffers(stop_vote)
        self.transport.sum(self.sum_keys, self.buffers)
        if self.reports_aggregation:
            for entry in self.buffers:
                entry.wait_to_read()  # the loop waits for the update anyway: this only times the sum apart from it
            self.observe_aggregation(self.clock.now() - started)
        for p, move, starts in zip(self.model.trainable, self.global_moves(), self.start):
            for data, start in zip(p.list_data(), starts):
                start += move.as_in_context(start.context)
                start.copyto(data)
        self.stats.scatter(1.0 / self.num_workers)
        return stop_vote or self.stop_requested()

    def round_record(self):
        record = super().round_record()
        self.timing.record(record)
        return record

    def fill_buffers(self, stop_vote, keep=None):
        """What this round sends: its delta (weights - W; copied as it is into `keep` when given: the progress this
        worker really made), what the corrections send with it (SCAFFOLD's change of c_i), the delta as the
        weighting weighs it (with what travels beside the stop vote), whatever a Byzantine worker does to it, the
        stop vote and the BatchNorm statistics."""
        ctx0 = self.model.ctxs[0]
        for p, delta, start in zip(self.model.trainable, self.delta, self.start):
            mx.nd.elemwise_sub(p.data(ctx0), start[0], out=delta)
        if keep is not None:
            for delta, kept in zip(self.delta, keep):
                delta.copyto(kept)
        steps, self.round_steps = max(self.round_steps, 1), 0
        for correction in self.corrections:
            correction.before_send(self, steps)
        self.weighting.weigh(self.delta, steps, self.control)
        self.corrupt(self.delta)
        self.control[0] = float(stop_vote)
        self.stats.gather()

    def global_moves(self):
        """Per trainable parameter, the global model's move for the sums now in the delta buffers (which the
        corrections read first)."""
        for correction in self.corrections:
            correction.after_sum(self)
        scale = self.weighting.scale(self.control, self.averaged_workers())
        return self.outer.step(self.delta, scale, self.options.global_lr * self.lr_factor)

    def averaged_workers(self):
        """Whose deltas the sums in the buffers hold: every worker's."""
        return self.num_workers

    def local_step(self):
        self.model.reduce_gradients()
        for correction in self.corrections:
            correction.correct(self)
        self.trainer.update(1)
        self.round_steps += 1

    def observe_aggregation(self, seconds):
        self.aggregation_seconds = smoothed(self.aggregation_seconds, seconds)

    def settle(self):
        self.timing.settle(super().settle)

    def global_arrays(self):
        return self.timing.global_arrays(super().global_arrays)

    def finish(self):
        self.timing.finish()
        super().finish()
