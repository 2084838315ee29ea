"""What a synchronization scheme plugs into the training loop (training/loop.py).

A round is: local steps until round_done() says stop, then aggregate(). Sync and async do one step per round;
ESync does as many as fit while the slowest worker finishes one. Every scheme shares the kvstore key layout:
one key per trainable parameter, one key for all BatchNorm running statistics packed into one flat array (one
message per round instead of one per layer), and a control key whose value tells every worker of the round that
someone wants to stop. A scheme exchanges arrays through its transport (training/transport/collectives.py): the synchronous
ones only declare, broadcast and sum, so they run over the ps-lite servers or MPI alike; the asynchronous ones
also use the kvstore itself (`self.kv`), which only the parameter server has.
"""
import itertools
import logging
import pickle

from data import partition
from training import mxnet_internals, runlog
from training.attacks import attack_for, flatten_arrays
from training.clocks import REAL as REAL_CLOCK
from training.lazy import mx
from training.options import Options, local_update_rule
from training.schedule import Schedule
from training.transport.collectives import copies_of

log = logging.getLogger("scheme")


class PackedStatistics:
    """The BatchNorm running statistics of a model in one flat array on the first device.

    Packed by one concatenation and unpacked by one split, through flat views of the first device's statistics made
    once (the statistics are only ever written in place). resnet18-v1's 40 arrays, one OpenMP thread: a gather and a
    scatter 0.16 ms against 1.46 ms with a copy per array; SSGD's samples/s moved within their spread."""

    def __init__(self, model):
        self.params = model.aux
        sizes = [int(p.data().size) for p in self.params]
        self.buffer = mx.nd.zeros((sum(sizes),), ctx=model.ctxs[0]) if self.params else None
        self.flat = [p.data(model.ctxs[0]).reshape((-1,)) for p in self.params]
        self.offsets = [0, *itertools.accumulate(sizes)][:len(sizes)]
        # (first device's copy, the other devices' copies) of each statistic, where the model has several devices
        self.copies = [(p.list_data()[0], p.list_data()[1:]) for p in self.params] if len(model.ctxs) > 1 else []

    def __bool__(self):
        return bool(self.params)

    def gather(self):
        """Copy the first device's statistics into the buffer."""
        if self.params:
            mx.nd.concat(*self.flat, dim=0, out=self.buffer)

    def scatter(self, scale=1.0, source=None):
        """Copy scale x the buffer (or x `source`, an array of the buffer's size) into every device's statistics."""
        if not self.params:
            return
        source = self.buffer if source is None else source
        if scale != 1.0:
            source *= scale
        mxnet_internals.split_into(mx, source, self.flat, self.offsets)
        for first, others in self.copies:
            for data in others:
                first.copyto(data)


