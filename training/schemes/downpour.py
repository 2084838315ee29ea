"""Downpour SGD (Dean et al., "Large Scale Distributed Deep Networks", 2012), a baseline of NBSSGD's paper, over
dist_async: each worker trains its replica with SGD on its own gradients, adds them up, pushes the sum every
--n-push steps (the server applies SGD to it, as in ASGD) and replaces its replica with the server's weights every
--n-fetch steps. A round ends at each push or fetch. BatchNorm statistics stay local to each worker.

The server applies SGD (-l, --momentum) to each pushed sum, or with --server-optimizer adagrad the paper's
Adagrad (-l, MXNet's AdaGrad: each weight's step divided by the root of its summed squared gradients).

The paper leaves open what a replica does with its gradients between fetches; here it applies them by the server's
rule (lr -l; Adagrad with the replica's own history), as the server will, so a replica does not compute n_fetch
gradients at one stale point.
"""

from training import argtypes
from training.lazy import mx
from training.options import Options, declaration, option
from training.schemes.base import Scheme

SERVER_OPTIMIZERS = ("sgd", "adagrad")  # downpour's server: SGD as ASGD's, or Adagrad as Dean et al.'s


@declaration
class DownpourOptions(Options):
    n_push: int = option("--n-push", default=4, type=argtypes.POSITIVE_INT,
                         help="local steps between pushes of their gradients")
    n_fetch: int = option("--n-fetch", default=4, type=argtypes.POSITIVE_INT,
                          help="local steps between fetches of the weights")
    server_optimizer: str = option("--server-optimizer", default="sgd", choices=SERVER_OPTIMIZERS,
                                   help="the rule of the server and of each replica's own steps: sgd (-l, "
                                        "--momentum) or adagrad (-l, Dean et al.'s)")


class Downpour(Scheme):
    name = "downpour"
    description = ("Downpour SGD, local SGD steps, the summed gradients pushed every --n-push steps and the weights "
                   "fetched every --n-fetch (dist_async)")
    Options = DownpourOptions
    kvstore = "dist_async"
    updates_locally = True

    def setup(self):
        from training.schemes.servers.server_optimizer import ServerOptimizer

        self.broadcast_initial_weights()
        self.kv.set_optimizer(ServerOptimizer(inner=self.server_rule(), control_key=self.control_key))
        self.transport.barrier()  # no worker pushes before every server holds the rule
        self.local_trainer(self.options.learning_rate, self.options.server_optimizer)
        ctx0 = self.model.ctxs[0]
        self.sums = [mx.nd.zeros(p.shape, ctx=ctx0, dtype=p.dtype) for p in self.model.trainable]
        self.weight_keys = list(range(len(self.sums)))
        self.steps = 0

    def server_rule(self):
        """The server's update of a pushed sum of n_push steps' gradients."""
        options = self.options
        common = dict(learning_rate=options.learning_rate, wd=options.wd,
                      lr_scheduler=self.server_scheduler(options.n_push))
        if options.server_optimizer == "adagrad":
            return mx.optimizer.AdaGrad(**common)
        return mx.optimizer.SGD(momentum=options.momentum, **common)

    def local_step(self):
        self.model.reduce_gradients()
        for total, p in zip(self.sums, self.model.trainable):
            total += p.list_grad()[0]
        self.trainer.update(1)
        self.steps += 1

    def round_done(self, steps, step_seconds):
        return self.push_due or self.fetch_due

    @property
    def push_due(self):
        return self.steps % self.options.n_push == 0

    @property
    def fetch_due(self):
        return self.steps % self.options.n_fetch == 0

    def aggregate(self, stop_vote):
        self.control[:] = float(stop_vote)
        if self.push_due:
            self.corrupt(self.sums)
            self.kv.push(self.weight_keys + [self.control_key], self.sums + [self.control])
        else:
            self.kv.push(self.control_key, self.control)
        if self.fetch_due:
            self.kv.pull(self.weight_keys, out=[p.list_data() for p in self.model.trainable])
        self.kv.pull(self.control_key, out=self.control)
        if self.push_due:
            for total in self.sums:
                total[:] = 0
        return stop_vote or self.stop_requested()
