"""DC-ASGD as its paper defines it (Zheng et al., "Asynchronous Stochastic Gradient Descent with Delay
Compensation", 2017), on the one dist_async server: one backup of the weights per worker.

When worker m's gradient g arrives: w <- w - lr (g + lambda g * g * (w - w_bak(m))), and w_bak(m) <- w, the weights
the worker pulls next. lambda is constant (DC-ASGD-c), or with momentum m > 0 (--dc-adaptive) DC-ASGD-a's
lambda0 / sqrt(MeanSquare + 1e-7), elementwise, where MeanSquare <- m MeanSquare + (1 - m) g * g over the gradients
of every worker, updated before it scales g.

MXNet's own DCASGD (-m dcasgd) keeps one backup per key, the weights before the last push of anyone, because its
server never learns who pushed. Here every worker pushes to and pulls from its own key range
r*P .. r*P+P-1, so the server knows; the global weights live on the server and a worker's range is refreshed with
them at its push. After the ranges comes the stop vote (the largest value pushed). One server only.

kv.set_optimizer pickles this object to the server, which unpickles it by module path while `import mxnet` is
still running, so it imports mxnet's submodules by name (see training/schemes/servers/server_optimizer.py).
"""
from mxnet import ndarray as nd
from mxnet import optimizer

from training.schemes.servers.server_optimizer import OwnStateRule, WorkerRanges


@optimizer.register
class DelayCompensatedPerWorker(OwnStateRule):
    def __init__(self, num_workers, num_arrays, lr, lamda, wd=0.0, adaptive=0.0, **kwargs):
        super().__init__(**kwargs)
        self.layout = WorkerRanges(num_workers, num_arrays)
        self.control_key = self.layout.after_ranges
        self.step, self.lamda, self.decay, self.adaptive = lr, lamda, wd, adaptive
        self.mean_squares = {}  # array index -> DC-ASGD-a's mean square of the gradients
        self.weights = {}   # array index -> the global weights
        self.initial = {}   # array index -> the weights every worker pulled at the start
        self.backups = {}   # (rank, array index) -> the weights that worker pulled last

    def update(self, index, weight, grad, state):
        if index == self.control_key:
            weight[:] = nd.maximum(weight, grad)
            return
        rank, i = divmod(index, self.layout.num_arrays)
        if i not in self.weights:
            self.weights[i] = weight.copy()  # every range starts from the same initial weights
            self.initial[i] = self.weights[i]
        w = self.weights[i]
        backup = self.backups.get((rank, i), self.initial[i])
        g = grad + self.decay * w
        self.weights[i] = w - self.step * (g + self.variance_control(i, g) * g * g * (w - backup))
        self.backups[(rank, i)] = self.weights[i]
        weight[:] = self.weights[i]

    def variance_control(self, i, g):
        """lambda for the gradient g of array i."""
        if not self.adaptive:
            return self.lamda
        mean_square = self.mean_squares.get(i, nd.zeros_like(g))
        self.mean_squares[i] = mean_square = self.adaptive * mean_square + (1 - self.adaptive) * g * g
        return self.lamda / nd.sqrt(mean_square + 1e-7)
