"""The command line of a training job, and what it resolves to.

The job's own flags (data, network, devices, logs, stop conditions, checkpoints, the transport) are declared here;
every scheme declares the flags it reads in its Options (training/options.py), and the command line is built from
both: a scheme's flag lists the modes that read it in its help, and is refused for a mode that does not. The flags
keep the names of the original ESync scripts (-l, -ll, -gl, -b, -dd, -g, -c, -n, -ld, -e, -m, -dcasgd, -s, -ip,
-port). The resolved configuration is saved beside each worker's logs (meta.json).
"""
import argparse
import dataclasses
import functools
import socket
from dataclasses import dataclass, field

from data import DATA_DIRS, DATA_PATH_VARIABLE
from training import argtypes, modes
from training.checks import OneLineErrorParser

from training.transport import collectives
from training.options import MOMENTUM_OPTIMIZER_DEFAULT, OptionError, Options, flag_fields

DATASETS = ("fashion-mnist", "mnist", "cifar10", "mnist-5k")
AUGMENTATIONS = ("none", "crop", "resized-crop")  # --augment: data.augmented
EVALUATE_MODE = "evaluate"  # the evaluator process beside a job: evaluates its checkpoints (training/evaluator.py)

# CIFAR-10 trained the way its papers train it, where the command line leaves a flag out: random 32 px crops of the
# image padded by 4 and horizontal flips, momentum 0.9, weight decay 5e-4 of the mean loss (d2l's; He et al. 1e-4),
# every learning rate x0.1 at epochs 100 and 150 (ZenoPS's schedule; He et al. at 82 and 123 of 164).
# Per-channel normalisation is part of reading cifar10 (data.CIFAR10_MEAN/STD).
CIFAR10_RECIPE = dict(augment="crop", momentum=0.9, wd_of_mean_loss=5e-4, lr_schedule="step", lr_steps=(100.0, 150.0))


@dataclass
class SchemeFlag:
    """A flag some schemes declare: its declaration, the modes that read it, and their help texts."""
    field: object  # its declaration: a mode_table.Flag (name, default, metadata)
    readers: list = field(default_factory=list)
    helps: dict = field(default_factory=dict)  # help text: the modes whose declaration says it

    @property
    def name(self):
        """The flag as messages name it (its long form)."""
        return next((f for f in self.field.metadata["flags"] if f.startswith("--")), self.field.metadata["flags"][0])

    @property
    def help(self):
        if self.field.metadata["help"] == argparse.SUPPRESS:
            return argparse.SUPPRESS
        return "; ".join(f"{', '.join(readers)}: {text}" for text, readers in self.helps.items())

    def add(self, mode, declared):
        different = [key for key in ("flags", "type", "choices", "switch", "any_mode", "search")
                     if declared.metadata[key] != self.field.metadata[key]] + \
            (["default"] if declared.default != self.field.default else [])
        if different:
            raise TypeError(f"{self.name} is declared twice with a different {different[0]} (-m {mode})")
        self.readers.append(mode)
        self.helps.setdefault(declared.metadata["help"], []).append(mode)


def scheme_flags():
    """{field name: SchemeFlag} of every flag a scheme reads beyond the common Options, in the catalog's order."""
    common = {f.name for f in dataclasses.fields(Options)}
    flags = {}
    for name, mode in modes.MODES.items():
        for declared in mode.declared.flags:
            if declared.name not in common:
                flags.setdefault(declared.name, SchemeFlag(declared)).add(name, declared)
    return flags


def add_declared(p, declared, help_text):
    meta = declared.metadata
    if meta.get("search") and help_text != argparse.SUPPRESS:
        help_text += f" [launch.py tune searches {meta['search'].describe()}]"
    kwargs = dict(dest=declared.name, default=declared.default, help=help_text)
    if meta["switch"]:
        kwargs["action"] = "store_true"
    else:
        kwargs.update(type=meta["type"], choices=meta["choices"])
    p.add_argument(*meta["flags"], **kwargs)


DESCRIPTION = ("ESync reproduction: acts as ps-lite scheduler, server or worker from DMLC_ROLE, as a worker of an MPI "
               "job with --collective ring|butterfly|binary-blocks (under mpiexec), or trains on one device when "
               "DMLC_ROLE is unset.")


