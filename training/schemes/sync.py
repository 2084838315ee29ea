"""Synchronous SGD (SSGD) over dist_sync: push gradients, pull their sum, apply lr x the workers' mean.

The servers only sum (no update rule on them): pushpull returns the round's sum, and each worker applies the
same update to the same weights, so all workers stay identical. With an MPI collective (--collective) an
allreduce among the workers hands everyone the same sum instead.

Over the parameter server the whole round is queued in MXNet's engine as soon as the backward pass is, as Gluon's
Trainer does it: each gradient's pushpull, the update of its weight from the sum, the BatchNorm statistics and the
stop vote. Each gradient travels once it is written, the last layers' while the first ones are computed, and its
sum is pulled into it. The aggregation waits for the sums, within the watchdog's bound: the next step's backward
pass, which writes the gradients again, then waits for nobody. A Byzantine worker corrupts its gradients after the
step, so it pushes them then, as over MPI.
"""
from training import mxnet_internals
from training.lazy import mx
from training.schemes.base import Scheme, wait_for


class Sync(Scheme):
    name = "sync"
    description = "SSGD, one step per round: push gradients, pull their sum, apply lr x mean (dist_sync)"
    kvstore = "dist_sync"
    queues_round = True  # False where the update's scale is known only once the round's sums are in

    def setup(self):
        self.broadcast_initial_weights()
        self.trainer = self.local_trainer(self.options.learning_rate)
        grads = [p.list_grad() for p in self.model.trainable]
        self.buffers = self.exchanged(grads)  # in place: the sums overwrite what was pushed
        if self.queues_round and self.transport.sums_in_engine and not self.attack:
            self.update_groups = mxnet_internals.update_groups(self.model.trainable)
            self.during_backward = self.queue_round

    def queue_round(self, stop_vote):
        """The round's sums and the update from them, queued while the gradients are still being written."""
        self.sum_round(stop_vote)
        trainable = self.model.trainable
        for group in self.update_groups:
            mxnet_internals.queue_update(self.trainer, group, [trainable[i].list_grad() for i in group],
                                         [trainable[i].list_data() for i in group], self.num_workers)

    def sum_round(self, stop_vote):
        """The gradients, the BatchNorm statistics and the stop vote summed over the workers, in place."""
        self.control[:] = float(stop_vote)
        self.stats.gather()
        self.transport.sum(self.keys, self.buffers)

    def aggregate(self, stop_vote):
        if not self.during_backward:
            self.corrupt(p.list_grad() for p in self.model.trainable)
            self.sum_round(stop_vote)
            self.trainer.update(self.num_workers)
        else:  # its sums arrive here, within the watchdog's bound on the aggregation, not in the next step's wait
            wait_for(self.buffers)
        self.stats.scatter(1.0 / self.num_workers)
        return stop_vote or self.stop_requested()
