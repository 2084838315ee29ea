"""How a scheme declares the flags it reads: each field of its frozen `Options` dataclass is a flag of the command
line, with its default and help (`option`). training/config.py builds the command line from these declarations,
knows from them which modes read a flag (a flag changed for a mode that does not read it is refused), and passes a
job the Options of its mode. Nothing here imports MXNet.

The flags every scheme reads are on `Options`; the ones several schemes read are declared once below, as functions
each of those schemes calls; the rest live beside their scheme (training/schemes/).
"""
import dataclasses
import os
from dataclasses import dataclass
from typing import Optional

from training import argtypes
from training.attacks import ATTACKS

LOCAL_OPTIMIZERS = ("sgd", "momentum", "adam")  # the original ESync's choices for its local steps (-ll)
MOMENTUM_OPTIMIZER_DEFAULT = 0.9  # --momentum of --local-optimizer momentum when not given
SCHEDULES = ("constant", "step", "cosine")  # --lr-schedule: training/schedule.py


class OptionError(ValueError):
    """A flag's value does not suit the mode; the message is one line (the command line exits 2 with it)."""


class ModeError(ValueError):
    """A job's options do not suit its mode; the message is one line."""


EDGE_SHARE = 0.1  # a chosen value in the outer tenth of its range lies at its edge