def build_parser():
    """The parser of every mode's flags, built once per catalog: the launcher checks every worker's command line of
    every run it plans (a map's hundreds), and building it costs a thousand add_argument calls. Only parsed, never
    changed, by its callers."""
    return _parser(tuple(modes.MODES.values()))


@functools.lru_cache(maxsize=4)
def _parser(catalog):
    p = OneLineErrorParser(description=DESCRIPTION)
    add_job_flags(p)
    for declared in dataclasses.fields(Options):
        add_declared(p, declared, declared.metadata["help"])
    for flag in scheme_flags().values():
        add_declared(p, flag.field, flag.help)
    add_checkpoint_flags(p)
    return p


HELP_WIDTH = 120


def help_text(mode=None):
    """`main.py --help`: the flags every mode reads and the list of modes; `main.py -m MODE --help`: that mode's own
    flags, with their defaults and search ranges (docs/clusters.md, "Main flags", lists them all)."""
    if mode is None:
        p = OneLineErrorParser(description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog="modes (main.py -m MODE --help: its own flags):\n" + "\n".join(
                                   f"  {name:16} {m.description}" for name, m in modes.MODES.items()))
        add_job_flags(p)
        for declared in dataclasses.fields(Options):
            add_declared(p, declared, declared.metadata["help"])
        add_checkpoint_flags(p)
        return p.format_help()
    p = argparse.ArgumentParser(prog=f"main.py -m {mode}", add_help=False, usage="%(prog)s [common flags] [its flags]",
                                formatter_class=lambda prog: argparse.HelpFormatter(prog, width=HELP_WIDTH,
                                                                                    max_help_position=28),
                                description=f"{mode}: {modes.MODES[mode].description}. Its own flags below; the "
                                            "flags every mode reads: main.py --help.")
    own = p.add_argument_group(f"-m {mode}'s flags")
    for flag in scheme_flags().values():
        if mode in flag.readers and flag.help != argparse.SUPPRESS:
            texts = [text for text, readers in flag.helps.items() if mode in readers]
            add_declared(own, flag.field, "; ".join(texts) + default_text(flag.field))
    return p.format_help()


def default_text(declared):
    if declared.metadata["switch"] or declared.default is None or "default" in declared.metadata["help"]:
        return ""
    return f" (default {declared.default})"


def asked_for_help(argv):
    """The mode whose help `argv` asks for (None: the common one), or False where it asks for none."""
    argv = list(argv)
    if not ({"-h", "--help"} & set(argv)):
        return False
    for i, arg in enumerate(argv):
        if arg in ("-m", "--mode") and i + 1 < len(argv):
            return argv[i + 1] if argv[i + 1] in modes.MODES else None
        if arg.startswith("--mode="):
            return arg.split("=", 1)[1] if arg.split("=", 1)[1] in modes.MODES else None
    return None


