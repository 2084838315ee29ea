"""`launch.py tune`: every scheme at its best in one cell, by a declared search (Optuna).

    python launch.py tune --schemes sync,async,esync,esync-apply,local,fast-only -n lenet --dataset fashion-mnist \\
        --profile 1,1,1,1,20,20 --trials 8 -ld logs/tune

For one cell (network, data set, profile, links, split) and each scheme, one Optuna study (TPE, seeded) over the
flags the scheme declares a search range for (training/options.py's Range, config.search_space). A trial is one
launcher run at the suggested values, on a seed of its own (--seed + the trial's number, apart from the seeds the
reported repeats use), training on the training set less --holdout samples, which the evaluator tests instead of the
test set. Its objective is the seconds of training its model took to reach --target on them; a run that never
reached it scores its training time x (1 + PENALTY x the accuracy it lacked). While a run trains, its score so far
(the same formula, as if it ended then) is reported to the trial at each evaluation, and Optuna's successive-halving
pruner stops the runs that fall behind. `local` is sequential SGD on one of the profile's fastest devices,
`fast-only` SSGD on the profile's fastest devices alone (the stragglers dropped).

The studies live in an SQLite file under the log dir (or --storage URL, any database Optuna takes): the same command
runs --trials more trials of each study, none repeated; a trial whose process was killed is marked failed. Writes
<log-dir>/tuned.json (tuned.py), tuned.md and a figure per scheme of the objective against each hyperparameter.
"""
import contextlib
import logging
import os
import sys
import threading
import time

from analysis import regime_map as map_analysis
from analysis import tuned
from launcher import experiment, preflight, runner
from launcher.supervision import INTERRUPTS
from training import config, modes
from training.checks import UsageError
from training.options import Range
from training.evaluator import EVALUATOR_LOG, read_evaluations
from training.faults.failures import EXIT_INTERRUPTED, EXIT_USAGE

FAST_ONLY = map_analysis.FAST_ONLY
DEFAULT_SCHEMES = "sync,async,esync,esync-apply,local,fast-only"
PENALTY = 10.0          # a censored run's score grows by its training time x this for each unit of accuracy it lacked
PRUNED = "pruned"       # what INTERRUPTS notes when the pruner stops a run
STARTUP_TRIALS = 3      # TPE samples at random before it models the objective
BEST_FEW = 3            # the best trials whose spread tuned.json reports
EDGE = 0.1              # a best value in the outer tenth of its range is flagged


# ----------------------------------------------------------------------------------------------
# The command line


def build_parser():
    p = config.OneLineErrorParser(prog="launch.py tune", description=__doc__.splitlines()[0])
    p.add_argument("--schemes", default=DEFAULT_SCHEMES,
                   help=f"cluster modes, esync-<policy>, local and {FAST_ONLY} (default {DEFAULT_SCHEMES})")
    p.add_argument("-n", "--network", default="lenet")
    p.add_argument("--dataset", default="fashion-mnist", choices=config.DATASETS)
    p.add_argument("-dd", "--data-dir", help="folder holding the dataset (default: the first that holds it)")
    p.add_argument("--profile", default="1,1,1,1,20,20", help="the devices' slowdowns (the paper's by default)")
    p.add_argument("--link", default=tuned.LOOPBACK,
                   help="loopback (default), or R: shaped links at R x the fast step (launch.py --comm-ratio R)")
    p.add_argument("--non-iid", action="store_true", help="the split by class")
    p.add_argument("--target", type=float, default=0.8, help="the accuracy a run is timed to (default 0.8)")
    p.add_argument("--max-time", type=float, default=30.0, help="seconds of training a trial at most (default 30)")
    p.add_argument("--trials", type=int, default=8,
                   help="trials of each scheme's study this command runs (default 8: at most 6 minutes a scheme on 2 "
                        "cores at the default --max-time, 10 to 40 minutes for the default six schemes as the pruner "
                        "stops runs; 0: only the report of what the studies hold)")
    p.add_argument("--holdout", type=int, default=5000,
                   help="training samples held out to validate on (default 5000)")
    p.add_argument("--seed", type=int, default=1000,
                   help="the first trial's seed; trial k runs on seed + k (default 1000, apart from the repeats')")
    p.add_argument("--snapshot-seconds", type=float, default=experiment.DEFAULT_SNAPSHOT_SECONDS,
                   help="seconds of training between the evaluations a trial is judged and pruned by")
    p.add_argument("--storage", help="the studies' database, an SQLAlchemy URL (default: sqlite under the log dir)")
    p.add_argument("-ld", "--log-dir", "--logs", default=os.path.join("logs", "tune"))
    experiment.add_device_options(p)
    p.add_argument("--max-restarts", type=int, default=0,
                   help="a trial whose process dies is started again from its newest checkpoint, up to N times")
    return p