class Scheme:
    name = None
    description = None                # one line for -m's help
    Options = Options                 # what it reads from the command line (training/options.py)
    kvstore = None                    # kvstore type this scheme trains over; None: no cluster (one process)
    clock = REAL_CLOCK                # what the scheme reads its time from: the loop's (train() sets it)
    validator = False                 # one more worker, started with --validator, scores the others' updates
    aggregates = True                 # aggregate() ends each round (a cluster scheme)
    aggregation_phase = runlog.GLOBAL_AGGREGATE   # how the run log names the aggregation's time
    coordinated = False               # round_done() asks the state server (its time: runlog.CHECK_READY)
    virtual_clock = None              # why the scheme does not run on a virtual clock (training/clocks/), or None
    updates_locally = False           # local_step() updates the weights (its time: runlog.LOCAL_UPDATE)
    trainer = None                    # the local gluon.Trainer, where the workers update the weights
    update_rule = None                # its rule: options.local_update_rule
    lr_factor = 1.0                   # the learning-rate schedule's factor this round (training/schedule.py)
    train_samples = None              # the training set's size (the loop sets it before setup)
    share = None                      # (images, labels) of this worker's share (the loop sets it after setup)
    during_backward = None            # f(stop_vote), run once a step's backward pass is queued (a step per round)

    @classmethod
    def virtual_refusal(cls, args):
        """Why a worker of these arguments does not run on a virtual clock, or None."""
        return cls.virtual_clock

    def __init__(self, options, model, transport):
        self.options = options
        self.model = model
        self.transport = transport
        self.kv = transport.kv if transport else None
        self.rank = transport.rank if transport else 0
        self.num_workers = transport.num_workers if transport else 1
        self.stats = PackedStatistics(model)
        self.stats_key = len(model.trainable)
        self.control_key = self.stats_key + 1
        self.keys = list(range(self.stats_key)) + ([self.stats_key] if self.stats else []) + [self.control_key]
        self.control = mx.nd.zeros((1,))
        self.attack = attack_for(options, self.index) if transport else None
        self.schedule = Schedule.from_args(options)

    @property
    def training_workers(self):
        """Workers that train (every kvstore worker, unless the scheme has other roles)."""
        return self.num_workers

    @property
    def role(self):
        return "worker"

    @property
    def evaluates(self):
        """Whether this process hands the global model to be evaluated (snapshots, or -e): worker 0."""
        return self.index == 0

    @property
    def index(self):
        """This device's position in the job (--worker-index; the rank where it is not given): which share of the
        training data it holds, the seed of the order it reads the share in, its log folder."""
        given = self.options.worker_index
        return self.rank if given is None else given

    def training_share(self, labels):
        """Indices of the training samples this process trains on."""
        return partition(labels, self.index, self.num_workers, bool(self.options.split_by_class), self.options.seed)

    def round_record(self):
        """Extra fields for this round's iteration log."""
        return {}

    def corrupt(self, arrays):
        """A Byzantine worker (--byzantine) corrupts what it is about to push; others leave it alone."""
        if self.attack:
            self.attack.corrupt(flatten_arrays(arrays))

    @property
    def step_batch_size(self):
        """Samples in one local step."""
        return self.options.batch_size

    def setup(self):
        """Bring every worker to the same starting weights."""

    def begin_round(self, completed):
        """Called before the first local step of a round; `completed` rounds came before it."""

    def sits_out(self):
        """Whether this worker takes no local step this round and only joins its aggregation (asked after
        begin_round)."""
        return False

    def local_step(self):
        """Called after each step's backward pass; may update the weights locally."""

    def round_done(self, steps, step_seconds):
        return True

    def abandons_step(self):
        """Asked by a coordinated scheme's loop once a step's gradient is computed, before it is applied: whether
        to drop that step and end the round with the steps before it."""
        return False

    def aggregate(self, stop_vote):
        """End the round; return True when any worker voted to stop (all workers then stop together)."""
        return stop_vote

    def settle(self):
        """Wait until the aggregation's work on the weights is done (it is timed as the aggregation)."""
        mx.nd.waitall()

    def global_arrays(self):
        """The arrays that every worker of a synchronous scheme holds identically after an aggregation (what
        --digest-weights fingerprints): the model's parameters on the first device."""
        return [p.data(self.model.ctxs[0]) for p in self.model.params]

    def finish(self):
        """Release what setup() acquired."""

    # Helpers shared by the cluster schemes.

    def exchanged(self, weights):
        """The kvstore values in key order: `weights` (one entry per trainable parameter), statistics, control."""
        return list(weights) + ([self.stats.buffer] if self.stats else []) + [self.control]

    def broadcast_initial_weights(self):
        """Rank 0's weights become everyone's; this ends after every worker has started it."""
        ctx0 = self.model.ctxs[0]
        self.stats.gather()
        # A plain copy: weights in MKLDNN layout after a forward pass make the server reject the init.
        self.transport.declare(self.keys, self.exchanged(p.data(ctx0).copy() for p in self.model.trainable))
        self.transport.broadcast(self.keys[:-1], self.exchanged(p.list_data() for p in self.model.trainable)[:-1])
        self.stats.scatter()

    def local_trainer(self, learning_rate, optimizer="sgd"):
        """Gluon's Trainer for the update step only (`optimizer`: one of options.LOCAL_OPTIMIZERS, or adagrad for
        downpour's replicas); gradient reduction stays with the scheme. Checkpoints save its state
        (local_optimizer_states)."""
        self.update_rule = local_update_rule(optimizer, self.options.momentum)
        self.base_lr = learning_rate
        params = {"learning_rate": learning_rate, "wd": self.options.wd}
        sgd = self.update_rule in ("sgd", "momentum")
        if sgd:
            params["momentum"] = self.options.momentum
        self.trainer = mx.gluon.Trainer(self.model.trainable, "sgd" if sgd else self.update_rule, params,
                                        kvstore=None)
        return self.trainer

    def scale_learning_rates(self, factor):
        """The schedule's factor for the coming round: the local optimizer's learning rate, and `lr_factor` for a
        scheme's global learning rate."""
        self.lr_factor = factor
        if self.trainer is not None:
            self.trainer.set_learning_rate(self.base_lr * factor)

    def server_scheduler(self, steps_per_update=1):
        """The schedule for MXNet's optimizer on the servers, each of whose updates applies `steps_per_update`
        local steps of one worker."""
        return self.schedule.server_scheduler(self.options.learning_rate,
                                              self.train_samples / (self.options.batch_size * steps_per_update))

    @property
    def has_local_optimizer(self):
        return self.trainer is not None

    def local_optimizer_states(self):
        """The local optimizer's state as bytes, without the optimizer itself: its rule, the first device's state of
        each weight (momentum; Adam's two moments) and how often each weight was updated (Adam's bias correction
        counts them). None when the weights are updated on the servers."""
        if not self.has_local_optimizer:
            return None
        updater = mxnet_internals.trainer_updaters(self.trainer)[0]
        return pickle.dumps({"rule": self.update_rule, "states": updater.get_states(dump_optimizer=False),
                             "update_counts": dict(mxnet_internals.update_counts(self.trainer, self.model.ctxs[0]))})

    def load_local_optimizer_states(self, saved):
        """Restore what local_optimizer_states() returned; this run's learning rate, momentum and weight decay stay.
        The state of another rule (the optimizer or the momentum changed since) is left out: this optimizer starts
        afresh."""
        saved = _saved_optimizer_state(saved)
        if saved["rule"] != self.update_rule:
            log.warning("the checkpoint holds the state of a %s optimizer, this run's is %s: its local optimizer "
                        "starts afresh", saved["rule"], self.update_rule)
            return
        for updater in mxnet_internals.trainer_updaters(self.trainer):
            updater.set_states(saved["states"])
        for ctx in self.model.ctxs:
            counts = mxnet_internals.update_counts(self.trainer, ctx)
            counts.clear()
            counts.update(saved["update_counts"])

    def start_server_rule(self, keys, values, rule):
        """Initialise `keys` on the servers with `values`, have rank 0 hand them the update rule, and wait until it
        has: no worker may push before the servers hold the rule."""
        self.kv.init(keys, values)
        if self.rank == 0:
            self.kv.set_optimizer(rule)
        self.transport.barrier()

    def apply_on_servers(self, stop_vote, pushed, pulled):
        """The gradients, the BatchNorm statistics and the stop vote pushed to the servers, which apply their rule,
        and what they then hold written into `pulled`, queued in MXNet's engine. One pushpull: ps-lite carries each
        key's push and pull in one request, answered once the rule has run, where a push followed by a pull takes two
        (docs/benchmarks.md: lenet's SSGD --update-on-servers and ASGD train 1.11x and 1.08x the samples/s)."""
        self.control[:] = float(stop_vote)
        self.stats.gather()
        self.kv.pushpull(self.keys, pushed, out=pulled)

    def stop_requested(self):
        return self.control[0].asscalar() > 0


