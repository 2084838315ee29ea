"""Every default of a training job, and the command line that overrides them.

The flags keep the names of the original ESync scripts (-l, -ll, -gl, -b, -dd, -g, -c, -n, -ld, -e, -m, -dcasgd,
-s, -ip, -port); the rest are what a reproduction needs on top (stop conditions, seed, dataset, emulated slowdown).
The resolved configuration is saved beside each worker's logs (meta.json).
"""
import argparse
import math
import socket

from training import collectives, modes
from training.attacks import ATTACKS

DATASETS = ("fashion-mnist", "mnist", "cifar10", "mnist-5k")
ESYNC_POLICIES = ("apply", "plan", "nonblocking", "adaptive")
ROUND_SIZING_FLAGS = ("aggregation_share", "max_slowest_steps")  # the adaptive policy's (SimpleStateServer's rule)
LOCAL_OPTIMIZERS = ("sgd", "momentum", "adam")  # the original ESync's choices for its local steps (-ll)
MOMENTUM_OPTIMIZER_DEFAULT = 0.9  # --momentum of --local-optimizer momentum when not given
STALENESS_FUNCTIONS = ("constant", "polynomial", "hinge")  # FedAsync's s(t - tau): training/fedasync_server.py
STALENESS_A_DEFAULTS = {"polynomial": 0.5, "hinge": 10.0}  # the FedAsync paper's experiments
DC_LAMBDA_DEFAULTS = {"constant": 0.04, "adaptive": 2.0}  # the DC-ASGD paper's lambda0 of DC-ASGD-c and DC-ASGD-a
SERVER_OPTIMIZERS = ("sgd", "adagrad")  # downpour's server: SGD as ASGD's, or Adagrad as Dean et al.'s
MODE_FLAGS = {  # the flags that belong to some modes only: {field: (its flag, the modes that read it)}
    "local_optimizer": ("--local-optimizer", ("esync", "fedavg", "fedasync", "tifl", "feddrop")),
    "overlap": ("--overlap", ("esync", "fedavg")),
    "aggregation_share": ("--aggregation-share", ("esync",)),
    "max_slowest_steps": ("--max-slowest-steps", ("esync",)),
    "proximal": ("--proximal", ("fedasync", "esync", "fedavg")),
    "server_momentum": ("--server-momentum", ("esync", "fedavg")),
    "normalised_averaging": ("--normalised-averaging", ("esync", "fedavg")),
    "scaffold": ("--scaffold", ("esync", "fedavg")),
    "dc_lambda": ("--dc-lambda", ("dcasgd", "dcasgd-paper")),
    "dc_adaptive": ("--dc-adaptive", ("dcasgd-paper",)),
    "server_optimizer": ("--server-optimizer", ("downpour",)),
    "backup_workers": ("--backup-workers", ("backup",)),
    "balance_threshold": ("--balance-threshold", ("lb-bsp",)),
    "tiers": ("--tiers", ("tifl",)),
    "drop_rate": ("--drop-rate", ("feddrop",)),
    "drop_workers": ("--drop-workers", ("feddrop",)),
    "tier_interval": ("--tier-interval", ("tifl",)),
    "tier_credits": ("--tier-credits", ("tifl",)),
}
SCHEDULES = ("constant", "step", "cosine")  # --lr-schedule: training/schedule.py
AUGMENTATIONS = ("none", "crop", "resized-crop")  # --augment: data.augmented
NBSYNC_PART_SIZE = 32  # NBSSGD's seed splits its batches of 256 into parts of 32; parts of 8 cost more than they save
EVALUATE_MODE = "evaluate"  # the evaluator process beside a job: evaluates its checkpoints (training/evaluator.py)