def add_job_flags(p):
    from models import NETWORKS

    p.add_argument("-dd", "--data-dir",
                   help="folder holding <dataset>/ (or cifar-10-batches-bin/); default: the first of "
                        f"{', '.join(DATA_DIRS)} that holds it (${DATA_PATH_VARIABLE} replaces that list)")
    p.add_argument("--dataset", default="fashion-mnist", choices=DATASETS)
    p.add_argument("-n", "--network", default="resnet18-v1", choices=sorted(NETWORKS))
    p.add_argument("-g", "--gpu", type=argtypes.gpu_ids,
                   help="GPU id, or a comma list to split each batch over GPUs")
    p.add_argument("-c", "--cpu", type=argtypes.cpu_count, default=0,
                   help="True or 1: train on the CPU; N > 1: split each batch over N CPU contexts; "
                        "False or 0: the CPU unless -g")
    p.add_argument("-ld", "--log-dir", default="logs",
                   help="iteration logs go to <log-dir>/<node>/<device>-worker<I>/ (I: --worker-index)")
    p.add_argument("--holdout", type=argtypes.NON_NEGATIVE_INT, default=0,
                   help="hold N samples of the training set out of every worker's share, drawn the same in every run; "
                        "evaluations (the evaluator's, -e) test them instead of the test set, which is then never "
                        "read: launch.py tune judges its trials so")
    p.add_argument("-e", "--eval-duration", "--eval-freq", type=argtypes.NON_NEGATIVE_INT, default=1,
                   help="rank 0 evaluates every N global iterations (0: only at the end)")
    p.add_argument("--eval-seconds", type=argtypes.POSITIVE_FLOAT,
                   help="rank 0 evaluates at the end of the first global iteration that ends this many seconds "
                        "after its last evaluation, instead of every -e iterations: the same number of accuracy "
                        "points per second in modes whose iterations last very differently")
    p.add_argument("-m", "--mode", default=modes.STANDALONE, choices=modes.names() + (EVALUATE_MODE,),
                   help="; ".join(f"{mode.name}: {mode.description}" for mode in modes.MODES.values())
                   + f"; {EVALUATE_MODE}: evaluate the checkpoints of --train-dir as they appear (no cluster)")
    p.add_argument("-dcasgd", "--use-dcasgd", type=int, choices=(0, 1), default=0,
                   help="-m async -dcasgd 1 is -m dcasgd (the original scripts' way to ask for DC-ASGD)")
    p.add_argument("--zeno-flavour", choices=("sync", "async"), default="sync",
                   help="-m zeno --zeno-flavour async is -m zeno-async (Zeno++)")
    p.add_argument("--collective", choices=collectives.NAMES, default=collectives.PS,
                   help=f"how the workers of -m {', '.join(modes.synchronous_names())} sum their updates: ps through "
                        "the ps-lite servers (DMLC_ROLE); ring, butterfly or binary-blocks with MPI's allreduce among "
                        "the workers started by mpiexec (no scheduler or servers)")
    p.add_argument("--max-iters", "--max-steps", type=argtypes.POSITIVE_INT,
                   help="stop after this many global iterations")
    p.add_argument("--max-time", type=argtypes.POSITIVE_FLOAT, help="stop after this many seconds of training")
    p.add_argument("--target-accuracy", type=argtypes.accuracy, help="stop once rank 0's test accuracy reaches this")
    p.add_argument("--node-name", help="this machine's log folder name (default: the host name)")
    p.add_argument("--slowdown", type=argtypes.slowdowns, default=1.0,
                   help="emulate a device F times slower: pad each local step to F x its typical compute time "
                        "(-m hogwild: one F, or one per worker process, e.g. 1,1,4)")
    p.add_argument("--device-share", type=argtypes.POSITIVE_FLOAT,
                   help="emulate a device of this many cores: the worker runs in a cgroup of its own whose CPU quota "
                        "is the share, divided by --slowdown (which then sleeps no more); root only "
                        "(training/devices/cpu_quota.py; launch.py gives every worker one)")
    p.add_argument("--augment", choices=AUGMENTATIONS,
                   help="augmentation of the training batches: crop, random 32 px crops of the image padded by 4 and "
                        "left-right flips; resized-crop, d2l's (Gluon's transforms: resized to 40 px, a random "
                        "square of 64-100%% of it back to 32 px, flips); none (default crop for cifar10, else none)")
    p.add_argument("--eval-batch-size", "--test-batch-size", type=argtypes.POSITIVE_INT,
                   help="test samples per forward pass of an evaluation (default 500; 50 for networks of 224 px "
                        "input and more)")
    p.add_argument("--digest-weights", action="store_true",
                   help="record a fingerprint of the weights after each aggregation (to verify that all "
                        "workers hold identical weights; costs a copy of the model per round)")


def default(name):
    """The default of the flag whose value lands in args.<name>."""
    return _defaults(tuple(modes.MODES.values()))[name]


@functools.lru_cache(maxsize=4)
def _defaults(catalog):
    """Every flag's default, once per catalog (the launcher asks for some for every run it plans)."""
    parser = build_parser()
    return {action.dest: action.default for action in parser._actions}


