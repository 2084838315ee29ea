"""The mode catalog: every -m mode of a training job, in the figures' order.

config, main, launch, summary, drawer and the benchmark all read their modes from here. Adding a mode is one
entry in MODES plus one scheme file under training/schemes/ whose class has `name` equal to the mode's name.
Nothing here imports MXNet: the scheme class is imported only when a job runs (scheme_class).
"""
import importlib
import os
from dataclasses import dataclass
from typing import Callable, Optional

import models


class ModeError(ValueError):
    """A job's options do not suit its mode; the message is one line."""


@dataclass(frozen=True)
class Mode:
    name: str                  # the -m value and the log folder name
    display: str               # the algorithm's name in figures and tables
    summary_name: str          # the summary file: <summary_name>[-Attack][-Non-IID].json
    colour: str                # matplotlib colour of its curves and bars
    scheme: str                # "module:Class" of its scheme
    description: str
    state_server: bool = False  # its workers talk to the state server (SimpleStateServer)
    validator: bool = False     # one more worker, started with --validator, scores the others' updates
    cluster: bool = True        # False: one process trains alone, no ps-lite job
    synchronous: bool = False   # each round ends in one aggregation of every worker, over any --collective
    check: Optional[Callable] = None  # check(args, num_workers) raises ModeError when the options do not fit


def check_validator_job(args, num_workers):
    if num_workers < 2:
        raise ModeError(f"-m {args.mode} needs DMLC_NUM_WORKER >= 2: the training workers and the --validator "
                        "processes")
    if args.validation_size < args.batch_size:
        raise ModeError(f"--validation-size {args.validation_size} is smaller than the batch size {args.batch_size}")


def check_one_server(args, num_workers):
    if os.environ.get("DMLC_NUM_SERVER", "1") != "1":
        raise ModeError(f"-m {args.mode} needs each worker's whole push on one server: set DMLC_NUM_SERVER=1")


def check_constant_lr(args):
    """The rules written for the one server (Zeno++, the paper's DC-ASGD) keep their learning rate."""
    if args.lr_schedule != "constant":
        raise ModeError(f"-m {args.mode}'s rule on the server keeps -l constant: leave out --lr-schedule "
                        f"{args.lr_schedule}")


def check_zeno_async(args, num_workers):
    check_validator_job(args, num_workers)
    check_one_server(args, num_workers)
    check_constant_lr(args)


def check_dcasgd_per_worker(args, num_workers):
    check_one_server(args, num_workers)
    check_constant_lr(args)


def check_nbsync(args, num_workers):
    if args.batch_size % args.mini_batches:
        raise ModeError(f"-b {args.batch_size} is not a multiple of --mini-batches {args.mini_batches}")


def check_backup(args, num_workers):
    if args.backup_workers >= num_workers:
        raise ModeError(f"--backup-workers {args.backup_workers} leaves no gradient to apply: the job has "
                        f"{num_workers} workers (DMLC_NUM_WORKER); give fewer than that")


def check_balanced(args, num_workers):
    if args.augment != "none":
        raise ModeError(f"-m lb-bsp changes a worker's batch size as it plans; --augment {args.augment} prepares "
                        "batches ahead at one size: add --augment none")


def check_tifl(args, num_workers):
    if args.tiers > num_workers:
        raise ModeError(f"--tiers {args.tiers} is more than the {num_workers} workers (DMLC_NUM_WORKER): a tier "
                        "needs one")


def check_feddrop(args, num_workers):
    if args.network not in models.WIDTHS:
        raise ModeError(f"-m feddrop builds sub-models of chains of Conv2D and Dense layers "
                        f"({', '.join(models.WIDTHS)}), not of {args.network}")
    if args.drop_workers >= num_workers:
        raise ModeError(f"--drop-workers {args.drop_workers} leaves no worker with the full model: the job has "
                        f"{num_workers} workers (DMLC_NUM_WORKER)")


