"""The search's side of Optuna: a sampler of each study's own (quasi-random points first, TPE after them), a pruner
between a trial's seeds, and the studies' storage (launch.py tune, launcher/studies/tune.py)."""
import dataclasses
import hashlib

from analysis import scheme_names
from training import config, modes
from training.checks import UsageError
from training.options import LOCAL_OPTIMIZERS, Choice

QUASI_RANDOM_TRIALS = 8  # a power of two: the Sobol points before TPE models the objective
WILCOXON_SEEDS = 5      # from this many seeds a trial, the Wilcoxon pruner: asked before the last seed, it sees one
                        # difference fewer, and on three it cannot reach p < 0.125
STORE_FILE = "studies.db"  # the studies' SQLite file in a search's log folder, unless --storage names another
PERIOD = "sync_interval"  # local steps between aggregations
OPTIMIZER = "local_optimizer"  # the optimizer of the steps a worker takes on its own
OPTIMIZER_SEARCHED = "|local optimizer searched"  # in the name of a study whose space holds it: apart from the others


def with_optimizer(space, mode):
    """The space with the local optimizer (sgd, momentum, adam) where `mode` takes one: a scheme that brings its own
    (DiLoCo's Adam) keeps it."""
    flag = config.scheme_flags().get(OPTIMIZER)
    if flag is None or mode not in flag.readers:
        return space
    return {**space, OPTIMIZER: ("--local-optimizer", Choice(LOCAL_OPTIMIZERS))}


def check_optimizer_searched(schemes):
    """--search-optimizer where no scheme steps with --local-optimizer would search nothing more: UsageError."""
    if all(OPTIMIZER not in with_optimizer({}, scheme_names.mode_of(scheme)[0]) for scheme in schemes):
        raise UsageError(f"--search-optimizer: no scheme of --schemes {','.join(schemes)} steps with "
                         "--local-optimizer (DiLoCo keeps its Adam, the server-stepped schemes their SGD)")


SEARCH_OPTIONS = ("trials", "until", "trial_seeds", "seed", "storage", "search_optimizer")


def check_nothing_searched(ns, defaults):
    """--values-of searches nothing: a search's option beside it would be ignored."""
    given = [name for name in SEARCH_OPTIONS if getattr(ns, name) != getattr(defaults, name)]
    if given:
        raise UsageError(f"--{given[0].replace('_', '-')}: --values-of {ns.values_of} searches nothing")


def period_limits(space, mode, devices, budget, charges):
    """The space with the period's range free to widen past its top up to the longest period whose first aggregation
    ends within the `budget`: the budget over a step of the device that times a round (the slowest of `devices` for
    a synchronous scheme, the fastest otherwise), as the clock's `charges` declare it. Longer periods are all one
    point, no aggregation at all; below the range's top that bound widens nothing. In real time (no charges) a step's
    time is not declared and the range keeps its own limits."""
    if PERIOD not in space or not charges:
        return space
    flag, rng = space[PERIOD]
    factors = [float(f) for f in devices.split(",")]
    slowdown = max(factors) if modes.MODES[mode].synchronous else min(factors)
    longest = int(budget / (charges.step_seconds * slowdown + charges.step_overhead))
    if longest <= rng.high:
        return space
    return {**space, PERIOD: (flag, dataclasses.replace(rng, limits=(rng.low, longest)))}


def study_seed(cell, scheme, seed):
    """The seed of one study's sampler: no two studies (cell x scheme) draw the same values."""
    return int.from_bytes(hashlib.sha256(f"{cell}|{scheme}|{seed}".encode()).digest()[:4], "big")


def quasi_random_sampler(seed, names, trials=QUASI_RANDOM_TRIALS):
    """An Optuna sampler that gives trial k < `trials` the k-th point of a scrambled Sobol sequence over the
    parameters `names` (in order), and TPE (multivariate, seeded by seed + k) every later trial."""
    import numpy as np
    import optuna
    from scipy.stats import qmc

    points = qmc.Sobol(max(1, len(names)), scramble=True, seed=seed).random(trials) if names else np.zeros((0, 0))

    class QuasiRandomThenTPE(optuna.samplers.BaseSampler):
        def model(self, trial):
            return optuna.samplers.TPESampler(seed=seed + trial.number, multivariate=True, n_startup_trials=0)

        def infer_relative_search_space(self, study, trial):
            if trial.number < trials:
                return {}
            return self.model(trial).infer_relative_search_space(study, trial)

        def sample_relative(self, study, trial, search_space):
            if trial.number < trials or not search_space:
                return {}
            return self.model(trial).sample_relative(study, trial, search_space)

        def sample_independent(self, study, trial, name, distribution):
            if trial.number < trials and name in names:
                return from_unit(points[trial.number][names.index(name)], distribution)
            return self.model(trial).sample_independent(study, trial, name, distribution)

    return QuasiRandomThenTPE()


def from_unit(u, distribution):
    """The value at `u` (0 to 1) of an Optuna distribution: on its log scale where it has one."""
    import math

    import optuna

    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        choices = distribution.choices
        return choices[min(int(u * len(choices)), len(choices) - 1)]
    low, high = distribution.low, distribution.high
    value = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if distribution.log else \
        low + u * (high - low)
    if isinstance(distribution, optuna.distributions.IntDistribution):
        return min(high, max(low, int(round(value))))
    return min(high, max(low, value))


def reached_every_seed(trial):
    return bool(results := trial.user_attrs.get("results") or []) and all(r["time"] is not None for r in results)


def seeds_pruner(seeds):
    """Stops a trial between seeds where a seed missed the target and the study holds a complete trial that reached
    it on every seed; from WILCOXON_SEEDS seeds up, also where Optuna's Wilcoxon pruner finds it behind the best."""
    import optuna

    wilcoxon = optuna.pruners.WilcoxonPruner(p_threshold=0.1) if seeds >= WILCOXON_SEEDS else None

    class SeedsPruner(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            results = trial.user_attrs.get("results") or []
            missed = any(r["time"] is None for r in results)
            if missed and any(reached_every_seed(t) for t in study.get_trials(
                    deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))):
                return True
            return bool(wilcoxon and wilcoxon.prune(study, trial))

    return SeedsPruner()


def not_an_interrupt(record):
    """False for Optuna's report of a trial that Ctrl-C stopped (a traceback, where tune says it in one line)."""
    return not (record.exc_info and record.exc_info[0] is KeyboardInterrupt)


def open_storage(url):
    """Optuna's storage at `url`; UsageError (one line) where it cannot be opened."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the trials' own lines say what a study does
    for handler in optuna.logging.get_logger("optuna").handlers:  # its children's records pass through these
        handler.addFilter(not_an_interrupt)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # the heartbeat's, Wilcoxon's
    try:
        return optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=120)
    except Exception as error:  # SQLAlchemy's and Optuna's many ways to refuse a URL
        raise UsageError(f"--storage {url}: cannot open it: {str(error).splitlines()[0]}") from None


def ended(study):
    """The study's trials that ran to their end: complete, or pruned between seeds."""
    return ended_trials(study.trials)


def ended_trials(trials):
    import optuna

    return [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]


def ended_before(study):
    """'N trials ended before', and how many others an interruption or a failure left unended (run again)."""
    done = len(ended(study))
    others = len(study.trials) - done
    return f"{done} trials ended before" + (f" ({others} more interrupted or failed)" if others else "")
