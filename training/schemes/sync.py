"""Synchronous SGD (SSGD) over dist_sync: push gradients, pull their sum, apply lr x the workers' mean."""
from training.schemes.base import Scheme


class Sync(Scheme):
    name = "sync"
    kvstore = "dist_sync"

    def setup(self):
        self.broadcast_initial_weights()
        self.trainer = self.local_trainer(self.args.learning_rate)
        trainable = [p.list_grad() for p in self.model.trainable]
        aux = [p.list_data() for p in self.model.aux]
        # In place: the pulled sums overwrite the gradients and statistics that were pushed.
        self.buffers = trainable + aux + [self.control]

    def aggregate(self, stop_vote):
        self.control[:] = float(stop_vote)
        self.kv.pushpull(self.keys + [self.control_key], self.buffers, out=self.buffers)
        self.average_aux(self.num_workers * len(self.model.ctxs))
        self.trainer.update(self.num_workers)
        return stop_vote or self.stop_requested()
