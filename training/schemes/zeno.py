"""Byzantine-tolerant synchronous training with trusted validators: the ZenoPS rule (Xie, Koyejo, Gupta).

The job's kvstore workers are N training workers and V >= 1 validators (the processes started with --validator).
Every round each training worker does --sync-interval local SGD steps (lr -ll) from the round's start weights W
and sends its delta u = W_local - W; each validator does the same steps on its validation data and sends its
delta v. The validation data are --validation-size samples held out from the training set (disjoint from every
worker's shard); with several validators each holds the same samples in an order of its own, as ZenoPS's
validators do. One pushpull all-gathers the deltas: parameter i travels in a (processes x shape_i) array in which
each process fills its own row, and the servers' sum hands every process all rows.

The rule, per layer: training worker j (0-based) is judged by validator j mod V, against that validator's v. With
a = mean(u.v), b = mean(v^2), c = mean(u^2), a delta is accepted when a > eta.b and c < (1 + rho).b. Each
validator's result is the mean of the deltas it accepted (zero when it accepted none), and the layer moves by
global_lr x the mean of the V results. This is how ZenoPS combines several validators: each takes a share of the
workers' updates, and its servers average what the validators send (a validator that accepts nothing still
counts in the 1/V); validators never vote on the same update. ZenoPS hands each update to whichever validator asks
first; here the split is fixed (j mod V), so every process can apply the rule to the same numbers and all hold the
same weights. With one validator the rule is ZenoPS's single-validator one.

Trust assumptions: the validators, their data, the servers and the scheduler are honest. A Byzantine worker may
send any values as its own delta but does not write another process's row: ZenoPS relies on the transport to
attribute each message to its sender; ps-lite does not authenticate senders, so here it is an assumption of the
emulation. BatchNorm statistics are the validators' mean.
"""
from typing import Optional

from data import partition
from training import argtypes
from training.attacks import attack_for
from training.faults.failures import JobSetupError
from training.lazy import mx, np
from training.options import (
    ModeError,
    Options,
    check_constant_lr,
    check_one_server,
    declaration,
    global_lr,
    local_lr,
    option,
    sync_interval,
    validation_size,
)
from training.schemes.base import FixedLocalSteps, Scheme


def split_validation(num_samples, validation_size, seed):
    """(validation indices, the rest): a seeded draw, so every process computes the same split."""
    order = np.random.RandomState(seed + 7919).permutation(num_samples)
    return np.sort(order[:validation_size]), np.sort(order[validation_size:])


@declaration
class ZenoOptions(Options):
    validator: bool = option(
        "--validator", switch=True,
        help="this worker is a trusted validator (one or more per job; each trains on the same --validation-size "
             "held-out samples and scores the updates of its share of the workers)")
    validation_size: int = validation_size()
    rho: Optional[float] = option(
        "--rho", type=argtypes.NON_NEGATIVE_FLOAT,
        help="zeno: reject a layer's delta u unless mean(u^2) < (1 + rho) mean(v^2) (default 0.6); zeno-async: "
             "reject g unless lr <g', v> - rho |v|^2 + lr epsilon >= 0 (default 0.02 x -l)")

    @classmethod
    def check(cls, args, num_workers):
        if num_workers < 2:
            raise ModeError(f"-m {args.mode} needs DMLC_NUM_WORKER >= 2: the training workers and the --validator "
                            "processes")
        if args.validation_size < args.batch_size:
            raise ModeError(f"--validation-size {args.validation_size} is smaller than the batch size "
                            f"{args.batch_size}")


@declaration
class ZenoSyncOptions(ZenoOptions):
    local_lr: float = local_lr()
    global_lr: float = global_lr()
    sync_interval: int = sync_interval()
    eta: float = option("--eta", default=-0.001, type=float,
                        help="reject a layer's delta unless mean(u.v) > eta mean(v^2)")

    @classmethod
    def resolve(cls, args):
        if args.rho is None:
            args.rho = 0.6


