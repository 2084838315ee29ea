"""Asynchronous SGD (ASGD) and DC-ASGD over dist_async: the servers update the weights on every push.

The update runs on the servers (training/server_optimizer.py); a worker pushes its gradient and pulls the
newest weights. BatchNorm statistics are pushed too and blended on the server.
"""
import mxnet as mx

from training.schemes.base import Scheme
from training.server_optimizer import AsyncServerOptimizer


class Async(Scheme):
    name = "async"
    kvstore = "dist_async"

    def setup(self):
        self.broadcast_initial_weights()
        self.kv.set_optimizer(AsyncServerOptimizer(
            inner=self.server_rule(), aux_keys=self.keys[len(self.model.trainable):],
            control_key=self.control_key, num_workers=self.num_workers))
        self.kv._barrier()  # no worker pushes before every server holds the optimizer
        ctx0 = self.model.ctxs[0]
        grads = [p.list_grad() for p in self.model.trainable]
        aux_pushed = [p.data(ctx0) for p in self.model.aux]  # device copies would be summed, not averaged
        self.pushed = grads + aux_pushed + [self.control]
        self.pulled = [p.list_data() for p in self.model.params] + [self.control]

    def server_rule(self):
        """Plain SGD on the gradient of the loss summed over a batch."""
        return mx.optimizer.SGD(learning_rate=self.args.learning_rate, momentum=self.args.momentum)

    def aggregate(self, stop_vote):
        self.control[:] = float(stop_vote)
        self.kv.push(self.keys + [self.control_key], self.pushed)
        self.kv.pull(self.keys + [self.control_key], out=self.pulled)
        return stop_vote or self.stop_requested()


class DCASGD(Async):
    """DC-ASGD (Zheng et al., "Asynchronous SGD with Delay Compensation"), MXNet's implementation.

    MXNet's DCASGD keeps one backup weight per key, not one per worker as the paper does: the server never
    learns which worker pushed.
    """
    name = "dcasgd"

    def server_rule(self):
        return mx.optimizer.DCASGD(learning_rate=self.args.learning_rate, momentum=self.args.momentum, lamda=0.04)