DEFAULTS = dict(
    learning_rate=0.001,    # of the loss summed over a batch, as the original scripts use it
    local_lr=0.001,         # ESync's local optimizer
    global_lr=1.0,          # ESync: weights = start + global_lr * mean of the workers' deltas
    momentum=None,          # SGD momentum: 0, or 0.9 with --local-optimizer momentum
    local_optimizer="sgd",  # ESync's local steps: sgd, momentum or adam
    wd=None,                # weight decay of the workers' optimizers (Gluon's wd: lr x wd x weight per step): 0,
                            # or the dataset's recipe
    batch_size=64,
    data_dir="data",
    dataset="fashion-mnist",
    network="resnet18-v1",
    mode="local",
    gpu=None,               # list of GPU ids, e.g. [0, 1]
    cpu=0,                  # -c True is 1, -c False is 0 (the original scripts' spelling)
    log_dir="logs",
    eval_duration=1,        # evaluate every N global iterations (0 turns evaluation off)
    eval_seconds=None,      # evaluate once this many seconds have passed since the last evaluation (instead of -e)
    use_dcasgd=0,           # -dcasgd 1: an alias of -m dcasgd
    split_by_class=0,       # 1: non-i.i.d. partition, each worker gets a contiguous block of classes
    state_server_ip="127.0.0.1",
    state_server_port=10010,
    esync_policy="adaptive",  # the paper's rule is "apply" (launch.py paper's default); docs/modes.md: "Keeping every device busy"
    epsilon=None,           # seconds; None lets the state server fit the margin to the measured step times
    aggregation_share=None,  # adaptive policy: None leaves the state server's default
    max_slowest_steps=None,  # adaptive policy: None leaves the state server's default
    overlap=False,          # esync, fedavg: the aggregation runs while the next round's local steps do
    max_iters=None,
    max_time=None,
    target_accuracy=None,
    epochs=None,            # stop after this many passes over a worker's share of the training set
    train_dir=None,         # rank 0 saves checkpoints of the global model here; the evaluator reads them
    save_freq=100,          # global steps between checkpoints
    resume=False,
    eval_timeout=300.0,     # the evaluator stops after this many seconds without a new checkpoint
    seed=0,
    node_name=None,         # the machine's log folder; default: the host name
    slowdown=1.0,
    digest_weights=False,
    sync_timeout=300.0,
    validator=False,        # zeno: this process is the trusted validator
    validation_size=1000,   # zeno: training samples held out for the validator
    sync_interval=4,        # zeno, fedavg, fedasync, tifl, feddrop: local steps between aggregations
    n_push=4,               # downpour: local steps between pushes of the summed gradients
    n_fetch=4,              # downpour: local steps between fetches of the server's weights
    alpha=0.6,              # fedasync: the server's mixing weight
    staleness="polynomial",  # fedasync: how the mixing weight shrinks with staleness
    staleness_a=None,       # fedasync: a of the staleness function (0.5 polynomial, 10 hinge)
    staleness_b=4.0,        # fedasync: b of the hinge function
    proximal=0.0,           # fedasync, esync, fedavg: rho of the local objective's proximal term (rho / 2) |x - x_0|^2
    server_momentum=0.0,    # esync, fedavg: beta of the global model's velocity
    normalised_averaging=False,  # esync, fedavg: FedNova's average of the deltas divided by each worker's steps
    scaffold=False,         # esync, fedavg: SCAFFOLD's control variates correct every local step
    dc_lambda=None,         # dcasgd, dcasgd-paper: lambda (lambda0 with --dc-adaptive): DC_LAMBDA_DEFAULTS
    dc_adaptive=0.0,        # dcasgd-paper: m of DC-ASGD-a's mean square of the gradients; 0: constant lambda
    server_optimizer="sgd",  # downpour: the server's rule
    zeno_flavour="sync",    # --zeno-flavour async: an alias of -m zeno-async
    rho=None,               # zeno 0.6; zeno-async 0.02 x -l (see --help)
    eta=-0.001,             # zeno: a delta is rejected unless mean(u.v) > eta mean(v^2)
    byzantine=0,            # the first K workers misbehave (experiments)
    attack="signflip",
    attack_scale=10.0,
    mini_batches=None,      # NBSSGD: parts of a batch (a worker can join the aggregation after any part): parts of
                            # at least NBSYNC_PART_SIZE samples, as many as divide -b
    backup_workers=1,       # backup: b, the late gradients each step drops
    drop_rate=0.5,          # feddrop: the fraction of each hidden layer's units a slow worker's sub-model leaves out
    drop_workers=1,         # feddrop: how many of the slowest workers train sub-models
    tiers=2,                # tifl: tiers of workers by step time
    tier_interval=10,       # tifl: rounds between re-tiering and re-weighing the tiers by their accuracy
    tier_credits=None,      # tifl: rounds each tier may train in (None: no limit)
    balance_threshold=0.2,  # lb-bsp: a speed that drifts by more than this fraction makes a new batch plan
    collective=collectives.PS,  # how a synchronous mode's workers sum their arrays
    hogwild_workers=2,      # hogwild: worker processes sharing the weights
    hogwild_rank=None,      # hogwild: set by the coordinator for each worker it starts
    hogwild_memory=None,    # hogwild: the shared-memory block's name, set by the coordinator
    lr_schedule=None,       # constant, or the dataset's recipe
    lr_steps=None,          # epochs at which --lr-schedule step multiplies every learning rate by --lr-factor
    lr_factor=0.1,
    augment=None,           # augmentation of the training batches (AUGMENTATIONS; "crop" in cifar10's recipe)
    eval_batch_size=None,   # test samples per forward pass of an evaluation (model.py's default when None)
)