@declaration
class ZenoAsyncOptions(ZenoOptions):
    epsilon: Optional[float] = option("--epsilon", type=argtypes.NON_NEGATIVE_FLOAT,
                                      help="the rule's tolerance epsilon (default 0)")

    @classmethod
    def resolve(cls, args):
        if args.rho is None:
            args.rho = 0.02 * args.learning_rate

    @classmethod
    def check(cls, args, num_workers):
        super().check(args, num_workers)
        check_one_server(args)
        check_constant_lr(args)


def zeno_weights(gram, size, judged_by, eta, rho):
    """The rule for one layer from the Gram matrix of its deltas (gram[i, j]: the inner product of rank i's and rank
    j's deltas, `size` entries each); judged_by: [(validator rank, boolean vector of the ranks it judges)]. Returns
    (each rank's weight in the layer's step, the boolean vector of the ranks accepted)."""
    c = np.diag(gram) / size
    weights, accepted = np.zeros(len(gram)), np.zeros(len(gram), bool)
    for validator, members in judged_by:
        b = gram[validator, validator] / size
        accept = (gram[:, validator] / size > eta * b) & (c < (1 + rho) * b) & members
        weights += accept / max(accept.sum(), 1)
        accepted |= accept
    return weights / len(judged_by), accepted


def zeno_steps(flats, judged_by, eta, rho):
    """The rule for every layer. flats: per layer the (processes x size) deltas. Returns (per layer the (1 x size) mean
    over validators of the mean of each one's accepted deltas, the (layers x processes) boolean array of the ranks
    accepted). The rule reads the deltas only through their inner products: each layer's Gram matrix reaches the
    host, all layers in one copy, and the steps are one product a layer. With five processes on one thread, a round
    costs lenet 2.7-3.2 ms of CPU against 22-29 ms with the rule in MXNet's element-wise operations, resnet18-v1
    0.13-0.15 s against 1.7-1.8 s."""
    grams = mx.nd.stack(*(mx.nd.dot(flat, flat, transpose_b=True) for flat in flats)).asnumpy().astype(np.float64)
    rules = [zeno_weights(gram, flat.shape[1], judged_by, eta, rho) for gram, flat in zip(grams, flats)]
    weights = mx.nd.array(np.stack([w for w, _ in rules]), ctx=flats[0].context)
    steps = [mx.nd.dot(weights[layer:layer + 1], flat) for layer, flat in enumerate(flats)]
    return steps, np.stack([accepted for _, accepted in rules])


class WithValidator(Scheme):
    """Roles shared by zeno and zeno-async: the validators check updates, the others train on what the validation
    set left."""
    validator_ranks = ()
    validator = True

    @property
    def is_validator(self):
        return self.rank in self.validator_ranks

    @property
    def training_ranks(self):
        return [r for r in range(self.num_workers) if r not in self.validator_ranks]

    @property
    def worker_index(self):
        """0-based among the training workers; None for a validator."""
        return None if self.is_validator else self.index

    @property
    def index(self):
        """Training workers first, validators after them (--worker-index; where it is not given, by rank among
        their kind)."""
        if self.options.worker_index is not None:
            return self.options.worker_index
        if self.is_validator:
            return self.training_workers + self.validator_ranks.index(self.rank)
        return self.training_ranks.index(self.rank)

    @property
    def training_workers(self):
        return self.num_workers - len(self.validator_ranks)

    @property
    def role(self):
        return "validator" if self.is_validator else "worker"

    @property
    def evaluates(self):
        return self.worker_index == 0

    def training_share(self, labels):
        validation, rest = split_validation(len(labels), self.options.validation_size, self.options.seed)
        if self.is_validator:
            return validation
        return rest[partition(labels[rest], self.index, self.training_workers,
                              bool(self.options.split_by_class), self.options.seed)]

    def set_roles(self, roles):
        """`roles`: per rank, whether that process was started with --validator."""
        validators = [rank for rank, is_validator in enumerate(roles) if is_validator]
        if not validators or len(validators) == self.num_workers:
            raise JobSetupError(f"-m {self.name} needs one or more processes started with --validator and at least "
                                f"one training worker among the {self.num_workers} workers of the job; found "
                                f"{len(validators)} validators")
        self.validator_ranks = validators
        self.attack = None if self.is_validator else attack_for(self.options, self.worker_index)  # by training index
        from training.schemes.servers.zeno_server import judges  # the server's rule too; it imports MXNet

        self.judge_of = judges(self.training_ranks, validators)