class LocallyUpdating(Scheme):
    """A scheme whose workers apply each step's gradient themselves, with the local optimizer (local_trainer)."""
    updates_locally = True

    def local_step(self):
        self.model.reduce_gradients()
        self.trainer.update(1)

    def add_proximal_gradient(self, rho, anchors):
        """The gradient of the proximal term (rho / 2) |x - anchor|^2 of the mean loss, added to each weight's
        gradient: rho (x - anchor) times the batch size, since the loss here is summed over the batch. `anchors`:
        per trainable parameter, its copies on the worker's devices."""
        scale = rho * self.step_batch_size
        for p, anchor in zip(self.model.trainable, anchors):
            for grad, weight, start in zip(p.list_grad(), p.list_data(), anchor):
                grad += scale * (weight - start)


class FixedLocalSteps(LocallyUpdating):
    """A round of --sync-interval local steps (the scheme's options carry `sync_interval`)."""

    def round_done(self, steps, step_seconds):
        return steps >= self.options.sync_interval


def wait_for(entries):
    """Return once every array of `entries` (each an array or the list of its device copies) is written."""
    for entry in entries:
        for array in copies_of(entry):
            array.wait_to_read()


def _saved_optimizer_state(data):
    """What local_optimizer_states() wrote; a checkpoint from before it recorded the rule holds an SGD updater's
    states alone (None per weight without momentum)."""
    saved = pickle.loads(data)
    if isinstance(saved, dict) and "rule" in saved:
        return saved
    rule = "momentum" if any(state is not None for state in saved.values()) else "sgd"
    return {"rule": rule, "states": data, "update_counts": {}}