MODES = {mode.name: mode for mode in (
    Mode("esync", "ESync", "ESync", "tab:red", "training.schemes.esync:ESync",
         "ESync, local steps until the state server says ready, then delta aggregation (dist_sync)",
         state_server=True, synchronous=True),
    Mode("sync", "Sync", "Sync", "tab:blue", "training.schemes.sync:Sync",
         "SSGD, one step per round: push gradients, pull their sum, apply lr x mean (dist_sync)",
         synchronous=True),
    Mode("async", "Async", "Async", "tab:green", "training.schemes.asynchronous:Async",
         "ASGD, one step per round: push the gradient, the server applies SGD, pull the newest weights (dist_async)"),
    Mode("dcasgd", "DCASGD", "DCASGD", "tab:orange", "training.schemes.asynchronous:DCASGD",
         "DC-ASGD, as async with MXNet's delay-compensated DCASGD on the server (dist_async)"),
    Mode("dcasgd-paper", "DC-ASGD (per worker)", "DCASGD-PerWorker", "sienna",
         "training.schemes.asynchronous:DCASGDPerWorker",
         "DC-ASGD as its paper defines it, the one server keeping a backup of the weights per worker (dist_async)",
         check=check_dcasgd_per_worker),
    Mode("downpour", "Downpour", "Downpour", "darkkhaki", "training.schemes.downpour:Downpour",
         "Downpour SGD, local SGD steps, the summed gradients pushed every --n-push steps and the weights fetched "
         "every --n-fetch (dist_async)"),
    Mode("nbsync", "NBSSGD", "NBSSGD", "tab:purple", "training.schemes.nbsync:NonBlockingSync",
         "NBSSGD, parts of a batch until everyone has arrived, then one weighted gradient sum (dist_sync)",
         state_server=True, synchronous=True, check=check_nbsync),
    Mode("backup", "SSGD + backup", "Backup", "navy", "training.schemes.backup:BackupSync",
         "SSGD with backup workers, each step the mean of the first workers - --backup-workers gradients, the late "
         "ones dropped (dist_sync)", state_server=True, synchronous=True, check=check_backup),
    Mode("lb-bsp", "LB-BSP", "LB-BSP", "teal", "training.schemes.balanced:BalancedSync",
         "SSGD with load-balanced batches, each worker's sized to its measured speed, the global batch as SSGD's "
         "(dist_sync)", synchronous=True, check=check_balanced),
    Mode("zeno", "Zeno", "Zeno", "tab:brown", "training.schemes.zeno:ZenoSync",
         "ZenoPS, local-step deltas scored per layer against a trusted validator's (dist_sync)",
         validator=True, synchronous=True, check=check_validator_job),
    Mode("zeno-async", "Zeno++", "ZenoAsync", "tab:pink", "training.schemes.zeno:ZenoAsync",
         "Zeno++, the one server scores each gradient against the validator's before applying it (dist_async)",
         validator=True, check=check_zeno_async),
    Mode("fedavg", "FedAvg", "FedAvg", "tab:olive", "training.schemes.fedavg:FedAvg",
         "FedAvg, --sync-interval local steps, then the synchronous average of the models (dist_sync)",
         synchronous=True),
    Mode("fedasync", "FedAsync", "FedAsync", "tab:cyan", "training.schemes.fedasync:FedAsync",
         "FedAsync, --sync-interval local steps, then the one server mixes the model in by its staleness "
         "(dist_async)", check=check_one_server),
    Mode("tifl", "TiFL", "TiFL", "goldenrod", "training.schemes.tifl:TiFL",
         "TiFL, the workers in tiers by step time; each round one tier, chosen by its accuracy, runs --sync-interval "
         "local steps and its models are averaged, the others sit it out (dist_sync)",
         synchronous=True, check=check_tifl),
    Mode("feddrop", "FedDrop", "FedDrop", "mediumvioletred", "training.schemes.feddrop:FedDrop",
         "FedDrop, FedAvg whose --drop-workers slowest train sub-models with --drop-rate of each hidden layer's units "
         "left out, mapped back onto the full model (dist_sync)", synchronous=True, check=check_feddrop),
    Mode("hogwild", "Hogwild!", "Hogwild", "indigo", "training.schemes.hogwild:Hogwild",
         "Hogwild!, --hogwild-workers processes on this machine update one shared copy of the weights without "
         "locks, no cluster", cluster=False),
    Mode("local", "Standalone", "Standalone", "tab:gray", "training.schemes.local:Local",
         "standalone, one device and no cluster: the baseline of the figures", cluster=False),
    Mode("validation-only", "Validation only", "ValidationOnly", "slategray", "training.schemes.local:ValidationOnly",
         "ZenoPS's baseline: SGD on the --validation-size samples a validator holds out, alone, no cluster",
         cluster=False),
)}
STANDALONE = "local"  # the sequential baseline: the figures' dotted line, the paper's Table 1
HOGWILD = "hogwild"   # one command starts its worker processes (training/hogwild.py)


def names():
    return tuple(MODES)


def cluster_names():
    """The modes that run as a ps-lite job (what launch.py can run)."""
    return tuple(name for name, mode in MODES.items() if mode.cluster)


def synchronous_names():
    """The modes whose workers can aggregate over any --collective."""
    return tuple(name for name, mode in MODES.items() if mode.synchronous)


def scheme_class(name):
    module, _, cls = MODES[name].scheme.partition(":")
    return getattr(importlib.import_module(module), cls)
