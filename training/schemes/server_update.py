"""Schemes in which workers push gradients and the servers update the weights (SSGD, ASGD, DC-ASGD).

A round is one local step: push the gradient (device copies summed) and the BatchNorm statistics, let the
servers apply their rule (training/server_optimizer.py), pull the new weights and statistics.
"""
from training.schemes.base import Scheme


class ServerUpdate(Scheme):
    merged_pushes = None  # dist_sync merges a round's pushes before the rule sees them; dist_async does not

    def server_rule(self):
        raise NotImplementedError

    def setup(self):
        self.broadcast_initial_weights()
        self.install_server_rule(self.server_rule(), self.merged_pushes)
        self.pushed = self.exchanged(p.list_grad() for p in self.model.trainable)
        self.pulled = self.exchanged(p.list_data() for p in self.model.trainable)

    def aggregate(self, stop_vote):
        self.control[:] = float(stop_vote)
        self.stats.gather()
        self.kv.push(self.keys, self.pushed)
        self.kv.pull(self.keys, out=self.pulled)
        self.stats.scatter()
        return stop_vote or self.stop_requested()
