"""`launch.py tune`: every scheme at its best in one cell, by a declared search (Optuna) over several seeds a trial.

    python launch.py tune --schemes sync,async,esync,esync-apply,local,fast-only -n lenet --dataset fashion-mnist \\
        --profile 1,1,1,1,20,20 --trials 8 --trial-seeds 3 -ld logs/tune

For one cell (network, data set, profile, links, split) and each scheme (a synchronous one also @<collective>: its
values for the map's runs over that collective), one Optuna study over the flags the scheme declares a search range
for (training/options.py's Range, config.search_space). Each study's sampler is seeded from the cell, the scheme and
--seed; its first QUASI_RANDOM_TRIALS trials are the points of a scrambled Sobol sequence (trial k takes point k, so
machines sharing one --storage never run the same one), TPE (multivariate) after them.

A trial runs its values on --trial-seeds seeds (--seed, --seed + 1, ...: apart from the seeds the reported repeats
use), training on the training set less --holdout samples, which the evaluator tests instead of the test set. A
seed's score is the seconds its model took to reach --target; a seed that missed it (out of time, or diverged:
training/faults/divergence.py) scores --max-time x (1 + PENALTY x the accuracy it lacked). The trial's objective is
the median of its seeds' scores. Between seeds, a trial that missed on a seed is stopped once the study holds one that
reached the target on all of its seeds, and from four seeds up Optuna's Wilcoxon pruner stops a trial its seeds so far
say is behind the best. The chosen values of a study are its best trial that reached the target on every seed
(robust); where none did, its best trial, marked so. Under --until N, chosen values with one in the outer tenth of
its range search N more trials over that range widened past the edge (Range.widened), at most MAX_WIDENINGS times;
the chosen values are then the best of every stage. On a charged clock a period of local steps (--sync-interval)
widens up to the longest period whose first aggregation ends within the budget (period_limits). --search-optimizer
searches --local-optimizer too wherever a scheme takes one, in studies of their own.

The studies live in an SQLite file under the log dir (or --storage URL): the same command runs --trials more trials
of each study, none repeated, or with --until N only the trials a study lacks of N; a trial whose process was killed
is marked failed. Writes <log-dir>/tuned.json (tuned.py), tuned.md and a figure per scheme of the objective against
each hyperparameter. --values-of CELL searches nothing: the cell takes a neighbour's values, and tuned.json says so.
"""
import contextlib
import logging
import os
import shlex
import statistics
import sys
import time

from analysis import tuned
from analysis import scheme_names
from launcher import backends, checks, experiment, runner, workers
from launcher.studies import map_schemes, parallel
from launcher.studies.search import (OPTIMIZER, OPTIMIZER_SEARCHED, QUASI_RANDOM_TRIALS, STORE_FILE,
                                     check_nothing_searched, check_optimizer_searched, ended, ended_before,
                                     ended_trials, open_storage, period_limits, quasi_random_sampler,
                                     reached_every_seed, seeds_pruner, study_seed, with_optimizer)
from training import config, modes
from training.checks import OneLineErrorParser, UsageError
from training.faults.failures import EXIT_INTERRUPTED, EXIT_USAGE
from training.files import write_text
from training.options import EDGE_SHARE

FAST_ONLY = scheme_names.FAST_ONLY
DEFAULT_SCHEMES = "sync,async,esync,esync-apply,local,fast-only"
PENALTY = 10.0          # a missed seed scores the budget x (1 + PENALTY x the accuracy it lacked)
TRIAL_SEEDS = 3         # seeds a trial runs its values on
BEST_FEW = 3            # the best trials whose spread tuned.json reports
MAX_WIDENINGS = 2       # searches again over a widened range, at most, after a chosen value at its range's edge
RATE_FLAGS = ("learning_rate", "local_lr")  # the step's rate, whose largest value that reached the target is given


# ----------------------------------------------------------------------------------------------
# The command line


