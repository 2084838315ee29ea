"""FedAsync on the one dist_async server (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019): the
server mixes each model a worker sends into the global one, x <- (1 - a_t) x + a_t x_new, with
a_t = alpha x s(t - tau), where t counts the updates the server has mixed and tau is the count when the worker
received the model it started from.

kv.set_optimizer pickles this object to the server, which unpickles it by module path while `import mxnet` is
still running, so it imports mxnet's submodules by name (see training/schemes/servers/server_optimizer.py).

Key layout (R workers, P trainable arrays): worker r pushes its model to, and pulls the global model from, its own
range r*P .. r*P+P-1, so the server knows who sent it and since when the worker has been training. Once all P
arrays of a push are in, they are mixed in, and the sender's range is refreshed with the new global model, which
the pull after its push reads. Then one key per worker that hands it [staleness, a_t] of its last mixed push ([0, 0]
before the first), and the stop vote (the largest value pushed). One server only: a push must arrive whole.
"""
from mxnet import ndarray as nd
from mxnet import optimizer

from training.schemes.servers.server_optimizer import OwnStateRule, WorkerRanges


def staleness_weight(function, staleness, a, b):
    """s(t - tau) of the FedAsync paper: constant 1; polynomial (t - tau + 1)^-a; hinge 1 while t - tau <= b, then
    1 / (a (t - tau - b) + 1)."""
    if function == "constant":
        return 1.0
    if function == "polynomial":
        return (staleness + 1.0) ** -a
    if function == "hinge":
        return 1.0 if staleness <= b else 1.0 / (a * (staleness - b) + 1.0)
    raise ValueError(f"unknown staleness function {function!r}")


class FedAsyncLayout(WorkerRanges):
    def __init__(self, num_workers, num_arrays):
        super().__init__(num_workers, num_arrays)
        self.info_base = self.after_ranges
        self.control_key = self.info_base + num_workers


class WholePushRule(OwnStateRule):
    """A server rule that takes each worker's push whole: the arrays of worker r's range (FedAsyncLayout) are kept
    until all are in, then `arrived(rank, arrays)` updates the global model; the sender's range then holds the new
    global model, which the pull after its push reads. The info key hands a worker `self.last[rank]` (two numbers
    about its last push whole), the control key keeps the largest stop vote pushed."""

    def __init__(self, layout, **kwargs):
        super().__init__(**kwargs)
        self.layout = layout
        self.version = 0     # t: the global model's versions so far
        self.started = {}    # rank -> tau, the version its current model started from
        self.last = {}       # rank -> what its info key reports of its last push
        self.weights = {}    # array index -> the global model
        self.pending = {}    # rank -> {array index: what it pushed} until all arrays of its push are in
        self.ranges = {}     # rank -> {array index: the server's stored array of that key}
        self.infos = {}      # rank -> the server's stored array of its info key

    def arrived(self, rank, arrays):
        raise NotImplementedError

    def update(self, index, weight, grad, state):
        layout = self.layout
        if index == layout.control_key:
            weight[:] = nd.maximum(weight, grad)
        elif index >= layout.info_base:
            rank = index - layout.info_base
            self.infos[rank] = weight
            weight[:] = nd.array(self.last.get(rank, [0.0, 0.0]), ctx=weight.context)
        else:
            self._array(*divmod(index, layout.num_arrays), weight, grad)

    def _array(self, rank, i, weight, grad):
        if i not in self.weights:
            self.weights[i] = weight.copy()  # every range starts from the same initial model
        self.ranges.setdefault(rank, {})[i] = weight
        received = self.pending.setdefault(rank, {})
        received[i] = grad.copy()
        if len(received) < self.layout.num_arrays:
            weight[:] = self.weights[i]
            return
        self.arrived(rank, self.pending.pop(rank))
        for index, stored in self.ranges[rank].items():
            stored[:] = self.weights[index]
        if rank in self.infos:  # a worker's pushes of different keys may arrive in any order
            self.infos[rank][:] = nd.array(self.last[rank], ctx=self.infos[rank].context)


@optimizer.register
class FedAsyncMixer(WholePushRule):
    def __init__(self, layout, alpha, staleness, a, b, **kwargs):
        super().__init__(layout, **kwargs)
        self.alpha, self.staleness, self.a, self.b = alpha, staleness, a, b

    def arrived(self, rank, model):
        self.mix(rank, model)

    def mix(self, rank, model):
        """x <- (1 - a_t) x + a_t x_new for the model `rank` sent; the sender now starts from the new version."""
        staleness = self.version - self.started.get(rank, 0)
        mixing = self.alpha * staleness_weight(self.staleness, staleness, self.a, self.b)
        for i, new in model.items():
            self.weights[i] = (1.0 - mixing) * self.weights[i] + mixing * new
        self.version += 1
        self.started[rank] = self.version
        self.last[rank] = [float(staleness), mixing]