@dataclass(frozen=True)
class Range:
    """The values a search (launch.py tune) tries for a flag: low to high, on a log scale or not, whole numbers or
    not."""
    low: float
    high: float
    log: bool = False
    integer: bool = False
    limits: Optional[tuple] = None  # the widest a search widens it to (a chosen value at an edge); None: as it is

    def widened(self, value):
        """The range stretched past the edge `value` lies at (in its outer EDGE_SHARE), by half its span on its
        scale, within its limits; None where it lies at no edge or that edge is already at its limit."""
        least, most = self.limits or (self.low, self.high)
        at = self.position(value)
        if least < self.low and at < EDGE_SHARE:
            low, high = self._stretch(self.low, -0.5), self.high
        elif self.high < most and at > 1 - EDGE_SHARE:
            low, high = self.low, self._stretch(self.high, 0.5)
        else:
            return None
        low, high = max(least, low), min(most, high)
        if self.integer:
            low, high = round(low), round(high)
        return dataclasses.replace(self, low=low, high=high)

    def _stretch(self, edge, share):
        import math

        if self.log:
            return edge * math.exp(share * math.log(self.high / self.low))
        return edge + share * (self.high - self.low)

    def __contains__(self, value):
        return self.low <= value <= self.high

    def describe(self):
        scale = "log-uniform" if self.log else "uniform"
        return f"{scale}{' integer' if self.integer else ''} {self.low:g} to {self.high:g}"

    def suggest(self, trial, name):
        """A value from an Optuna trial."""
        if self.integer:
            return trial.suggest_int(name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(name, self.low, self.high, log=self.log)

    def text(self, value, digits=6):
        return f"{value:.{digits}g}"

    def position(self, value):
        """Where `value` lies in the range, 0 at low to 1 at high (on the log scale where the range has one)."""
        import math

        scale = math.log if self.log else float
        return (scale(value) - scale(self.low)) / (scale(self.high) - scale(self.low))


@dataclass(frozen=True)
class Choice:
    """The names a search (launch.py tune) tries for a flag that takes one of a few."""
    names: tuple
    log = False

    def __contains__(self, value):
        return value in self.names

    def describe(self):
        return "one of " + ", ".join(self.names)

    def suggest(self, trial, name):
        return trial.suggest_categorical(name, list(self.names))

    def position(self, value):
        """A name lies at no edge."""
        return 0.5

    def widened(self, value):
        return None

    def text(self, value, digits=6):
        return str(value)


# lenet's sequential SGD diverged at 0.016 on Fashion-MNIST
LEARNING_RATES = Range(1e-4, 3e-2, log=True, limits=(1e-6, 1.0))


def option(*flags, default=None, help, type=None, choices=None, switch=False, any_mode=False, search=None):
    """A field of a scheme's Options that is a command-line flag. switch: a flag without a value (store_true).
    any_mode: every mode accepts the flag (the original scripts hand it to every role), though only some read it.
    search: the Range a hyperparameter search tries for it (launch.py tune)."""
    return dataclasses.field(default=default, metadata=dict(
        flags=flags, help=help, type=type, choices=choices, switch=switch, any_mode=any_mode, search=search))


def fixed(value):
    """A field a scheme inherits but keeps at `value`: it does not read the flag of that name."""
    return dataclasses.field(default=value, metadata=dict(fixed=True))


def flag_fields(options_class):
    """The fields of `options_class` that it reads from the command line."""
    return [f for f in dataclasses.fields(options_class) if not f.metadata.get("fixed")]


def declaration(cls):
    """An `Options` class: a frozen dataclass whose fields declare flags. A worker makes one instance from its
    command line and reads it, never compares or prints it: the comparison and the text a dataclass writes methods
    for are left out, since every process that makes the mode table (training/mode_table.py) imports every
    scheme's Options."""
    return dataclass(frozen=True, repr=False, eq=False)(cls)


@declaration
class Options:
    """The flags every scheme reads; a scheme that reads more declares a subclass as its `Options`."""
    batch_size: int = option("-b", "--batch-size", default=64, type=argtypes.POSITIVE_INT,
                             help="samples per step and device set")
    learning_rate: float = option("-l", "--learning-rate", "--lr", default=0.001, type=argtypes.POSITIVE_FLOAT,
                                  search=LEARNING_RATES,
                                  help="SGD learning rate, of the loss summed over a batch as the original "
                                       "scripts use it")
    momentum: Optional[float] = option("--momentum", type=argtypes.NON_NEGATIVE_FLOAT,
                                       help=f"SGD momentum (default 0; {MOMENTUM_OPTIMIZER_DEFAULT} with "
                                            "--local-optimizer momentum)")
    wd: Optional[float] = option("--wd", type=argtypes.NON_NEGATIVE_FLOAT,
                                 help="weight decay of the workers' optimizers and of the async and dcasgd servers' "
                                      "(Gluon's wd: each step adds lr x wd x weight; default 0, or the dataset's "
                                      "recipe)")
    split_by_class: int = option("-s", "--split-by-class", default=0, type=argtypes.switch,
                                 help="True or 1: non-i.i.d. data partition, each worker a contiguous block of "
                                      "classes; False or 0: i.i.d.")
    seed: int = option("--seed", default=0, type=argtypes.NON_NEGATIVE_INT, help="seed of the weights and the data")
    byzantine: int = option("--byzantine", default=0, type=argtypes.NON_NEGATIVE_INT,
                            help="the first K workers are Byzantine: they corrupt what they send (experiments)")
    attack: str = option("--attack", default="signflip", choices=ATTACKS, help="what a Byzantine worker does")
    attack_scale: float = option("--attack-scale", default=10.0, type=argtypes.POSITIVE_FLOAT,
                                 help="S of the attack (see training/attacks.py)")
    worker_index: Optional[int] = option("--worker-index", type=argtypes.NON_NEGATIVE_INT,
                                         help="this device's position in the job, 0 to workers - 1 (launch.py: its "
                                              "--devices entry): its share of the data, its log folder "
                                              "<device>-worker<I>; worker 0 hands the model to be evaluated "
                                              "(default: the ps-lite rank, which follows the order the workers "
                                              "joined in; MPI's rank)")
    job_id: Optional[str] = option("--job-id", any_mode=True,
                                   help="the job this worker belongs to (launch.py gives every run its own): its logs "
                                        "record it, summary.py refuses to mix the folders of several jobs, and the "
                                        "state server keeps the job apart from others it serves")
    sync_timeout: float = option("--sync-timeout", default=300.0, type=argtypes.POSITIVE_FLOAT,
                                 help="seconds a worker waits on the cluster or the state server before it exits "
                                      "with an error (a dead process would otherwise block a synchronous job "
                                      "forever)")
    lr_schedule: Optional[str] = option("--lr-schedule", choices=SCHEDULES,
                                        help="every learning rate x a factor of the epoch: step (x --lr-factor at "
                                             "each of --lr-steps), cosine (to 0 over --epochs), constant (default; "
                                             "cifar10: step at 100,150)")
    lr_steps: Optional[tuple] = option("--lr-steps", type=argtypes.epochs_list,
                                       help="--lr-schedule step: the epochs, e.g. 100,150")
    lr_factor: float = option("--lr-factor", default=0.1, type=argtypes.POSITIVE_FLOAT,
                              help="--lr-schedule step: the factor (default 0.1)")
    epochs: Optional[float] = option("--epochs", type=argtypes.POSITIVE_FLOAT,
                                     help="stop after this many passes over a worker's share")

    @classmethod
    def from_args(cls, args):
        return cls(**{f.name: getattr(args, f.name) for f in flag_fields(cls)})

    @classmethod
    def resolve(cls, args):
        """Fill the defaults that depend on other flags, in place; OptionError when the flags contradict."""

    @classmethod
    def check(cls, args, num_workers):
        """ModeError when the options do not suit a job of `num_workers` workers."""


@declaration
class CoordinatedOptions(Options):
    """A scheme whose workers talk to the state server (SimpleStateServer)."""
    state_server_ip: str = option("-ip", "--state-server-ip", default="127.0.0.1", any_mode=True,
                                  help="the state server's address")
    state_server_port: int = option("-port", "--state-server-port", default=10010, type=argtypes.POSITIVE_INT,
                                    any_mode=True, help="the state server's port")


# The flags several schemes read, each declared once.

def local_lr():
    return option("-ll", "--local-lr", default=0.001, type=argtypes.POSITIVE_FLOAT, search=LEARNING_RATES,
                  help="the learning rate of the local steps")


def local_optimizer():
    return option("--local-optimizer", default="sgd", choices=LOCAL_OPTIMIZERS,
                  help="the optimizer of the steps a worker takes on its own (one device's at -l, a local-step "
                       "scheme's at -ll, whose state carries over from round to round): sgd (with --momentum if "
                       "given), momentum (SGD with --momentum), adam (Adam's default betas; no --momentum)")


def global_lr():
    return option("-gl", "--global-lr", default=1.0, type=argtypes.POSITIVE_FLOAT,
                  search=Range(0.5, 8.0, log=True, limits=(0.01, 100.0)),
                  help="weights = start + global_lr x the mean delta")


def sync_interval():
    # searched up to the rounds a costly link calls for: ESync's rule takes about 117 local steps a round on the
    # paper's cluster (4 fast devices, 2 117x slower), where a fixed period is its rival
    return option("--sync-interval", default=4, type=argtypes.POSITIVE_INT,
                  search=Range(1, 256, log=True, integer=True), help="local steps between aggregations")


def proximal():
    return option("--proximal", default=0.0, type=argtypes.NON_NEGATIVE_FLOAT,
                  help="rho of the proximal term (rho / 2) |x - x_t|^2 the local steps add to the loss (x_t: the "
                       "global model the worker last received; rho of the mean loss over a batch)")


def validation_size():
    return option("--validation-size", default=1000, type=argtypes.POSITIVE_INT,
                  help="training samples a validator holds out and trains on")


# The checks several schemes share.

def check_one_server(args):
    if os.environ.get("DMLC_NUM_SERVER", "1") != "1":
        raise ModeError(f"-m {args.mode} needs each worker's whole push on one server: set DMLC_NUM_SERVER=1")


def check_constant_lr(args):
    """The rules written for the one server (Zeno++, the paper's DC-ASGD) keep their learning rate."""
    if args.lr_schedule != "constant":
        raise ModeError(f"-m {args.mode}'s rule on the server keeps -l constant: leave out --lr-schedule "
                        f"{args.lr_schedule}")


def local_update_rule(optimizer, momentum):
    """The local optimizer's rule as its state shows it: adam (two moments per weight), adagrad (the summed squares),
    momentum (one), sgd."""
    if optimizer in ("adam", "adagrad"):
        return optimizer
    return "momentum" if momentum > 0 else "sgd"