def add_checkpoint_flags(p):
    p.add_argument("--train-dir", help="rank 0 saves the global model here every --save-freq global iterations; "
                                       f"-m {EVALUATE_MODE} evaluates what it finds there")
    p.add_argument("--save-freq", type=argtypes.NON_NEGATIVE_INT, default=100,
                   help="global iterations between checkpoints (0: only the last one)")
    p.add_argument("--keep-checkpoints", type=argtypes.POSITIVE_INT, metavar="K",
                   help="keep the newest K checkpoints, deleting each older one once a newer one is whole "
                        "(default: keep every checkpoint)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the latest checkpoint in --train-dir: its global step, weights and "
                        "local optimizer state")
    p.add_argument("--resume-if-saved", action="store_true",
                   help="--resume where --train-dir holds a checkpoint, else start afresh: for a loop that starts a "
                        "failed process again (docs/failures.md)")
    p.add_argument("--eval-timeout", type=argtypes.POSITIVE_FLOAT, default=300.0,
                   help=f"-m {EVALUATE_MODE}: stop after this many seconds without a new checkpoint")
    p.add_argument("--snapshot-seconds", type=argtypes.POSITIVE_FLOAT,
                   help="with --snapshot-dir: instead of evaluating in its loop (-e), worker 0 hands a copy of the "
                        "model to the evaluator process every this many seconds of training and at the end "
                        "(training/snapshots.py; what launch.py does)")
    p.add_argument("--snapshot-dir", help="with --snapshot-seconds: the folder the snapshots go to; "
                                          f"-m {EVALUATE_MODE} --train-dir reads it")
    p.add_argument("--evaluator-beside", action="store_true",
                   help="with --snapshot-dir: the worker that snapshots starts the evaluator process on its own "
                        "machine (lowest CPU priority, one core, its -ld) and waits for it to test the final "
                        "snapshot before it exits (what launch.py --tracker does where the snapshots stay on that host)")


# The older way to pick a variant, still accepted: -m async -dcasgd 1 is -m dcasgd (as in the original scripts), and
# -m zeno --zeno-flavour async is -m zeno-async. (flag, its field in args, the value, the mode it refines, the variant)
MODE_ALIASES = (("-dcasgd", "use_dcasgd", 1, "async", "dcasgd"),
                ("--zeno-flavour", "zeno_flavour", "async", "zeno", "zeno-async"))


def resolve_mode_aliases(parser, args):
    for flag, dest, value, base, variant in MODE_ALIASES:
        if getattr(args, dest) != value:
            continue
        if args.mode not in (base, variant):
            parser.error(f"{flag} {value} belongs to -m {base} (it means -m {variant}), not -m {args.mode}")
        args.mode = variant


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


def refuse_unread_settings(parser, args):
    """Settings of one schedule or one process kind given where nothing reads them."""
    if args.lr_schedule != "step" and (args.lr_steps or args.lr_factor != default("lr_factor")):
        parser.error(f"--lr-steps and --lr-factor set --lr-schedule step's drops; the schedule is {args.lr_schedule}")
    if args.mode != EVALUATE_MODE and args.eval_timeout != parser.get_default("eval_timeout"):
        parser.error(f"--eval-timeout is the evaluator's (-m {EVALUATE_MODE}), not -m {args.mode}'s")


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


def resolve_momentum(parser, args):
    """--momentum is SGD's: Adam and Adagrad refuse it; its default follows --local-optimizer."""
    if args.local_optimizer == "adam" and args.momentum is not None:
        parser.error("--momentum is SGD's; --local-optimizer adam keeps its own moments")
    if args.server_optimizer == "adagrad" and args.momentum is not None:
        parser.error("--momentum is SGD's; --server-optimizer adagrad scales each weight's step by its own history")
    if args.local_optimizer == "momentum" and args.momentum == 0:
        parser.error("--local-optimizer momentum needs --momentum > 0 (or leave it out: "
                     f"{MOMENTUM_OPTIMIZER_DEFAULT})")
    if args.momentum is None:
        args.momentum = MOMENTUM_OPTIMIZER_DEFAULT if args.local_optimizer == "momentum" else 0.0


