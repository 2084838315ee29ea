"""FedDrop: FedAvg with federated dropout on the slow workers (Caldas, Konečný, McMahan, Talwalkar, "Expanding the
Reach of Federated Learning by Reducing Client Resource Requirements", 2018), a baseline of ESync's journal version.

Every worker runs --sync-interval local SGD steps (lr -ll) a round and all average synchronously, as in FedAvg. The
--drop-workers slowest (by their fastest step of the first round, which everyone trains in full) train a sub-model
instead: in every Conv2D and Dense layer but the last, a fraction --drop-rate of the units (filters, neurons) is
left out, which ones drawn anew each round (structured dropout, the paper's federated dropout). The sub-model's
layers are narrower, so its steps are really shorter. Its update is mapped back onto the full model (the kept
units' rows and columns), and each weight's average is over the workers that trained it. The kept units of a
worker come from a generator seeded by the job's seed, the round and the worker's rank, so every worker knows
everyone's and no mask travels. Networks: chains of Conv2D and Dense layers (models.WIDTHS: lenet, mlp).
"""
import math

import models
from training import argtypes, runlog
from training.lazy import mx, np
from training.options import ModeError, Options, declaration, local_lr, local_optimizer, option, sync_interval
from training.schemes.base import FixedLocalSteps


def kept_units(widths, rate, seed, round_number, rank):
    """Per hidden layer, the sorted units a dropping worker keeps in a round: (1 - rate) of each, at least one."""
    rng = np.random.RandomState([seed, round_number, rank])
    return [np.sort(rng.choice(width, max(1, math.floor(width * (1 - rate) + 1e-9)), replace=False))
            for width in widths]


def layer_slices(shapes, kept):
    """For each (weight, bias) pair of a chain of layers, the index each takes in a sub-model keeping `kept` units of
    every layer but the last: (rows, columns) for a weight, rows for a bias. A Dense layer after the last
    convolution reads its kept channels' features (channel-major: c x H x W .. c x H x W + H x W - 1)."""
    slices, inputs, previous_width = [], None, None
    for layer, (weight, _) in enumerate(zip(shapes[0::2], shapes[1::2])):
        rows = kept[layer] if layer < len(kept) else np.arange(weight[0])
        columns = np.arange(weight[1]) if inputs is None else inputs
        if inputs is not None and len(weight) == 2 and weight[1] != previous_width:  # features of a flattened map
            per_channel = weight[1] // previous_width
            columns = (inputs[:, None] * per_channel + np.arange(per_channel)).ravel()
        slices += [np.ix_(rows, columns), rows]
        inputs, previous_width = rows, weight[0]
    return slices


def weight_counts(shapes, droppers, widths, rate, seed, round_number, num_workers):
    """How many workers trained each weight in a round: everyone not dropping, and the droppers their kept part."""
    counts = [np.full(shape, float(num_workers - len(droppers)), np.float32) for shape in shapes]
    for rank in droppers:
        for count, where in zip(counts, layer_slices(shapes, kept_units(widths, rate, seed, round_number, rank))):
            count[where] += 1.0
    return counts


@declaration
class FedDropOptions(Options):
    local_lr: float = local_lr()
    local_optimizer: str = local_optimizer()
    sync_interval: int = sync_interval()
    drop_rate: float = option("--drop-rate", default=0.5, type=argtypes.OPEN_FRACTION,
                              help="the fraction of each hidden layer's units (filters, neurons) a slow worker's "
                                   "sub-model leaves out, in (0, 1) (default 0.5)")
    drop_workers: int = option("--drop-workers", default=1, type=argtypes.POSITIVE_INT,
                               help="how many of the slowest workers train sub-models (default 1)")

    @classmethod
    def check(cls, args, num_workers):
        if args.network not in models.WIDTHS:
            raise ModeError(f"-m feddrop builds sub-models of chains of Conv2D and Dense layers "
                            f"({', '.join(models.WIDTHS)}), not of {args.network}")
        if args.drop_workers >= num_workers:
            raise ModeError(f"--drop-workers {args.drop_workers} leaves no worker with the full model: the job has "
                            f"{num_workers} workers (DMLC_NUM_WORKER)")