class ZenoSync(FixedLocalSteps, WithValidator):
    name = "zeno"
    description = "ZenoPS, local-step deltas scored per layer against a trusted validator's (dist_sync)"
    Options = ZenoSyncOptions
    kvstore = "dist_sync"

    def setup(self):
        self.broadcast_initial_weights()
        self.set_roles(self._roles())
        self.local_trainer(self.options.local_lr)
        ctx0 = self.model.ctxs[0]
        self.start = [[d.copy() for d in p.list_data()] for p in self.model.trainable]
        self.rows = [mx.nd.zeros((self.num_workers,) + p.shape, ctx=ctx0) for p in self.model.trainable]
        row_keys = [self.control_key + 2 + i for i in range(len(self.rows))]
        self.transport.declare(row_keys, self.rows)
        self.round_keys = row_keys + self.keys[len(self.model.trainable):]
        self.buffers = self.rows + ([self.stats.buffer] if self.stats else []) + [self.control]
        self.judged_by = [(v, np.array([self.judge_of.get(r) == v for r in range(self.num_workers)]))
                          for v in self.validator_ranks]
        self.accepted = None

    def _roles(self):
        """Per rank, whether it was started with --validator: each process marks its row of a shared vector."""
        key = self.control_key + 1
        roles = mx.nd.zeros((self.num_workers,))
        self.transport.declare([key], [roles])
        roles[self.rank] = float(bool(self.options.validator))
        self.transport.sum([key], [roles])
        return roles.asnumpy() > 0

    def aggregate(self, stop_vote):
        ctx0 = self.model.ctxs[0]
        for row in self.rows:
            row[:] = 0
        mine = [row[self.rank] for row in self.rows]
        for p, delta, start in zip(self.model.trainable, mine, self.start):
            delta[:] = p.data(ctx0) - start[0]
        self.corrupt(mine)
        if self.is_validator:
            self.stats.gather()
        elif self.stats:
            self.stats.buffer[:] = 0
        self.control[:] = float(stop_vote)
        self.transport.sum(self.round_keys, self.buffers)
        self.accepted = self._apply_accepted_deltas()
        self.stats.scatter(1.0 / len(self.validator_ranks))
        return stop_vote or self.stop_requested()

    def _apply_accepted_deltas(self):
        """Move each layer by the rule's step; return accepted[layer, rank] (validators: False)."""
        options = self.options
        steps, accepted = zeno_steps([row.reshape((self.num_workers, -1)) for row in self.rows], self.judged_by,
                                     options.eta, options.rho)
        for step, starts in zip(steps, self.start):
            for start in starts:
                start += options.global_lr * self.lr_factor * step.reshape(start.shape).as_in_context(start.context)
        for p, starts in zip(self.model.trainable, self.start):
            for data, start in zip(p.list_data(), starts):
                start.copyto(data)
        return accepted

    def round_record(self):
        if self.accepted is None:
            return {}
        per_rank = self.accepted.sum(axis=0)
        layers = self.accepted.shape[0]
        if self.is_validator:
            judged = [r for r in self.training_ranks if self.judge_of[r] == self.rank]
            return {"zeno_layers": layers, "zeno_judged_ranks": judged,
                    "zeno_accepted_layers_by_worker": [int(per_rank[r]) for r in judged]}
        return {"zeno_layers": layers, "zeno_accepted_layers": int(per_rank[self.rank]),
                "zeno_validator_rank": self.judge_of[self.rank]}