# CIFAR-10 trained the way its papers train it, where the command line leaves a flag out: random 32 px crops of the
# image padded by 4 and horizontal flips, momentum 0.9, weight decay 5e-4 of the mean loss (d2l's; He et al. 1e-4),
# every learning rate x0.1 at epochs 100 and 150 (ZenoPS's schedule; He et al. at 82 and 123 of 164).
# Per-channel normalisation is part of reading cifar10 (data.CIFAR10_MEAN/STD).
CIFAR10_RECIPE = dict(augment="crop", momentum=0.9, wd_of_mean_loss=5e-4, lr_schedule="step", lr_steps=(100.0, 150.0))


def _int_list(text):
    try:
        ids = [int(part) for part in text.split(",") if part.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a GPU id or a comma list of ids, got {text!r}")
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected non-negative GPU ids, got {text!r}")
    return ids


def _number(kind, zero_allowed):
    """An argparse type: a finite number of `kind` above 0 (or at least 0)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed):
            raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}" if zero_allowed
                                             else f"expected a positive number, got {text!r}")
        return value
    return parse


BOOL_WORDS = {"true": 1, "false": 0}  # the original scripts wrote -c True, -s False


def _cpu_count(text):
    """-c: a number of CPU contexts, or True (1) / False (0)."""
    word = text.strip().lower()
    if word in BOOL_WORDS:
        return BOOL_WORDS[word]
    try:
        return _non_negative(int)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected True, False or a number of CPU contexts, got {text!r}")


def _switch(text):
    """A 0/1 flag: 1 or True, 0 or False."""
    word = text.strip().lower()
    value = BOOL_WORDS.get(word, {"1": 1, "0": 0}.get(word))
    if value is None:
        raise argparse.ArgumentTypeError(f"expected True, False, 1 or 0, got {text!r}")
    return value


def _positive(kind):
    return _number(kind, zero_allowed=False)


def _non_negative(kind):
    return _number(kind, zero_allowed=True)


def _slowdowns(text):
    """One factor, or (-m hogwild) one per worker process."""
    factors = tuple(_positive(float)(part) for part in text.split(","))
    if any(value < 1 for value in factors):
        raise argparse.ArgumentTypeError(f"--slowdown must be >= 1 (a device F times slower), got {text!r}")
    return factors


def _accuracy(text):
    value = _positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"--target-accuracy is a fraction in (0, 1], got {text!r}")
    return value


def _momentum(text):
    value = _non_negative(float)(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a momentum in [0, 1), got {text!r}")
    return value


def _mixing_weight(text):
    value = _positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"--alpha is a weight in (0, 1], got {text!r}")
    return value


class OneLineErrorParser(argparse.ArgumentParser):
    """Reports a bad argument in one line instead of the whole usage text."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser():
    from models import NETWORKS

    p = OneLineErrorParser(
        description="ESync reproduction: acts as ps-lite scheduler, server or worker from DMLC_ROLE, as a worker "
                    "of an MPI job with --collective ring|butterfly|binary-blocks (under mpiexec), "
                    "or trains on one device when DMLC_ROLE is unset.")
    p.set_defaults(**DEFAULTS)
    p.add_argument("-l", "--learning-rate", "--lr", type=_positive(float),
                   help="SGD learning rate (sync, async, local)")
    p.add_argument("-ll", "--local-lr", type=_positive(float),
                   help="the learning rate of local steps (esync, zeno, fedavg, fedasync)")
    p.add_argument("-gl", "--global-lr", type=_positive(float),
                   help="esync, zeno, fedavg: weights = start + global_lr x the mean delta")
    p.add_argument("--momentum", type=_non_negative(float),
                   help=f"SGD momentum (default 0; {MOMENTUM_OPTIMIZER_DEFAULT} with --local-optimizer momentum)")
    p.add_argument("--local-optimizer", choices=LOCAL_OPTIMIZERS,
                   help="the optimizer of ESync's local steps (learning rate -ll): sgd (with --momentum if given), "
                        "momentum (SGD with --momentum), adam (Adam's default betas; no --momentum)")
    p.add_argument("--wd", type=_non_negative(float),
                   help="weight decay of the workers' optimizers and of the async and dcasgd servers' (Gluon's wd: "
                        "each step adds lr x wd x weight)")
    p.add_argument("-b", "--batch-size", type=_positive(int), help="samples per step and device set")
    p.add_argument("-dd", "--data-dir", help="folder holding <dataset>/ (or cifar-10-batches-bin/)")
    p.add_argument("--dataset", choices=DATASETS)
    p.add_argument("-g", "--gpu", type=_int_list, help="GPU id, or a comma list to split each batch over GPUs")
    p.add_argument("-c", "--cpu", type=_cpu_count,
                   help="True or 1: train on the CPU; N > 1: split each batch over N CPU contexts; "
                        "False or 0: the CPU unless -g")
    p.add_argument("-n", "--network", choices=sorted(NETWORKS))
    p.add_argument("-ld", "--log-dir", help="iteration logs go to <log-dir>/<node>/<device>-rank<R>/")
    p.add_argument("-e", "--eval-duration", "--eval-freq", type=_non_negative(int),
                   help="rank 0 evaluates every N global iterations (0: only at the end)")
    p.add_argument("--eval-seconds", type=_positive(float),
                   help="rank 0 evaluates at the end of the first global iteration that ends this many seconds "
                        "after its last evaluation, instead of every -e iterations: the same number of accuracy "
                        "points per second in modes whose iterations last very differently")
    p.add_argument("-m", "--mode", choices=modes.names() + (EVALUATE_MODE,),
                   help="; ".join(f"{mode.name}: {mode.description}" for mode in modes.MODES.values())
                   + f"; {EVALUATE_MODE}: evaluate the checkpoints of --train-dir as they appear (no cluster)")
    p.add_argument("-dcasgd", "--use-dcasgd", type=int, choices=(0, 1),
                   help="-m async -dcasgd 1 is -m dcasgd (the original scripts' way to ask for DC-ASGD)")
    p.add_argument("-s", "--split-by-class", type=_switch, help="True or 1: non-i.i.d. data partition; False or 0: i.i.d.")
    p.add_argument("-ip", "--state-server-ip", help="ESync state server address")
    p.add_argument("-port", "--state-server-port", type=_positive(int), help="ESync state server port")
    p.add_argument("--esync-policy", choices=ESYNC_POLICIES,
                   help="apply: ask the state server after every local step (the paper's rule); "
                        "plan: ask once per round for the number of local steps; nonblocking: ask after every "
                        "local step without waiting for the answer, and stop at the READY (the paper's delayed ACK); "
                        "adaptive: plan, with rounds long enough that the aggregation idles the workers at most "
                        "--aggregation-share of each (default)")
    p.add_argument("--aggregation-share", type=_share,
                   help="adaptive policy: the largest share of a round the aggregation may keep the workers from "
                        "computing, in (0, 1] (default 0.1)")
    p.add_argument("--max-slowest-steps", type=_positive(int),
                   help="adaptive policy: the most local steps the slowest worker runs in a round; bounds how far "
                        "the workers' models drift apart (default 8)")
    p.add_argument("--overlap", action="store_true",
                   help="esync, fedavg: send a round's delta and go on with the next round's local steps while it "
                        "is aggregated; the average is applied at the end of that round, keeping the local "
                        "progress made meanwhile (delayed averaging)")
    p.add_argument("--epsilon", type=_non_negative(float),
                   help="ESync readiness margin in seconds (default: fitted to the measured step times); "
                        "zeno-async: the rule's tolerance epsilon (default 0)")
    p.add_argument("--validator", action="store_true",
                   help="zeno: this worker is a trusted validator (one or more per job; each trains on the same "
                        "--validation-size held-out samples and scores the updates of its share of the workers)")
    p.add_argument("--validation-size", type=_positive(int),
                   help="zeno: training samples held out for the validator; validation-only: the samples it trains on")
    p.add_argument("--sync-interval", type=_positive(int),
                   help="zeno, fedavg, fedasync: local steps between aggregations")
    p.add_argument("--n-push", type=_positive(int), help="downpour: local steps between pushes of their gradients")
    p.add_argument("--n-fetch", type=_positive(int), help="downpour: local steps between fetches of the weights")
    p.add_argument("--alpha", type=_mixing_weight, help="fedasync: the server's mixing weight alpha in (0, 1]")
    p.add_argument("--staleness", choices=STALENESS_FUNCTIONS,
                   help="fedasync: s(t - tau), the factor of alpha for a model t - tau updates old: constant 1, "
                        "polynomial (t - tau + 1)^-a, hinge 1 up to b then 1 / (a (t - tau - b) + 1)")
    p.add_argument("--staleness-a", type=_non_negative(float),
                   help="fedasync: a of --staleness (default 0.5 polynomial, 10 hinge)")
    p.add_argument("--staleness-b", type=_non_negative(float), help="fedasync: b of the hinge function")
    p.add_argument("--proximal", type=_non_negative(float),
                   help="fedasync, esync, fedavg: rho of the proximal term (rho / 2) |x - x_t|^2 the local steps "
                        "add to the loss (x_t: the global model the worker last received; rho of the mean loss over "
                        "a batch)")
    p.add_argument("--server-momentum", type=_momentum,
                   help="esync, fedavg: beta of the global model's velocity: each aggregation moves it by beta x "
                        "its last move + the average of the deltas (default 0: the average alone)")
    p.add_argument("--normalised-averaging", action="store_true",
                   help="esync, fedavg: average each worker's delta divided by its local steps and scale the "
                        "average by the workers' mean steps (FedNova), so that a worker's share counts the same "
                        "however many steps it took; SGD and momentum local optimizers")
    p.add_argument("--scaffold", action="store_true",
                   help="esync, fedavg: correct every local step's gradient by SCAFFOLD's control variates c - c_i "
                        "(option II), which travel with the deltas")
    p.add_argument("--dc-lambda", type=_non_negative(float),
                   help="dcasgd, dcasgd-paper: lambda of the delay compensation (default 0.04; with --dc-adaptive "
                        "lambda0, default 2)")
    p.add_argument("--dc-adaptive", type=_momentum,
                   help="dcasgd-paper: DC-ASGD-a, lambda = lambda0 / sqrt(mean square of the gradients), the mean "
                        "square moving with momentum M (the paper's 0.95); 0 (default): DC-ASGD-c, constant lambda")
    p.add_argument("--server-optimizer", choices=SERVER_OPTIMIZERS,
                   help="downpour: the rule of the server and of each replica's own steps: sgd (-l, --momentum) "
                        "or adagrad (-l, Dean et al.'s)")
    p.add_argument("--zeno-flavour", choices=("sync", "async"),
                   help="-m zeno --zeno-flavour async is -m zeno-async (Zeno++)")
    p.add_argument("--rho", type=_non_negative(float),
                   help="zeno: reject a layer's delta u unless mean(u^2) < (1 + rho) mean(v^2) (default 0.6); "
                        "zeno-async: reject g unless lr <g', v> - rho |v|^2 + lr epsilon >= 0 (default 0.02 x -l)")
    p.add_argument("--eta", type=float, help="zeno: reject a layer's delta unless mean(u.v) > eta mean(v^2)")
    p.add_argument("--byzantine", type=_non_negative(int),
                   help="the first K workers are Byzantine: they corrupt what they send (experiments)")
    p.add_argument("--attack", choices=ATTACKS, help="what a Byzantine worker does")
    p.add_argument("--attack-scale", type=_positive(float), help="S of the attack (see training/attacks.py)")
    p.add_argument("--mini-batches", type=_positive(int),
                   help=f"nbsync: split each batch into this many parts (-b must be a multiple; default: the most "
                        f"parts of at least {NBSYNC_PART_SIZE} samples that divide -b, e.g. 2 at -b 64, 8 at -b 256)")
    p.add_argument("--backup-workers", type=_positive(int),
                   help="backup: each step applies the first (workers - b) gradients and drops the b late ones "
                        "(default 1)")
    p.add_argument("--drop-rate", type=_open_fraction,
                   help="feddrop: the fraction of each hidden layer's units (filters, neurons) a slow worker's "
                        "sub-model leaves out, in (0, 1) (default 0.5)")
    p.add_argument("--drop-workers", type=_positive(int),
                   help="feddrop: how many of the slowest workers train sub-models (default 1)")
    p.add_argument("--tiers", type=_positive(int),
                   help="tifl: group the workers into this many tiers by their step times; one tier trains per round "
                        "(default 2)")
    p.add_argument("--tier-interval", type=_positive(int),
                   help="tifl: every this many rounds, make the tiers again and weigh them by their accuracy "
                        "(default 10)")
    p.add_argument("--tier-credits", type=_positive(int),
                   help="tifl: rounds each tier may train in (default: no limit)")
    p.add_argument("--balance-threshold", type=_share,
                   help="lb-bsp: plan the batches again once a worker's speed has drifted by more than this fraction "
                        "since the last plan, in (0, 1] (default 0.2)")
    p.add_argument("--collective", choices=collectives.NAMES,
                   help=f"how the workers of -m {', '.join(modes.synchronous_names())} sum their updates: ps through "
                        "the ps-lite servers (DMLC_ROLE); ring, butterfly or binary-blocks with MPI's allreduce among "
                        "the workers started by mpiexec (no scheduler or servers)")
    p.add_argument("--max-iters", "--max-steps", type=_positive(int), help="stop after this many global iterations")
    p.add_argument("--epochs", type=_positive(float), help="stop after this many passes over a worker's share")
    p.add_argument("--max-time", type=_positive(float), help="stop after this many seconds of training")
    p.add_argument("--target-accuracy", type=_accuracy, help="stop once rank 0's test accuracy reaches this")
    p.add_argument("--seed", type=_non_negative(int))
    p.add_argument("--node-name", help="this machine's log folder name (default: the host name)")
    p.add_argument("--slowdown", type=_slowdowns,
                   help="emulate a device F times slower: pad each local step to F x its typical compute time "
                        "(-m hogwild: one F, or one per worker process, e.g. 1,1,4)")
    p.add_argument("--sync-timeout", type=_positive(float),
                   help="seconds a worker waits on the cluster or the state server before it exits with an error "
                        "(a dead process would otherwise block a synchronous job forever)")
    p.add_argument("--hogwild-workers", type=_positive(int),
                   help="hogwild: worker processes on this machine sharing one copy of the weights (default 2)")
    p.add_argument("--hogwild-rank", type=_non_negative(int), help=argparse.SUPPRESS)
    p.add_argument("--hogwild-memory", help=argparse.SUPPRESS)
    p.add_argument("--lr-schedule", choices=SCHEDULES,
                   help="every learning rate x a factor of the epoch: step (x --lr-factor at each of --lr-steps), "
                        "cosine (to 0 over --epochs), constant (default; cifar10: step at 100,150)")
    p.add_argument("--lr-steps", type=_epochs_list, help="--lr-schedule step: the epochs, e.g. 100,150")
    p.add_argument("--lr-factor", type=_positive(float), help="--lr-schedule step: the factor (default 0.1)")
    p.add_argument("--augment", choices=AUGMENTATIONS,
                   help="augmentation of the training batches: crop, random 32 px crops of the image padded by 4 and "
                        "left-right flips; resized-crop, d2l's (Gluon's transforms: resized to 40 px, a random "
                        "square of 64-100%% of it back to 32 px, flips); none (default crop for cifar10, else none)")
    p.add_argument("--eval-batch-size", "--test-batch-size", type=_positive(int),
                   help="test samples per forward pass of an evaluation (default 500; 50 for networks of 224 px "
                        "input and more)")
    p.add_argument("--digest-weights", action="store_true",
                   help="record a fingerprint of the weights after each aggregation (to verify that all "
                        "workers hold identical weights; costs a copy of the model per round)")
    _add_checkpoint_flags(p)
    return p


def _add_checkpoint_flags(p):
    p.add_argument("--train-dir", help="rank 0 saves the global model here every --save-freq global iterations; "
                                       f"-m {EVALUATE_MODE} evaluates what it finds there")
    p.add_argument("--save-freq", type=_non_negative(int),
                   help="global iterations between checkpoints (0: only the last one)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the latest checkpoint in --train-dir: its global step, weights and "
                        "local optimizer state")
    p.add_argument("--eval-timeout", type=_positive(float),
                   help=f"-m {EVALUATE_MODE}: stop after this many seconds without a new checkpoint")


# The older way to pick a variant, still accepted: -m async -dcasgd 1 is -m dcasgd (as in the original scripts), and
# -m zeno --zeno-flavour async is -m zeno-async. (flag, its field in args, the value, the mode it refines, the variant)
MODE_ALIASES = (("-dcasgd", "use_dcasgd", 1, "async", "dcasgd"),
                ("--zeno-flavour", "zeno_flavour", "async", "zeno", "zeno-async"))


def resolve_mode_aliases(parser, args):
    for flag, field, value, base, variant in MODE_ALIASES:
        if getattr(args, field) != value:
            continue
        if args.mode not in (base, variant):
            parser.error(f"{flag} {value} belongs to -m {base} (it means -m {variant}), not -m {args.mode}")
        args.mode = variant


def _fraction(upper_included):
    """A number in (0, 1], or in (0, 1) when not `upper_included`."""
    interval = "(0, 1]" if upper_included else "(0, 1)"

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not (0 < value < 1 or (upper_included and value == 1)):
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {text!r}")
        return value
    return parse


_share = _fraction(upper_included=True)
_open_fraction = _fraction(upper_included=False)


def refuse_sizing_without_adaptive(parser, args):
    for field in ROUND_SIZING_FLAGS:
        if getattr(args, field) is not None and args.esync_policy != "adaptive":
            flag = MODE_FLAGS[field][0]
            parser.error(f"{flag} sizes the adaptive policy's rounds: add --esync-policy adaptive")


def _epochs_list(text):
    try:
        epochs = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of epochs, got {text!r}")
    if not epochs or any(not e > 0 for e in epochs) or list(epochs) != sorted(set(epochs)):
        raise argparse.ArgumentTypeError(f"expected increasing positive epochs, got {text!r}")
    return epochs


def resolve_recipe(parser, args):
    """The dataset's recipe fills the flags the command line left out; then the schedule must be complete."""
    recipe = CIFAR10_RECIPE if args.dataset == "cifar10" else {}
    if args.augment is None:
        args.augment = recipe.get("augment", "none")
    if recipe and args.momentum is None and args.local_optimizer != "adam":
        args.momentum = recipe["momentum"]
    if args.wd is None:  # the loss here is summed over the batch: lr x wd equals the mean loss's at wd x batch
        args.wd = recipe["wd_of_mean_loss"] * args.batch_size if recipe else 0.0
    if args.lr_schedule is None:
        args.lr_schedule = recipe.get("lr_schedule", "constant")
        if args.lr_steps is None:
            args.lr_steps = recipe.get("lr_steps", ())
    if args.lr_schedule == "step" and not args.lr_steps:
        parser.error("--lr-schedule step needs --lr-steps (the epochs, e.g. 100,150)")
    if args.lr_schedule == "cosine" and args.epochs is None:
        parser.error("--lr-schedule cosine decays to 0 over --epochs: give --epochs")
    args.lr_steps = tuple(args.lr_steps or ())


def resolve_slowdown(parser, args):
    """args.slowdowns: the factor of each process the command starts; args.slowdown: this process's."""
    factors = args.slowdown if isinstance(args.slowdown, tuple) else (args.slowdown,)
    if len(factors) > 1:
        if args.mode != modes.HOGWILD:
            parser.error(f"--slowdown {','.join(f'{f:g}' for f in factors)}: one factor per process; a list is for "
                         "-m hogwild, whose one command starts several")
        if len(factors) != args.hogwild_workers:
            parser.error(f"--slowdown lists {len(factors)} factors for --hogwild-workers {args.hogwild_workers}")
    args.slowdowns = factors
    args.slowdown = factors[0] if args.hogwild_rank is None else factors[args.hogwild_rank % len(factors)]


def nbsync_parts(batch_size, part_size=NBSYNC_PART_SIZE):
    """--mini-batches when not given: the most parts of at least `part_size` samples that divide the batch (1 when
    the batch is smaller)."""
    if batch_size < part_size:
        return 1
    return max(p for p in range(1, batch_size // part_size + 1) if batch_size % p == 0)


def refuse_other_modes_flags(parser, args):
    """A flag of MODE_FLAGS changed from its default for a mode that would not read it."""
    for field, (flag, mode_names) in MODE_FLAGS.items():
        if getattr(args, field) != DEFAULTS[field] and args.mode not in mode_names:
            parser.error(f"{flag} belongs to -m {', '.join(mode_names)}, not -m {args.mode}")


def flags_for_mode(argv, mode):
    """argv without the MODE_FLAGS flags (and their values) that `mode` does not read: the launcher hands the same
    extra arguments to every mode of an experiment."""
    foreign = {flag for flag, mode_names in MODE_FLAGS.values() if mode not in mode_names}
    switches = {flag for action in build_parser()._actions if action.nargs == 0 for flag in action.option_strings}
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in foreign:
            skip = arg not in switches  # a switch (--overlap) has no value to drop with it
        elif arg.split("=", 1)[0] not in foreign:
            kept.append(arg)
    return kept


def resolve_dc_lambda(args):
    if args.dc_lambda is None:
        args.dc_lambda = DC_LAMBDA_DEFAULTS["adaptive" if args.dc_adaptive else "constant"]


def resolve_momentum(parser, args):
    """--momentum is SGD's: Adam and Adagrad refuse it; its default follows --local-optimizer."""
    if args.local_optimizer == "adam" and args.momentum is not None:
        parser.error("--momentum is SGD's; --local-optimizer adam keeps its own moments")
    if args.server_optimizer == "adagrad" and args.momentum is not None:
        parser.error("--momentum is SGD's; --server-optimizer adagrad scales each weight's step by its own history")
    if args.normalised_averaging and args.local_optimizer == "adam":
        parser.error("--normalised-averaging divides a delta by its SGD steps; Adam's steps have no such norm")
    if args.local_optimizer == "momentum" and args.momentum == 0:
        parser.error("--local-optimizer momentum needs --momentum > 0 (or leave it out: "
                     f"{MOMENTUM_OPTIMIZER_DEFAULT})")
    if args.momentum is None:
        args.momentum = MOMENTUM_OPTIMIZER_DEFAULT if args.local_optimizer == "momentum" else 0.0


def local_update_rule(optimizer, momentum):
    """The local optimizer's rule as its state shows it: adam (two moments per weight), adagrad (the summed squares),
    momentum (one), sgd."""
    if optimizer in ("adam", "adagrad"):
        return optimizer
    return "momentum" if momentum > 0 else "sgd"


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_mode_aliases(parser, args)
    resolve_recipe(parser, args)
    if args.mini_batches is None:
        args.mini_batches = nbsync_parts(args.batch_size)
    refuse_other_modes_flags(parser, args)
    refuse_sizing_without_adaptive(parser, args)
    resolve_momentum(parser, args)
    resolve_dc_lambda(args)
    resolve_slowdown(parser, args)
    if args.node_name is None:
        args.node_name = socket.gethostname()
    if args.rho is None:
        args.rho = 0.02 * args.learning_rate if args.mode == "zeno-async" else 0.6
    if args.staleness_a is None:
        args.staleness_a = STALENESS_A_DEFAULTS.get(args.staleness, 0.0)
    return args