def build_parser():
    p = OneLineErrorParser(prog="launch.py tune", description=__doc__.splitlines()[0])
    p.add_argument("--schemes", default=DEFAULT_SCHEMES,
                   help=f"cluster modes, esync-<policy>, local, {FAST_ONLY} and {scheme_names.FAST}<scheme> "
                        f"(default {DEFAULT_SCHEMES})")
    p.add_argument("-n", "--network", default="lenet")
    p.add_argument("--dataset", default="fashion-mnist", choices=config.DATASETS)
    p.add_argument("-dd", "--data-dir", help="folder holding the dataset (default: the first that holds it)")
    p.add_argument("--profile", default="1,1,1,1,20,20", help="the devices' slowdowns (the paper's by default)")
    p.add_argument("--link", default=tuned.LOOPBACK,
                   help="loopback (default), or R: shaped links at R x the fast step (launch.py --comm-ratio R)")
    p.add_argument("--non-iid", action="store_true", help="the split by class")
    p.add_argument("--target", type=float, default=0.8, help="the accuracy a run is timed to (default 0.8)")
    p.add_argument("--max-time", type=float, default=30.0, help="seconds of training a run at most (default 30)")
    p.add_argument("--trials", type=int, default=QUASI_RANDOM_TRIALS,
                   help=f"trials of each scheme's study this command runs (default {QUASI_RANDOM_TRIALS}, the "
                        "quasi-random ones; TPE after them; 0: only the report of what the studies hold)")
    p.add_argument("--until", type=int, metavar="N", help="in place of --trials: each study's trials up to N that ran "
                   "to their end (complete or pruned); the same command again runs only what a study lacks")
    p.add_argument("--trial-seeds", type=int, default=TRIAL_SEEDS,
                   help=f"seeds each trial runs its values on; its objective is their median (default {TRIAL_SEEDS})")
    p.add_argument("--holdout", type=int, default=5000,
                   help="training samples held out to validate on (default 5000)")
    p.add_argument("--seed", type=int, default=1000,
                   help="the trials' first seed; they run on seed, seed + 1, ... (default 1000, apart from the "
                        "repeats'); also seeds each study's sampler, with its cell and scheme")
    p.add_argument("--snapshot-seconds", type=float, default=experiment.DEFAULT_SNAPSHOT_SECONDS,
                   help="seconds of training between the evaluations a run is timed by")
    p.add_argument("--search-optimizer", action="store_true",
                   help="also search the local optimizer (--local-optimizer: sgd, momentum, adam) of each scheme that "
                        "takes one (one device, ESync, FedAvg, ...), as DiLoCo brings Adam: its own studies")
    p.add_argument("--storage", help="the studies' database, an SQLAlchemy URL (default: sqlite under the log dir)")
    p.add_argument("-ld", "--log-dir", "--logs", default=os.path.join("logs", "tune"))
    experiment.add_device_options(p)
    experiment.add_clock_options(p, jobs=True)
    p.add_argument("--max-restarts", type=int, default=0,
                   help="a trial whose process dies is started again from its newest checkpoint, up to N times")
    p.add_argument("--values-of", metavar="CELL", help="search nothing: this cell takes the values chosen in CELL of "
                   "the log dir's tuned.json (a neighbour's), recorded as reused from it")
    return p


