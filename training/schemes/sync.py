"""Synchronous SGD (SSGD) over dist_sync: push gradients, pull their sum, apply lr x the workers' mean.

By default the servers only sum (no update rule on them): pushpull returns the round's sum, and each worker
applies the same update to the same weights, so all workers stay identical. With an MPI collective (--collective)
an allreduce among the workers hands everyone the same sum instead. With --update-on-servers the servers apply the
update once, to the sum, and the workers pull the new weights, as gluon.Trainer does by default (update_on_kvstore).

Over the parameter server the whole round is queued in MXNet's engine as soon as the backward pass is, as Gluon's
Trainer does it: each gradient's pushpull, the update of its weight from the sum, the BatchNorm statistics and the
stop vote. Each gradient travels once it is written, the last layers' while the first ones are computed, and its
sum is pulled into it. The aggregation waits for the sums, within the watchdog's bound: the next step's backward
pass, which writes the gradients again, then waits for nobody. A Byzantine worker corrupts its gradients after the
step, so it pushes them then, as over MPI.

Plain SGD (no momentum, weight decay or clipping) on the workers folds its step into the backward pass, over either
transport: -lr / workers is the loss's head gradient, so each gradient is already the worker's share of the step,
their sum is the step, and each weight adds it in place. resnet18-v1's 11 M values, one OpenMP thread: 3.5 ms an
update against 15 ms by MXNet's sgd_update, which each worker runs where the Trainer's servers run it once
(docs/benchmarks.md).
"""

from training import mxnet_internals
from training.lazy import mx
from training.options import ModeError, Options, declaration, option
from training.schemes.base import Scheme, wait_for
from training.transport import collectives


@declaration
class SyncOptions(Options):
    update_on_servers: bool = option(
        "--update-on-servers", switch=True, default=False,
        help="the servers apply SGD to the summed gradients and the workers pull the weights (gluon.Trainer's "
             "default), in place of every worker applying it; over the parameter server only. A restart starts "
             "the servers' momentum from zero")

    @classmethod
    def check(cls, args, num_workers):
        if args.update_on_servers and args.collective != collectives.PS:
            raise ModeError(f"--update-on-servers needs the parameter server's servers: leave out --collective "
                            f"{args.collective}")


class Sync(Scheme):
    name = "sync"
    description = "SSGD, one step per round: push gradients, pull their sum, apply lr x mean (dist_sync)"
    kvstore = "dist_sync"
    Options = SyncOptions
    queues_round = True  # False where the update's scale is known only once the round's sums are in
    sums_are_steps = False  # plain SGD on the workers: the summed gradients are the step itself

    @classmethod
    def virtual_refusal(cls, args):
        if getattr(args, "update_on_servers", False):
            return "sync --update-on-servers needs the kvstore's servers"
        return super().virtual_refusal(args)

    def setup(self):
        self.broadcast_initial_weights()
        grads = [p.list_grad() for p in self.model.trainable]
        self.buffers = self.exchanged(grads)  # in place: the sums overwrite what was pushed
        if self.options.update_on_servers:
            self.hand_servers_the_update()
        else:
            self.trainer = self.local_trainer(self.options.learning_rate)
            self.awaited = self.buffers
            self.sums_are_steps = self.queues_round and not self.attack and mxnet_internals.plain_sgd(self.trainer)
            if self.sums_are_steps:
                self.model.scale_gradients(self.step_scale())
        if not (self.queues_round and self.transport.sums_in_engine) or self.attack:
            return
        if self.options.update_on_servers:
            self.during_backward = self.exchange_with_servers
        else:
            if not self.sums_are_steps:
                self.update_groups = mxnet_internals.update_groups(self.model.trainable)
            self.during_backward = self.queue_round

    def hand_servers_the_update(self):
        """SGD on the servers, on the mean of the workers' gradients; the weights come back in place of the sums."""
        from training.schemes.servers.server_optimizer import ServerOptimizer

        rule = mx.optimizer.SGD(learning_rate=self.options.learning_rate, momentum=self.options.momentum,
                                wd=self.options.wd, rescale_grad=1.0 / self.num_workers,
                                lr_scheduler=self.server_scheduler())
        if self.rank == 0:
            self.kv.set_optimizer(ServerOptimizer(inner=rule, stats_key=self.stats_key, control_key=self.control_key,
                                                  num_workers=self.num_workers, summed=True))
        self.transport.barrier()  # no worker pushes before every server holds the rule
        self.awaited = self.exchanged(p.list_data() for p in self.model.trainable)

    def step_scale(self):
        """Each worker's gradient times this is its share of plain SGD's step: -lr x the workers' mean."""
        return -self.trainer.learning_rate / self.num_workers

    def scale_learning_rates(self, factor):
        super().scale_learning_rates(factor)
        if self.sums_are_steps:
            self.model.scale_gradients(self.step_scale())

    def queue_round(self, stop_vote):
        """The round's sums and the update from them, queued while the gradients are still being written."""
        self.sum_round(stop_vote)
        if self.sums_are_steps:
            self.add_steps()
            return
        trainable = self.model.trainable
        for group in self.update_groups:
            mxnet_internals.queue_update(self.trainer, group, [trainable[i].list_grad() for i in group],
                                         [trainable[i].list_data() for i in group], self.num_workers)

    def add_steps(self):
        """Plain SGD's update: each weight adds the round's summed step, in place."""
        for p in self.model.trainable:
            for weight, step in zip(p.list_data(), p.list_grad()):
                weight += step

    def sum_round(self, stop_vote):
        """The gradients, the BatchNorm statistics and the stop vote summed over the workers, in place."""
        self.control[:] = float(stop_vote)
        self.stats.gather()
        self.transport.sum(self.keys, self.buffers)

    def exchange_with_servers(self, stop_vote):
        """The round's gradients, statistics and vote to the servers; the weights they updated and the sums back."""
        self.apply_on_servers(stop_vote, self.buffers, self.awaited)

    def aggregate(self, stop_vote):
        if self.during_backward:  # its sums arrive here, within the watchdog's bound on the aggregation
            wait_for(self.awaited)
        else:
            self.corrupt(p.list_grad() for p in self.model.trainable)
            if self.options.update_on_servers:
                self.exchange_with_servers(stop_vote)
            else:
                self.sum_round(stop_vote)
                if self.sums_are_steps:
                    self.add_steps()
                else:
                    self.trainer.update(self.num_workers)
        self.stats.scatter(1.0 / self.num_workers)
        return stop_vote or self.stop_requested()
