"""The learning-rate schedule: a factor of every learning rate of a job, as a function of the epoch.

step:     factor^k after the k-th of --lr-steps (epochs) has passed (He et al.'s 0.1 at two epochs)
cosine:   (1 + cos(pi e / E)) / 2 over E = --epochs, then 0 (Loshchilov & Hutter without restarts)
constant: 1

Every scheme applies the same function. Where the workers update the weights (sync, esync, local, nbsync, zeno,
fedavg, fedasync, downpour's local steps), the epoch is the worker's passes over its share, and the factor scales
its local learning rate and, where the scheme has one, its global learning rate, once per round. Where MXNet's
optimizer updates them on the servers (async, dcasgd, downpour's server), the server's updates so far over the
updates that make one pass over the training set (training/schemes/servers/server_optimizer.py's ServerSchedule).
"""
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    kind: str = "constant"
    steps: tuple = ()        # epochs at which "step" multiplies by `factor`
    factor: float = 0.1
    epochs: float = None     # "cosine": the epochs over which it decays to 0

    @classmethod
    def from_args(cls, args):
        return cls(args.lr_schedule, tuple(args.lr_steps), args.lr_factor, args.epochs)

    @property
    def constant(self):
        return self.kind == "constant"

    def factor_at(self, epoch):
        if self.kind == "step":
            return self.factor ** sum(epoch >= step for step in self.steps)
        if self.kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(epoch, self.epochs) / self.epochs))
        return 1.0

    def server_scheduler(self, base_lr, updates_per_epoch):
        """MXNet's hook for an optimizer on the servers (its `lr_scheduler`); None when constant."""
        from training.schemes.servers.server_optimizer import ServerSchedule

        return None if self.constant else ServerSchedule(self, base_lr, updates_per_epoch)
