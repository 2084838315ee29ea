"""Synchronous SGD (SSGD) over dist_sync: push gradients, pull their sum, apply lr x the workers' mean.

The servers only sum (no update rule on them): pushpull returns the round's sum, and each worker applies the
same update to the same weights, so all workers stay identical. With an MPI collective (--collective) an
allreduce among the workers hands everyone the same sum instead.
"""
from training.schemes.base import Scheme


class Sync(Scheme):
    name = "sync"
    description = "SSGD, one step per round: push gradients, pull their sum, apply lr x mean (dist_sync)"
    kvstore = "dist_sync"

    def setup(self):
        self.broadcast_initial_weights()
        self.trainer = self.local_trainer(self.options.learning_rate)
        # In place: the pulled sums overwrite the gradients and statistics that were pushed.
        self.buffers = self.exchanged(p.list_grad() for p in self.model.trainable)

    def aggregate(self, stop_vote):
        self.corrupt(p.list_grad() for p in self.model.trainable)
        self.control[:] = float(stop_vote)
        self.stats.gather()
        self.transport.sum(self.keys, self.buffers)
        self.stats.scatter(1.0 / self.num_workers)
        self.trainer.update(self.num_workers)
        return stop_vote or self.stop_requested()
