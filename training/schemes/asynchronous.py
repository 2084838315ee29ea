"""Asynchronous SGD (ASGD) and DC-ASGD over dist_async: the servers update the weights on every push."""
import mxnet as mx

from training.schemes.server_update import ServerUpdate


class Async(ServerUpdate):
    name = "async"
    kvstore = "dist_async"
    merged_pushes = False

    def server_rule(self):
        """Plain SGD on the gradient of the loss summed over a batch."""
        return mx.optimizer.SGD(learning_rate=self.args.learning_rate, momentum=self.args.momentum)


class DCASGD(Async):
    """DC-ASGD (Zheng et al., "Asynchronous SGD with Delay Compensation"), MXNet's implementation.

    MXNet's DCASGD keeps one backup weight per key, not one per worker as the paper does: the server never
    learns which worker pushed.
    """
    name = "dcasgd"

    def server_rule(self):
        return mx.optimizer.DCASGD(learning_rate=self.args.learning_rate, momentum=self.args.momentum, lamda=0.04)