class FedDrop(FixedLocalSteps):
    name = "feddrop"
    description = ("FedDrop, FedAvg whose --drop-workers slowest train sub-models with --drop-rate of each hidden "
                   "layer's units left out, mapped back onto the full model (dist_sync)")
    Options = FedDropOptions
    kvstore = "dist_sync"

    def setup(self):
        self.control = mx.nd.zeros((1 + self.num_workers,))  # [stop votes, each worker's step time]
        self.broadcast_initial_weights()
        self.full = self.model.net
        self.shapes = [p.shape for p in self.model.trainable]
        self.widths = models.WIDTHS[self.model.network]
        self.start = [p.data(self.model.ctxs[0]).asnumpy() for p in self.model.trainable]  # W
        self.delta = [mx.nd.zeros(shape, ctx=self.model.ctxs[0]) for shape in self.shapes]
        self.buffers = self.exchanged(self.delta)
        self.full_trainer = self.local_trainer(self.options.local_lr, self.options.local_optimizer)
        self.narrow = None         # the sub-model's network, built the first time this worker drops
        self.droppers = ()         # ranks that train sub-models, chosen after the first round
        self.round_number = 0
        self.step_seconds = None
        self.kept = None           # this round's kept units, when this worker drops
        self.evidence = None       # the first round's fastest step of each rank, which chose the droppers

    def begin_round(self, completed):
        self.round_number = completed + 1
        self.kept = None
        if self.rank in self.droppers:
            self.kept = kept_units(self.widths, self.options.drop_rate, self.options.seed, self.round_number,
                                   self.rank)
            self.train_narrow()

    def train_narrow(self):
        """The model trains the sub-model of this round's kept units, starting from their part of W."""
        if self.narrow is None:
            self.narrow = self.model.built(self.model.network, widths=tuple(len(units) for units in self.kept))
            self.model.use_network(self.narrow)
            self.narrow_trainer = self.local_trainer(self.options.local_lr, self.options.local_optimizer)
            self.model.warm_up(self.step_batch_size)
        self.model.use_network(self.narrow)
        self.trainer = self.narrow_trainer
        for p, start, where in zip(self.model.trainable, self.start, layer_slices(self.shapes, self.kept)):
            p.set_data(mx.nd.array(start[where]))

    def round_done(self, steps, step_seconds):
        # The fastest step so far is what the device can do: a busy machine and the first step's warm-up only ever
        # lengthen a step, and can make a fast worker's smoothed time exceed a slow one's
        self.step_seconds = step_seconds if self.step_seconds is None else min(self.step_seconds, step_seconds)
        return super().round_done(steps, step_seconds)

    def aggregate(self, stop_vote):
        self.fill_delta()
        self.control[:] = 0
        self.control[0] = float(stop_vote)
        self.control[1 + self.rank] = self.step_seconds
        self.transport.sum(self.keys, self.buffers)
        control = self.control.asnumpy()
        counts = weight_counts(self.shapes, self.droppers, self.widths, self.options.drop_rate, self.options.seed,
                               self.round_number, self.num_workers)
        self.model.use_network(self.full)
        self.trainer = self.full_trainer
        for p, start, total, count in zip(self.model.trainable, self.start, self.delta, counts):
            start += total.asnumpy() / count
            p.set_data(mx.nd.array(start))
        if self.round_number == 1:
            self.evidence = control[1:].tolist()
            self.droppers = self.slowest(self.evidence)
        return control[0] > 0

    def fill_delta(self):
        """This round's change of W: the full model's, or the sub-model's put back in its place (zeros elsewhere)."""
        if self.kept is None:
            for p, start, delta in zip(self.model.trainable, self.start, self.delta):
                delta[:] = p.data(self.model.ctxs[0]).asnumpy() - start
            return
        for p, start, delta, where in zip(self.model.trainable, self.start, self.delta,
                                          layer_slices(self.shapes, self.kept)):
            full = np.zeros_like(start)
            full[where] = p.data(self.model.ctxs[0]).asnumpy() - start[where]
            delta[:] = full

    def slowest(self, step_seconds):
        """The --drop-workers ranks with the longest step times (ties to the higher rank)."""
        order = sorted(range(self.num_workers), key=lambda rank: (step_seconds[rank], rank), reverse=True)
        return tuple(sorted(order[:self.options.drop_workers]))

    def global_arrays(self):
        return [p.data(self.model.ctxs[0]) for p in self.model.trainable]

    def round_record(self):
        record = {runlog.SUB_MODEL: self.kept is not None}
        if self.round_number == 1:
            record[runlog.FASTEST_STEPS] = self.evidence
        return record
