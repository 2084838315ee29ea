"""Zeno++ on the dist_async servers: the trusted side scores every worker's gradient before applying it.

kv.set_optimizer pickles this object to the server, which unpickles it by module path while `import mxnet` is
still running, so it imports mxnet's submodules by name (see training/schemes/servers/server_optimizer.py).

Key layout (R kvstore workers, P trainable arrays): each worker r pushes and pulls its own range r*P .. r*P+P-1,
so the server knows who sent what; a validator's range carries its validation gradient v instead. The server
keeps the one global model itself and hands it out through every range. Training worker j (0-based) is judged by
validator j mod V, against that validator's latest v. When all P arrays of a worker's push have arrived, the
gradient g is rescaled to v's norm, g' = g |v| / |g|, and applied (w -= lr g') when
lr <g', v> - rho |g'|^2 + lr epsilon >= 0; otherwise it is dropped. A v serves for at most as many accepted updates
as its validator judges workers: after that, gradients are dropped unjudged until that validator sends a v of a
newer model (the trusted side keeps its v fresh; a validator starved of CPU would otherwise judge a model that has
moved on). Then the worker's whole range is refreshed, so its next pull reads one consistent model. After the
ranges: one key per worker that tells whether it is a validator (pushed once, before any gradient), one that
hands it its [accepted, rejected, unjudged] counts, and the stop vote (the largest value pushed).
"""
import math
from collections import Counter

from mxnet import ndarray as nd
from mxnet import optimizer

from training.schemes.servers.server_optimizer import OwnStateRule, WorkerRanges


def judges(training_ranks, validator_ranks):
    """{training worker's rank: the rank of the validator that judges it}: worker j (0-based) goes to validator j mod V
    (sync and async)."""
    return {rank: validator_ranks[j % len(validator_ranks)] for j, rank in enumerate(training_ranks)}


class ZenoLayout(WorkerRanges):
    """Key numbers of a Zeno++ job."""

    def __init__(self, num_workers, num_arrays):
        super().__init__(num_workers, num_arrays)
        self.role_base = self.after_ranges
        self.verdict_base = self.role_base + num_workers
        self.control_key = self.verdict_base + num_workers


@optimizer.register
class ZenoPlusPlus(OwnStateRule):
    def __init__(self, layout, lr, rho, epsilon, **kwargs):
        super().__init__(**kwargs)
        self.layout = layout
        self.lr, self.rho, self.epsilon = lr, rho, epsilon
        self.validators = set()
        self.judge_of = None  # training rank -> its validator's rank, once every role is in
        self.share = None     # validator rank -> how many training workers it judges
        self.uses_of_v = {}  # validator rank -> accepted updates its latest v judged
        self.weights = {}    # array index -> the global model
        self.v = {}          # validator rank -> {array index: its latest gradient}
        self.pending = {}    # rank -> {array index: gradient} until all arrays of its push are in
        self.ranges = {}     # rank -> {array index: the server's stored array of that key}
        self.counts = {}     # rank -> [accepted, rejected, unjudged]

    def update(self, index, weight, grad, state):
        layout = self.layout
        if index == layout.control_key:
            weight[:] = nd.maximum(weight, grad)
        elif index >= layout.verdict_base:
            weight[:] = nd.array(self.counts.get(index - layout.verdict_base, [0, 0, 0]), ctx=weight.context)
        elif index >= layout.role_base:
            weight[:] = grad
            if grad.asscalar() > 0:
                self.validators.add(index - layout.role_base)
        else:
            self._array(*divmod(index, layout.num_arrays), weight, grad)

    def _array(self, rank, i, weight, grad):
        if i not in self.weights:
            self.weights[i] = weight.copy()  # every range starts from the same initial weights
        self.ranges.setdefault(rank, {})[i] = weight
        weight[:] = self.weights[i]
        if rank in self.validators:
            self.v.setdefault(rank, {})[i] = grad.copy()
            if i == self.layout.num_arrays - 1:
                self.uses_of_v[rank] = 0
            return
        received = self.pending.setdefault(rank, {})
        received[i] = grad.copy()
        if len(received) == self.layout.num_arrays:
            self._judge(rank, self.pending.pop(rank))
            # The pull that follows this push reads one consistent model, not a mix of before and after.
            for index, stored in self.ranges[rank].items():
                stored[:] = self.weights[index]

    def _validator_of(self, rank):
        if self.judge_of is None:  # every role was pushed before the first gradient (ZenoAsync._roles)
            training = [r for r in range(self.layout.num_workers) if r not in self.validators]
            self.judge_of = judges(training, sorted(self.validators))
            self.share = Counter(self.judge_of.values())
        return self.judge_of[rank]

    def _judge(self, rank, gradient):
        counts = self.counts.setdefault(rank, [0, 0, 0])
        indices = sorted(gradient)
        validator = self._validator_of(rank)
        v = self.v.get(validator, {})
        if len(v) < len(indices) or self.uses_of_v[validator] >= self.share[validator]:
            counts[2] += 1  # nothing (fresh enough) to validate against
            return
        g_norm2 = _total(nd.sum(gradient[i] * gradient[i]) for i in indices)
        v_norm2 = _total(nd.sum(v[i] * v[i]) for i in indices)
        g_dot_v = _total(nd.sum(gradient[i] * v[i]) for i in indices)
        if not (g_norm2 > 0 and math.isfinite(g_norm2) and math.isfinite(v_norm2)):
            counts[1] += 1
            return
        scale = math.sqrt(v_norm2 / g_norm2)
        score = self.lr * scale * g_dot_v - self.rho * v_norm2 + self.lr * self.epsilon
        if not score >= 0:  # NaN included
            counts[1] += 1
            return
        counts[0] += 1
        self.uses_of_v[validator] += 1
        for i in indices:
            self.weights[i] -= (self.lr * scale) * gradient[i]


def _total(scalars):
    return float(nd.add_n(*scalars).asscalar())