class ZenoAsync(WithValidator):
    """Zeno++ (Xie, Koyejo, Gupta): asynchronous SGD whose servers validate each gradient before applying it.

    Every worker pushes its gradient to its own key range and pulls the global model back from it, one step per
    round; each validator pushes the gradient of one fresh batch of its validation data at the latest model, as
    often as it can. The rule runs on the server (training/schemes/servers/zeno_server.py), which needs the whole model: one
    server only. With several validators, training worker j's gradients are judged against validator j mod V's
    latest v alone (as in ZenoPS, where each update goes to one validator and the accepted ones are added to the
    model; no combination across validators). Trust: the validators, their data and the server are honest; a
    Byzantine worker pushes anything into its own range. BatchNorm statistics stay local to each worker.
    """
    name = "zeno-async"
    description = ("Zeno++, the one server scores each gradient against the validator's before applying it "
                   "(dist_async)")
    Options = ZenoAsyncOptions
    kvstore = "dist_async"

    def setup(self):
        from training.schemes.servers.zeno_server import ZenoLayout, ZenoPlusPlus

        self.layout = layout = ZenoLayout(self.num_workers, len(self.model.trainable))
        ctx0 = self.model.ctxs[0]
        weights = [p.data(ctx0).copy() for p in self.model.trainable]
        small = [mx.nd.zeros((1,)) for _ in range(self.num_workers)] + \
                [mx.nd.zeros((3,)) for _ in range(self.num_workers)] + [self.control]
        rule = ZenoPlusPlus(layout, self.options.learning_rate, self.options.rho, self.options.epsilon or 0.0)
        self.start_server_rule(list(range(layout.control_key + 1)), weights * self.num_workers + small, rule)
        self.set_roles(self._roles())
        self.model_keys = layout.model_keys(self.rank)
        self.verdict_key = layout.verdict_base + self.rank
        self.verdict = mx.nd.zeros((3,))
        self.counted = (0, 0, 0)
        self.judged = (0, 0, 0)
        self.kv.pull(self.model_keys, out=[p.list_data() for p in self.model.trainable])
        self.first_round = True

    def _roles(self):
        """Per rank, whether it was started with --validator: each process pushes that to its own key, then all
        read every key."""
        layout = self.layout
        self.kv.push(layout.role_base + self.rank, mx.nd.array([float(bool(self.options.validator))]))
        mx.nd.waitall()  # a push is an engine operation: the barrier alone does not wait for it
        self.transport.barrier()
        roles = [mx.nd.zeros((1,)) for _ in range(self.num_workers)]
        self.kv.pull(list(range(layout.role_base, layout.verdict_base)), out=roles)
        return [role.asscalar() > 0 for role in roles]

    def aggregate(self, stop_vote):
        self.model.reduce_gradients()
        self.corrupt(p.list_grad() for p in self.model.trainable)
        # The validator keeps validating until the workers stop; its own step count means nothing to them.
        stop_vote = stop_vote and not self.is_validator
        self.control[:] = float(stop_vote)
        grads = [p.list_grad()[0] for p in self.model.trainable]
        if self.first_round and not self.is_validator:
            self.transport.barrier()  # the validators' first gradients are on the server before any worker's
        self.kv.push(self.model_keys + [self.verdict_key, self.layout.control_key],
                     grads + [self.verdict, self.control])
        if self.first_round and self.is_validator:
            mx.nd.waitall()
            self.transport.barrier()
        self.first_round = False
        self.kv.pull(self.model_keys + [self.verdict_key, self.layout.control_key],
                     out=[p.list_data() for p in self.model.trainable] + [self.verdict, self.control])
        if not self.is_validator:
            previous, self.counted = self.counted, tuple(int(x) for x in self.verdict.asnumpy())
            self.judged = tuple(now - before for now, before in zip(self.counted, previous))
        return stop_vote or self.stop_requested()

    def round_record(self):
        if self.is_validator:
            return {}
        accepted, rejected, unjudged = self.judged
        return {"zeno_accepted_updates": accepted, "zeno_judged_updates": accepted + rejected,
                "zeno_unjudged_updates": unjudged, "zeno_validator_rank": self.judge_of[self.rank]}