def parse(argv):
    ns = build_parser().parse_args(argv)
    if ns.values_of:
        check_nothing_searched(ns, build_parser().parse_args([]))
    ns.schemes = [s.strip() for s in ns.schemes.split(",") if s.strip()]
    ns.log_dir = os.path.abspath(ns.log_dir)
    ns.storage = ns.storage or f"sqlite:///{os.path.join(ns.log_dir, STORE_FILE)}"
    for name in ("holdout", "max_time", "target", "trial_seeds"):
        if not getattr(ns, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    if ns.trials < 0:
        raise UsageError("--trials must be 0 (report what the studies hold) or more")
    if ns.until is not None and ns.until < 1:
        raise UsageError(f"--until {ns.until}: give the trials each study is to hold, 1 or more")
    check_cell(ns)
    parallel.check_jobs(ns.jobs, backends.of(ns))
    ns.cell = tuned.cell_key(ns.network, ns.dataset, ns.profile, ns.link, ns.non_iid)
    ns.seeds = [ns.seed + i for i in range(ns.trial_seeds)]
    ns.command = "python launch.py tune " + shlex.join(argv)
    for scheme in ns.schemes:
        first_run(ns, scheme)  # every scheme's run is one the launcher takes
    if ns.search_optimizer:
        check_optimizer_searched(ns.schemes)
    return ns



def check_cell(ns):
    """UsageError (one line) for a profile or links the launcher would not take."""
    ns.profile = ",".join(workers.parse_factors(ns.profile, "--profile"))
    if ns.link != tuned.LOOPBACK:
        try:
            ratio = float(ns.link)
        except ValueError:
            ratio = None
        if ratio is None or not 0 < ratio < float("inf"):
            raise UsageError(f"--link {ns.link!r}: give loopback or a communication ratio R > 0")


# ----------------------------------------------------------------------------------------------
# One trial


def scheme_run(scheme, profile):
    """(mode, the launcher's options, the workers' flags, the profile) of one scheme of the search."""
    devices = scheme_names.fastest_profile(profile) if scheme_names.on_fast_devices(scheme) else profile
    return (*map_schemes.parts(scheme), devices)


def run_of(ns, scheme, number, seed, values, stage=0):
    """The Experiment of trial `number` of a scheme's search `stage` (0, or a widening) at `values` ({args name:
    value}) on one seed."""
    mode, own, flags, profile = scheme_run(scheme, ns.profile)
    space = with_optimizer(config.search_space(mode), mode) if ns.search_optimizer else config.search_space(mode)
    flags = flags + [f"{space[name][0]}={space[name][1].text(value)}" for name, value in values.items()]
    links = {} if ns.link == tuned.LOOPBACK else {"comm_ratio": float(ns.link)}
    charges = backends.Charges.of(ns)
    if charges:  # the links charged, not shaped
        links.update(clock=ns.clock, **charges.options())
    elif links:
        links["hosts"] = "netns"
    options = experiment.options(
        modes=mode, network=ns.network, dataset=ns.dataset, data_dir=ns.data_dir, slowdown=profile,
        max_time=ns.max_time, target_accuracy=ns.target, seed=seed, holdout=ns.holdout,
        snapshot_seconds=ns.snapshot_seconds, non_iid=ns.non_iid, figures=False, progress_every=1000.0,
        device_share=ns.device_share, sleeping_slowdown=ns.sleeping_slowdown, max_restarts=ns.max_restarts,
        log_dir=os.path.join(trial_dir(ns, scheme, number, stage), f"seed-{seed}"), **links, **own)
    return experiment.build(options, flags)


def first_run(ns, scheme):
    """A run of the scheme at its defaults: the launcher's checks of its options, before any study starts."""
    collective = scheme_names.collective_of(scheme)[1]
    if collective == scheme_names.SHARDED:  # the map runs it at its scheme's values
        raise UsageError(f"--schemes {scheme}: @sharded runs at its scheme's values: tune the scheme")
    if scheme_names.mode_of(scheme)[0] not in modes.MODES:
        raise UsageError(f"--schemes: unknown scheme {scheme}")
    if collective:  # searched over its collective: the map runs it at these values (analysis/tuned.py, flags_for)
        map_schemes.check_collective(scheme, scheme_names.mode_of(scheme)[0])
    return run_of(ns, scheme, 0, ns.seeds[0], {})


def trial_dir(ns, scheme, number, stage=0):
    widening = [f"widened-{stage}"] if stage else []
    return os.path.join(ns.log_dir, cell_folder(ns.cell), scheme, *widening, f"trial-{number}")


def cell_folder(cell):
    return cell.replace("/", "_").replace(",", "-")


def seed_result(evaluations, target, max_time):
    """{time, best, diverged, score} of one seed's run from its evaluations: the training seconds at which it first
    reached `target` (its score), else None and a score of the budget x (1 + PENALTY x the accuracy it lacked)."""
    reached = next((e["time"] for e in evaluations if e["accuracy"] >= target), None)
    best = max((e["accuracy"] for e in evaluations), default=0.0)
    diverged = next((e["diverged"] for e in evaluations if e.get("diverged")), None)
    score = reached if reached is not None else max_time * (1.0 + PENALTY * max(0.0, target - best))
    return {"time": reached, "best": best, "diverged": diverged, "score": score}


def objective(ns, scheme, stage, space, trial, output):
    """Run one trial of a search stage over `space` on its seeds; the median of their scores (optuna.TrialPruned when
    pruned between seeds)."""
    import optuna

    values = {name: rng.suggest(trial, name) for name, (_, rng) in space.items()}
    said = ", ".join(f"{name}={space[name][1].text(value, 4)}" for name, value in values.items())
    trial.set_user_attr("seeds", ns.seeds)
    results = []
    for start in range(0, len(ns.seeds), ns.jobs):  # --jobs seeds at once, pruned between them
        results += run_seeds(ns, scheme, (trial.number, stage), ns.seeds[start:start + ns.jobs], values)
        trial.set_user_attr("results", results)
        step = len(results) - 1
        trial.report(results[-1]["score"], step)
        if step + 1 < len(ns.seeds) and trial.should_prune():
            print(f"[tune {scheme} trial {label(trial.number, stage)}] {said}: pruned after {step + 1} seed(s) "
                  f"({tuned.seeds_text(results, best=True)})", file=output, flush=True)
            raise optuna.TrialPruned()
    value = statistics.median(r["score"] for r in results)
    print(f"[tune {scheme} trial {label(trial.number, stage)}] {said}: {value:.1f} "
          f"({tuned.seeds_text(results, best=True)})", file=output, flush=True)
    return value


def label(number, stage):
    return f"{number}" if not stage else f"{number} of widening {stage}"


def run_seeds(ns, scheme, trial, seeds, values):
    """The launcher runs of a trial ((its number, its search stage)) on `seeds`, at once where there are several
    (--jobs); their seed_results. RuntimeError where a run failed."""
    from analysis.summary import run_evaluations

    mode, (number, stage) = scheme_run(scheme, ns.profile)[0], trial
    runs = [run_of(ns, scheme, number, seed, values, stage) for seed in seeds]
    codes, outputs = run_quietly(runs, f"tune {scheme}")
    for seed, run in zip(seeds, runs):
        if codes.get(run.log_dir) == EXIT_INTERRUPTED:
            raise KeyboardInterrupt
        if codes.get(run.log_dir) != 0:
            raise RuntimeError(f"trial {label(number, stage)} of {scheme} failed on seed {seed} "
                               f"(exit {codes.get(run.log_dir)}): {outputs[run.log_dir]}")
    return [{"seed": seed, **seed_result(run_evaluations(run.mode_folder(mode)), ns.target, ns.max_time)}
            for seed, run in zip(seeds, runs)]


def run_quietly(runs, prog):
    """({log dir: exit code}, {log dir: its output file}) of the runs, each one's output in a file of its own."""
    if len(runs) == 1:
        run = runs[0]
        os.makedirs(run.log_dir, exist_ok=True)
        with open(run.log_dir + ".out", "w") as out, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(out):
            return {run.log_dir: runner.run(run)}, {run.log_dir: run.log_dir + ".out"}
    codes = {}
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        if parallel.run_at_once([(i, run.log_dir, run) for i, run in enumerate(runs)], len(runs), prog,
                                lambda i, code: codes.update({runs[i].log_dir: code})) == EXIT_INTERRUPTED:
            raise KeyboardInterrupt
    return codes, {run.log_dir: parallel.output_path(run) for run in runs}


# ----------------------------------------------------------------------------------------------
# The studies (their sampler, pruner and storage: launcher/studies/search.py)


class Search:
    """A scheme's search: its study over the declared ranges, then one study a widening of them (MAX_WIDENINGS)."""

    def __init__(self):
        self.stages = []  # [(an Optuna study, the space it searches)]

    @property
    def trials(self):
        return [t for study, _ in self.stages for t in study.trials]

    @property
    def space(self):
        return self.stages[-1][1]


def study_of(ns, storage, scheme, declared, space, stage=0):
    """The Optuna study of a scheme's search stage over `space`; a widening's is named by the ranges it widened from
    the `declared` ones, which a later rule may change."""
    import optuna

    widened = "".join(f"|{name} {rng.describe()}" for name, (_, rng) in space.items() if rng != declared[name][1])
    name = f"{ns.cell}|{scheme}" + (OPTIMIZER_SEARCHED if OPTIMIZER in space else "") + (
        f"|widened-{stage}{widened}" if stage else "")
    return optuna.create_study(study_name=name, storage=storage, direction="minimize",
                               sampler=quasi_random_sampler(study_seed(ns.cell, scheme, ns.seed) + stage, list(space)),
                               pruner=seeds_pruner(ns.trial_seeds), load_if_exists=True)


def tune(ns, storage, searches):
    """Each scheme's search, --trials more trials each, into `searches` ({scheme: its Search}) as it goes. Under
    --until N, a search whose chosen value lies at its range's edge goes on over the widened range, N trials more."""
    for scheme in ns.schemes:
        search = searches[scheme] = Search()
        space = declared = declared_space(ns, scheme)
        for stage in range(MAX_WIDENINGS + 1):
            study = study_of(ns, storage, scheme, declared, space, stage)
            search.stages.append((study, space))
            more = ns.trials if ns.until is None else max(0, ns.until - len(ended(study)))
            said = f" over {widening_text(declared, space)}" if stage else ""
            print(f"[tune] {scheme}{said}: {ended_before(study)}, {more} more, each on seeds "
                  f"{', '.join(map(str, ns.seeds))}", flush=True)
            if more:
                study.optimize(lambda trial: objective(ns, scheme, stage, space, trial, sys.stdout), n_trials=more,
                               catch=(RuntimeError,))
            space = ns.until and len(ended(study)) >= ns.until and widened(search)
            if not space:
                break


def declared_space(ns, scheme):
    """{args name: (flag, Range)}: what the search of `scheme` tries, its period's limits set by its cell's budget,
    and under --search-optimizer its local optimizer where it takes one."""
    mode, _, _, devices = scheme_run(scheme, ns.profile)
    charges = run_of(ns, scheme, 0, ns.seeds[0], {}).charges  # a calibration file's, read as a trial reads it
    space = period_limits(config.search_space(mode), mode, devices, ns.max_time, charges)
    return with_optimizer(space, mode) if ns.search_optimizer else space


def widened(search):
    """The search's space with each range whose chosen value lies at its edge widened; None where none widens, or
    where no values were chosen (no trial reached the target on every seed)."""
    found = summarize(search.trials, search.space)
    if not found["robust"]:
        return None
    wider = {name: (flag, wide) for name, (flag, rng) in search.space.items()
             if name in found["at_edge"] and (wide := rng.widened(found["values"][name]))}
    return {**search.space, **wider} if wider else None


def widening_text(declared, space):
    """'--global-lr log-uniform 0.125 to 8 (from 0.5 to 8)': the ranges of `space` widened from the declared ones."""
    return ", ".join(f"{flag} {rng.describe()} (from {declared[name][1].low:g} to {declared[name][1].high:g})"
                     for name, (flag, rng) in space.items() if rng != declared[name][1])


# ----------------------------------------------------------------------------------------------
# What it writes


def summarize(trials, space):
    """A search's entry of tuned.json from its trials (every stage's): the chosen values (the best trial that reached
    the target on every seed, else the best), and the largest rate that reached it on every seed."""
    import optuna

    states = [t.state for t in trials]
    complete = sorted((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value)
    robust = [t for t in complete if reached_every_seed(t)]
    results = [r for t in trials for r in t.user_attrs.get("results") or []]
    entry = {"trials": len(states), "complete": len(complete), "pruned": states.count(optuna.trial.TrialState.PRUNED),
             "failed": states.count(optuna.trial.TrialState.FAIL),
             "seeds": next((t.user_attrs["seeds"] for t in trials if t.user_attrs.get("seeds")), []),
             "seed_runs": len(results), "diverged_runs": sum(1 for r in results if r["diverged"]),
             "robust_trials": len(robust), "trial_seconds": trial_seconds(trials), **largest_rate(trials, space)}
    if not complete:
        return {**entry, "flags": {}, "values": {}, "robust": False, "best_objective": None, "best_few": [],
                "chosen_results": [], "at_edge": []}
    best = (robust or complete)[0]
    return {**entry, "values": best.params, "flags": {space[name][0]: value for name, value in best.params.items()},
            "robust": bool(robust), "chosen_trial": best.number, "chosen_results": best.user_attrs.get("results", []),
            "best_objective": best.value, "best_few": [t.value for t in (robust or complete)[:BEST_FEW]],
            "at_edge": [name for name, value in best.params.items()
                        if not EDGE_SHARE <= space[name][1].position(value) <= 1 - EDGE_SHARE]}


def trial_seconds(trials):
    """The wall seconds the trials that ended took, each in the run that ran it (a store carried over from an
    earlier search keeps its trials' own times)."""
    return round(sum((t.datetime_complete - t.datetime_start).total_seconds() for t in ended_trials(trials)
                     if t.datetime_start and t.datetime_complete))


def largest_rate(trials, space):
    """{rate_flag, largest_robust_rate}: the largest step rate tried that reached the target on every seed."""
    name = next((n for n in RATE_FLAGS if n in space), None)
    rates = [t.params[name] for t in trials if name in t.params and reached_every_seed(t)]
    return {"rate_flag": space[name][0] if name else None, "largest_robust_rate": max(rates) if rates else None}


def report(ns, searches, seconds=0.0):
    """tuned.json's entry of the cell (with the commands that ran its trials and their wall time together), its
    table and the figures."""
    path = os.path.join(ns.log_dir, tuned.FILE_NAME)
    earlier = tuned.read(path).get(ns.cell, {})
    commands = earlier.get("commands", []) + ([ns.command] if ns.trials or ns.until else [])
    entry = {"commands": commands, "wall_seconds": round(earlier.get("wall_seconds", 0.0) + seconds),
             "network": ns.network, "dataset": ns.dataset, "profile": ns.profile, "link": ns.link,
             "split": "niid" if ns.non_iid else "iid", "target": ns.target, "max_time": ns.max_time,
             "holdout": ns.holdout, "penalty": PENALTY, "trial_seeds": ns.seeds,
             "quasi_random_trials": QUASI_RANDOM_TRIALS, "protocol": tuned.PROTOCOL, "schemes": {}}
    for scheme, search in searches.items():
        entry["schemes"][scheme] = {**summarize(search.trials, search.space), "space": {
            flag: rng.describe() for flag, rng in search.space.values()}, "widenings": [
                {"ranges": widening_text(search.stages[0][1], space), "ended": len(ended(study))}
                for study, space in search.stages[1:]]}
    tuned.write(path, ns.cell, entry)
    table = tuned.markdown(ns.cell, entry)
    write_text(os.path.join(ns.log_dir, "tuned.md"), table)
    folder = os.path.join(ns.log_dir, cell_folder(ns.cell), "figures")
    figures = tuned.draw(folder, ns.cell, ns.target, [
        (scheme, search, search.space) for scheme, search in searches.items()])
    return path, table, figures


def run(argv):
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    started = time.time()
    try:
        ns = parse(argv)
        checks.check_machine(first_run(ns, ns.schemes[0]))
        os.makedirs(ns.log_dir, exist_ok=True)
        if ns.values_of:
            print(tuned.reuse(os.path.join(ns.log_dir, tuned.FILE_NAME), ns.values_of, ns.cell, ns.command))
            return 0
        storage = open_storage(ns.storage)
    except UsageError as error:
        print(f"launch.py tune: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    searches = {}
    try:
        tune(ns, storage, searches)
    except KeyboardInterrupt:
        report(ns, searches, time.time() - started)  # what ran is recorded, with the command that ran it
        print("launch.py tune: interrupted; the studies keep what they ran (the same command goes on)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    path, table, figures = report(ns, searches, time.time() - started if ns.trials or ns.until else 0.0)
    print(table)
    print(f"tuned values: {path}\nfigures: {', '.join(figures) or 'none'}\ntook {time.time() - started:.0f} s")
    return 0
