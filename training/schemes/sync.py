"""Synchronous SGD (SSGD) over dist_sync: the servers apply lr x the mean of the workers' gradients."""
import mxnet as mx

from training.schemes.server_update import ServerUpdate


class Sync(ServerUpdate):
    name = "sync"
    kvstore = "dist_sync"
    merged_pushes = True

    def server_rule(self):
        return mx.optimizer.SGD(learning_rate=self.args.learning_rate, momentum=self.args.momentum,
                                rescale_grad=1.0 / self.num_workers)
