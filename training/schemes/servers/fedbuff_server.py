"""FedBuff on the one dist_async server (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
AISTATS 2022): each delta a worker sends is weighted by its staleness, 1 / sqrt(1 + t - tau), and added to a buffer;
once `buffer_size` deltas are in, the global model moves by the server learning rate times their mean and the
buffer empties. t counts the global model's versions, tau the version the worker started from.

The key layout is FedAsync's (fedasync_server.FedAsyncLayout): worker r pushes its delta to, and pulls the global
model from, its own range; one key per worker hands it [staleness, buffered deltas] of its last push; the stop vote
keeps the largest value pushed. Imported by name on the server, as server_optimizer.py says.
"""
from mxnet import ndarray as nd
from mxnet import optimizer

from training.schemes.servers.fedasync_server import staleness_weight
from training.schemes.servers.server_optimizer import OwnStateRule


@optimizer.register
class BufferedAggregator(OwnStateRule):
    def __init__(self, layout, buffer_size, server_lr, **kwargs):
        super().__init__(**kwargs)
        self.layout, self.buffer_size, self.server_lr = layout, buffer_size, server_lr
        self.version = 0     # t: the global model's moves so far
        self.started = {}    # rank -> tau, the version its current model started from
        self.last = {}       # rank -> [staleness, deltas buffered] of its last push
        self.weights = {}    # array index -> the global model
        self.buffer = {}     # array index -> the staleness-weighted sum of the deltas buffered
        self.buffered = 0
        self.pending = {}    # rank -> {array index: its delta} until all arrays of its push are in
        self.ranges = {}     # rank -> {array index: the server's stored array of that key}
        self.infos = {}      # rank -> the server's stored array of its info key

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
        self.add(rank, self.pending.pop(rank))
        for index, stored in self.ranges[rank].items():
            stored[:] = self.weights[index]

    def add(self, rank, delta):
        """Buffer the delta `rank` sent, weighted by its staleness; move the global model once the buffer is full."""
        staleness = self.version - self.started.get(rank, 0)
        weight = staleness_weight("polynomial", staleness, 0.5, 0.0)
        for i, part in delta.items():
            self.buffer[i] = self.buffer[i] + weight * part if i in self.buffer else weight * part
        self.buffered += 1
        self.last[rank] = [float(staleness), float(self.buffered)]
        if self.buffered == self.buffer_size:
            for i, total in self.buffer.items():
                self.weights[i] = self.weights[i] + (self.server_lr / self.buffer_size) * total
            self.buffer, self.buffered = {}, 0
            self.version += 1
        self.started[rank] = self.version
        if rank in self.infos:  # a worker's pushes of different keys may arrive in any order
            self.infos[rank][:] = nd.array(self.last[rank], ctx=self.infos[rank].context)