def parse(argv):
    ns = build_parser().parse_args(argv)
    ns.schemes = [s.strip() for s in ns.schemes.split(",") if s.strip()]
    ns.log_dir = os.path.abspath(ns.log_dir)
    ns.storage = ns.storage or f"sqlite:///{os.path.join(ns.log_dir, 'studies.db')}"
    for name in ("holdout", "max_time", "target"):
        if not getattr(ns, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    if ns.trials < 0:
        raise UsageError("--trials must be 0 (report what the studies hold) or more")
    ns.cell = tuned.cell_key(ns.network, ns.dataset, ns.profile, ns.link, ns.non_iid)
    for scheme in ns.schemes:
        first_run(ns, scheme, 0)  # every scheme's run is one the launcher takes
    return ns


# ----------------------------------------------------------------------------------------------
# One trial


def scheme_run(scheme, profile):
    """(mode, the launcher's options, the workers' flags, the profile) of one scheme of the search."""
    if scheme == FAST_ONLY:
        return "sync", {}, [], map_analysis.fastest_profile(profile)
    mode, variant = map_analysis.mode_of(scheme)
    if not variant:
        return mode, {}, [], profile
    from training import esync_variants

    try:
        configuration = esync_variants.composition(variant)
    except ValueError as error:
        raise UsageError(str(error))
    return mode, configuration.launcher_options(), configuration.worker_flags(), profile


def run_of(ns, scheme, number, values):
    """The Experiment of trial `number` of a scheme at `values` ({args name: value})."""
    mode, own, flags, profile = scheme_run(scheme, ns.profile)
    space = config.search_space(mode)
    flags = flags + [f"{space[name][0]}={space[name][1].text(value)}" for name, value in values.items()]
    links = {} if ns.link == tuned.LOOPBACK else {"hosts": "netns", "comm_ratio": float(ns.link)}
    options = experiment.options(
        modes=mode, network=ns.network, dataset=ns.dataset, data_dir=ns.data_dir, slowdown=profile,
        max_time=ns.max_time, target_accuracy=ns.target, seed=ns.seed + number, holdout=ns.holdout,
        snapshot_seconds=ns.snapshot_seconds, non_iid=ns.non_iid, figures=False, progress_every=1000.0,
        device_share=ns.device_share, sleeping_slowdown=ns.sleeping_slowdown, max_restarts=ns.max_restarts,
        log_dir=trial_dir(ns, scheme, number), **links, **own)
    return experiment.build(options, flags)


def first_run(ns, scheme, number):
    """A run of the scheme at its defaults: the launcher's checks of its options, before any study starts."""
    if scheme != FAST_ONLY and map_analysis.mode_of(scheme)[0] not in modes.MODES:
        raise UsageError(f"--schemes: unknown scheme {scheme}")
    return run_of(ns, scheme, number, {})


def trial_dir(ns, scheme, number):
    return os.path.join(ns.log_dir, cell_folder(ns.cell), scheme, f"trial-{number}")


def cell_folder(cell):
    return cell.replace("/", "_").replace(",", "-")


def score(evaluations, target, trained_seconds):
    """A run's objective from its evaluations: the training seconds at which it first reached `target`, else its
    training time x (1 + PENALTY x the accuracy it lacked)."""
    reached = next((e["time"] for e in evaluations if e["accuracy"] >= target), None)
    if reached is not None:
        return reached
    best = max((e["accuracy"] for e in evaluations), default=0.0)
    return trained_seconds * (1.0 + PENALTY * (target - best))


class Watch:
    """Reports a running trial's score at each new evaluation; asks the launcher to stop when the pruner says so."""

    def __init__(self, trial, path, target):
        self.trial, self.path, self.target = trial, path, target
        self.pruned = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.follow, name="tune-watch", daemon=True)

    def follow(self):
        seen = 0
        while not self.done.wait(0.5):
            evaluations = read_evaluations(self.path)
            for step, _ in enumerate(evaluations[seen:], seen + 1):
                self.trial.report(score(evaluations[:step], self.target, evaluations[step - 1]["time"]), step)
                if self.trial.should_prune():
                    self.pruned = True
                    INTERRUPTS.received = PRUNED  # the launcher stops the run where it is safe to
                    return
            seen = len(evaluations)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def objective(ns, scheme, trial, output):
    """Run one trial; its score (optuna.TrialPruned when pruned)."""
    import optuna

    mode = scheme_run(scheme, ns.profile)[0]
    space = config.search_space(mode)
    values = {name: rng.suggest(trial, name) for name, (_, rng) in space.items()}
    run = run_of(ns, scheme, trial.number, values)
    trial.set_user_attr("seed", run.seed)
    evaluator_log = os.path.join(run.mode_folder(mode), EVALUATOR_LOG)
    if INTERRUPTS.received == PRUNED:  # the last trial's; a Ctrl-C since then stays noted
        INTERRUPTS.received = None
    os.makedirs(run.log_dir, exist_ok=True)
    with open(run.log_dir + ".out", "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), \
            Watch(trial, evaluator_log, ns.target) as watch:
        code = runner.run(run)
    evaluations = read_evaluations(evaluator_log)
    said = ", ".join(f"{name}={space[name][1].text(value, 4)}" for name, value in values.items())
    if watch.pruned:
        print(f"[tune {scheme} trial {trial.number}] {said}: pruned after {len(evaluations)} evaluations", file=output)
        raise optuna.TrialPruned()
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    if code:
        raise RuntimeError(f"trial {trial.number} of {scheme} failed (exit {code}): {run.log_dir}.out")
    value = score(evaluations, ns.target, evaluations[-1]["time"] if evaluations else ns.max_time)
    print(f"[tune {scheme} trial {trial.number}] {said}: {value:.1f}", file=output, flush=True)
    return value


# ----------------------------------------------------------------------------------------------
# The studies


def open_storage(url):
    """Optuna's storage at `url`; UsageError (one line) where it cannot be opened."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the trials' own lines say what a study does
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # the heartbeat's
    try:
        return optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=120)
    except Exception as error:  # SQLAlchemy's and Optuna's many ways to refuse a URL
        raise UsageError(f"--storage {url}: cannot open it: {str(error).splitlines()[0]}") from None


def study_of(ns, storage, scheme):
    import optuna

    name = f"{ns.cell}|{scheme}"
    try:
        done = len(optuna.load_study(study_name=name, storage=storage).trials)
    except KeyError:
        done = 0
    sampler = optuna.samplers.TPESampler(seed=ns.seed + done, n_startup_trials=STARTUP_TRIALS)
    pruner = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=max(1, int(ns.max_time / 6 / ns.snapshot_seconds)), reduction_factor=3)
    return optuna.create_study(study_name=name, storage=storage, direction="minimize", sampler=sampler,
                               pruner=pruner, load_if_exists=True)


def tune(ns, storage):
    """Each scheme's study, --trials more trials each; {scheme: its study}."""
    studies = {}
    for scheme in ns.schemes:
        study = study_of(ns, storage, scheme)
        print(f"[tune] {scheme}: {len(study.trials)} trials before, {ns.trials} more", flush=True)
        if ns.trials:
            study.optimize(lambda trial: objective(ns, scheme, trial, sys.stdout), n_trials=ns.trials,
                           catch=(RuntimeError,))
        studies[scheme] = study
    return studies


# ----------------------------------------------------------------------------------------------
# What it writes


def summarize(study, space):
    """A study's entry of tuned.json."""
    import optuna

    states = [t.state for t in study.trials]
    complete = sorted((t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value)
    entry = {"trials": len(states), "complete": len(complete), "pruned": states.count(optuna.trial.TrialState.PRUNED),
             "failed": states.count(optuna.trial.TrialState.FAIL), "seeds": [t.user_attrs.get("seed")
                                                                           for t in study.trials]}
    if not complete:
        return {**entry, "flags": {}, "values": {}, "best_objective": None, "best_few": [], "at_edge": []}
    best = complete[0]
    return {**entry, "values": best.params, "flags": {space[name][0]: value for name, value in best.params.items()},
            "best_objective": best.value, "best_few": [t.value for t in complete[:BEST_FEW]],
            "at_edge": [name for name, value in best.params.items()
                        if not EDGE <= space[name][1].position(value) <= 1 - EDGE]}


def report(ns, studies):
    """tuned.json's entry of the cell, its table and the figures."""
    entry = {"network": ns.network, "dataset": ns.dataset, "profile": ns.profile, "link": ns.link,
             "split": "niid" if ns.non_iid else "iid", "target": ns.target, "max_time": ns.max_time,
             "holdout": ns.holdout, "penalty": PENALTY, "schemes": {}}
    for scheme, study in studies.items():
        space = config.search_space(scheme_run(scheme, ns.profile)[0])
        entry["schemes"][scheme] = summarize(study, space)
    path = os.path.join(ns.log_dir, "tuned.json")
    tuned.write(path, ns.cell, entry)
    table = markdown(ns.cell, entry)
    with open(os.path.join(ns.log_dir, "tuned.md"), "w") as f:
        f.write(table)
    figures = draw(ns, studies)
    return path, table, figures


def markdown(cell, entry):
    from analysis.tables import markdown_table

    rows = []
    for scheme, found in entry["schemes"].items():
        values = ", ".join((f"{flag} {value:.3g}" if isinstance(value, (int, float)) else f"{flag} {value}")
                           + (" (at its range's edge)" if name in found["at_edge"] else "")
                           for (flag, value), name in zip(found["flags"].items(), found["values"]))
        spread = ", ".join(f"{v:.1f}" for v in found["best_few"])
        rows.append([scheme, values or "–", f"{found['complete']} / {found['pruned']} / {found['failed']}",
                     spread or "–"])
    return (f"### {cell}: each scheme's best values (target {entry['target']:g} on {entry['holdout']} held-out "
            f"training samples, {entry['max_time']:g} s a trial)\n\n"
            + markdown_table(["scheme", "best values", "trials complete / pruned / failed", "best objectives (s)"],
                             rows) + "\n")


def draw(ns, studies):
    """One figure per scheme: each complete trial's objective against each hyperparameter, and each pruned one's
    score when the pruner stopped it (hollow)."""
    import optuna

    from analysis.figures import plt, save_figure

    folder = os.path.join(ns.log_dir, cell_folder(ns.cell), "figures")
    os.makedirs(folder, exist_ok=True)
    written = []
    for scheme, study in studies.items():
        space = config.search_space(scheme_run(scheme, ns.profile)[0])
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED and t.intermediate_values]
        if not space or not complete + pruned:
            continue
        fig, axes = plt.subplots(1, len(space), figsize=(4 * len(space), 3.2), squeeze=False)
        for ax, (name, (flag, rng)) in zip(axes[0], space.items()):
            # a flag searched only since the study began is not in every trial
            shown = [t for t in complete if name in t.params]
            ax.scatter([t.params[name] for t in shown], [t.value for t in shown], label="complete")
            shown = [t for t in pruned if name in t.params]
            ax.scatter([t.params[name] for t in shown], [t.intermediate_values[max(t.intermediate_values)]
                                                         for t in shown], facecolors="none", edgecolors="C1",
                       label="pruned (its score then)")
            ax.set_xscale("log" if rng.log else "linear")
            if isinstance(rng, Range):
                ax.set_xlim(rng.low, rng.high)
            ax.set_xlabel(flag)
            ax.set_ylabel(f"seconds to {ns.target:g} (penalised)")
        axes[0][0].legend(fontsize="small")
        fig.suptitle(f"{scheme}: {ns.cell}")
        written += save_figure(fig, folder, scheme, pdf=False)
    return written


def run(argv):
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    started = time.time()
    try:
        ns = parse(argv)
        preflight.check_machine(first_run(ns, ns.schemes[0], 0))
        os.makedirs(ns.log_dir, exist_ok=True)
        storage = open_storage(ns.storage)
    except UsageError as error:
        print(f"launch.py tune: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        studies = tune(ns, storage)
    except KeyboardInterrupt:
        print("launch.py tune: interrupted; the studies keep what they ran (the same command goes on)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    path, table, figures = report(ns, studies)
    print(table)
    print(f"tuned values: {path}\nfigures: {', '.join(figures) or 'none'}\ntook {time.time() - started:.0f} s")
    return 0