def search_space(mode):
    """{args name: (its flag, its Range)}: what a search (launch.py tune) tries for `mode`, every flag its scheme reads
    that declares a range; -l is left out where the scheme's steps run at -ll (its workers' local steps)."""
    fields = {f.name: f for f in flag_fields(modes.MODES[mode].options) if f.metadata.get("search")}
    if "local_lr" in fields:
        fields.pop("learning_rate", None)
    return {name: (_long_flag(f.metadata["flags"]), f.metadata["search"]) for name, f in fields.items()}


def _long_flag(flags):
    return next((f for f in flags if f.startswith("--")), flags[0])


def reads(mode, name):
    """Whether `mode`'s scheme reads the flag whose value lands in args.<name>."""
    flag = scheme_flags().get(name)
    return flag is None or mode in flag.readers


def unread_flag(argv, chosen):
    """(the argument, its SchemeFlag) of the first scheme flag in `argv` (`--tiers 2` or `--tiers=2`) that no mode of
    `chosen` reads; None where each is read."""
    for arg in argv:
        for flag in scheme_flags().values():
            meta = flag.field.metadata
            if arg.split("=", 1)[0] in meta["flags"] and not meta["any_mode"] and not set(flag.readers) & set(chosen):
                return arg, flag
    return None


def refuse_other_modes_flags(parser, args, argv):
    """A scheme's flag given, or changed from its default, for a mode whose scheme does not read it (given at its
    default it would be ignored as silently)."""
    changed = [flag for name, flag in scheme_flags().items() if not flag.field.metadata["any_mode"]
               and args.mode not in flag.readers and getattr(args, name) != flag.field.default]
    given = unread_flag(argv, [args.mode])
    for flag in changed + ([given[1]] if given else []):
        parser.error(f"{flag.name} belongs to -m {', '.join(flag.readers)}, not -m {args.mode}")


def flags_for_mode(argv, mode):
    """argv without the scheme flags (and their values) that `mode` does not read: the launcher hands the same
    extra arguments to every mode of an experiment."""
    others = [flag.field.metadata for flag in scheme_flags().values()
              if mode not in flag.readers and not flag.field.metadata["any_mode"]]
    foreign = {spelling for meta in others for spelling in meta["flags"]}
    switches = {spelling for meta in others if meta["switch"] for spelling in meta["flags"]}
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in foreign:
            skip = arg not in switches  # a switch (--overlap) has no value to drop with it
        elif arg.split("=", 1)[0] not in foreign:
            kept.append(arg)
    return kept


def check_normalised_averaging(parser, args):
    """--normalised-averaging counts SGD steps; --normalisation-power is a power of that count."""
    if args.normalised_averaging and args.local_optimizer == "adam":
        parser.error("--normalised-averaging divides a delta by its SGD steps; Adam's steps have no such norm")
    if args.normalisation_power != 1.0 and not args.normalised_averaging:
        parser.error("--normalisation-power is a power of --normalised-averaging's a_i: give both")


def resolve_mode(parser, args):
    """The values the mode's scheme fixes (not flags of that mode: DiLoCo's outer optimizer, TiFL's plain average)
    replace the flags' defaults, so that what a run records is what it ran; then the scheme fills the defaults that
    depend on other flags."""
    if args.mode in modes.MODES:
        options = modes.MODES[args.mode].options
        for fixed_field in dataclasses.fields(options):
            if fixed_field.metadata.get("fixed") and hasattr(args, fixed_field.name):
                setattr(args, fixed_field.name, fixed_field.default)
        try:
            options.resolve(args)
        except OptionError as err:
            parser.error(str(err))


def parse_args(argv=None):
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    asked = asked_for_help(argv)
    if asked is not False:
        print(help_text(asked), end="")
        sys.exit(0)
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_mode_aliases(parser, args)
    refuse_other_modes_flags(parser, args, argv)
    resolve_recipe(parser, args)
    refuse_unread_settings(parser, args)
    resolve_momentum(parser, args)
    resolve_slowdown(parser, args)
    resolve_mode(parser, args)
    check_normalised_averaging(parser, args)  # after the mode's scheme, whose --drift-correction sets both flags
    if args.node_name is None:
        args.node_name = socket.gethostname()
    return args
