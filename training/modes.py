"""The mode catalog: every -m mode of a training job, in the figures' order.

config, main, launch, summary, drawer and the benchmark all read their modes from here. The catalog knows what
only it knows: a mode's names, its colour and where its scheme is; the rest (its flags, its description, whether it
talks to the state server, runs a validator or aggregates synchronously, its checks) the scheme class declares,
and training/mode_table.py keeps what they declare in a file, so that a process imports only the scheme it runs.
Adding a mode is one entry in MODES plus one scheme module (training/schemes/ or anywhere importable) whose class has
`name` equal to the mode's name. A mode kept outside the project is one module that defines MODE (a Mode) and its
scheme, named in ESYNC_MODE_MODULES (import paths, comma-separated) in the environment of every process that reads
the catalog. Importing the catalog imports no scheme of the project's own; a scheme module imports MXNet only when it
first uses it (training/lazy.py).
"""
import functools
import importlib
import sys
from dataclasses import dataclass

from coordination import plugins
from training import mode_table


@dataclass(frozen=True)
class Mode:
    name: str                  # the -m value and the log folder name
    display: str               # the algorithm's name in figures and tables
    summary_name: str          # the summary file: <summary_name>[-Attack][-Non-IID].json
    colour: str                # matplotlib colour of its curves and bars
    scheme: str                # "module:Class" of its scheme

    @property
    def scheme_class(self):
        module, _, cls = self.scheme.partition(":")
        return getattr(importlib.import_module(module), cls)

    @property
    def options(self):
        return self.scheme_class.Options

    @property
    def declared(self):
        """What its scheme declares, read without importing every scheme (training/mode_table.py)."""
        found = declarations().get(self.name)
        return found if found is not None and MODES.get(self.name) == self else mode_table.declared(self)

    @property
    def description(self):
        return self.declared.description

    @property
    def state_server(self):
        """Its workers talk to the state server (SimpleStateServer)."""
        return self.declared.state_server

    @property
    def validator(self):
        """One more worker, started with --validator, scores the others' updates."""
        return self.declared.validator

    @property
    def cluster(self):
        """False: one process trains alone, no ps-lite job."""
        return self.declared.cluster

    @property
    def synchronous(self):
        """Each round ends in one aggregation of every worker, over any --collective."""
        return self.declared.synchronous

    def check(self, args, num_workers):
        """ModeError (training/options.py) when the options do not suit a job of `num_workers` workers."""
        self.options.check(args, num_workers)


MODES = {mode.name: mode for mode in (
    Mode("esync", "ESync", "ESync", "tab:red", "training.schemes.esync:ESync"),
    Mode("sync", "Sync", "Sync", "tab:blue", "training.schemes.sync:Sync"),
    Mode("async", "Async", "Async", "tab:green", "training.schemes.asynchronous:Async"),
    Mode("dcasgd", "DCASGD", "DCASGD", "tab:orange", "training.schemes.asynchronous:DCASGD"),
    Mode("dcasgd-paper", "DC-ASGD (per worker)", "DCASGD-PerWorker", "sienna",
         "training.schemes.asynchronous:DCASGDPerWorker"),
    Mode("downpour", "Downpour", "Downpour", "darkkhaki", "training.schemes.downpour:Downpour"),
    Mode("nbsync", "NBSSGD", "NBSSGD", "tab:purple", "training.schemes.nbsync:NonBlockingSync"),
    Mode("backup", "SSGD + backup", "Backup", "navy", "training.schemes.backup:BackupSync"),
    Mode("lb-bsp", "LB-BSP", "LB-BSP", "teal", "training.schemes.balanced:BalancedSync"),
    Mode("zeno", "Zeno", "Zeno", "tab:brown", "training.schemes.zeno:ZenoSync"),
    Mode("zeno-async", "Zeno++", "ZenoAsync", "tab:pink", "training.schemes.zeno:ZenoAsync"),
    Mode("fedavg", "FedAvg", "FedAvg", "tab:olive", "training.schemes.fedavg:FedAvg"),
    Mode("diloco", "DiLoCo", "DiLoCo", "darkcyan", "training.schemes.diloco:DiLoCo"),
    Mode("fedasync", "FedAsync", "FedAsync", "tab:cyan", "training.schemes.fedasync:FedAsync"),
    Mode("fedbuff", "FedBuff", "FedBuff", "cadetblue", "training.schemes.fedbuff:FedBuff"),
    Mode("async-local-sgd", "Async local SGD", "AsyncLocalSGD", "yellowgreen",
         "training.schemes.async_local_sgd:AsyncLocalSGD"),
    Mode("tifl", "TiFL", "TiFL", "goldenrod", "training.schemes.tifl:TiFL"),
    Mode("feddrop", "FedDrop", "FedDrop", "mediumvioletred", "training.schemes.feddrop:FedDrop"),
    Mode("hogwild", "Hogwild!", "Hogwild", "indigo", "training.schemes.hogwild:Hogwild"),
    Mode("local", "Standalone", "Standalone", "tab:gray", "training.schemes.local:Local"),
    Mode("validation-only", "Validation only", "ValidationOnly", "slategray",
         "training.schemes.local:ValidationOnly"),
)}
EXTRA_MODULES_VARIABLE = plugins.MODE_MODULES
PROJECT_SCHEMES = "training.schemes."


def with_extra_modes(catalog):
    """The catalog and the modes of the modules ESYNC_MODE_MODULES names; a name the catalog has ends the process
    in one line, before it joins any job."""
    catalog = dict(catalog)
    for module in plugins.named_modules(EXTRA_MODULES_VARIABLE, "MODE"):
        if module.MODE.name in catalog:
            sys.exit(f"{EXTRA_MODULES_VARIABLE}: {module.__name__} defines the mode {module.MODE.name!r}, which "
                     "the catalog has")
        catalog[module.MODE.name] = module.MODE
    return catalog


MODES = with_extra_modes(MODES)
STANDALONE = "local"  # the sequential baseline: the figures' dotted line, the paper's Table 1
ESYNC = "esync"       # the paper's algorithm: Table 1's claims and Figure 5's device speeds are about it
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
    return MODES[name].scheme_class


def declarations():
    """{mode name: mode_table.Declarations} of the catalog."""
    return _declarations(tuple(MODES.values()))


@functools.lru_cache(maxsize=4)
def _declarations(catalog):
    # stored only where every scheme and rule is the project's own: whether a module elsewhere changed is not watched
    own = all(mode.scheme.startswith(PROJECT_SCHEMES) for mode in catalog) and not plugins.any_named()
    return mode_table.table(catalog, stored=own)
