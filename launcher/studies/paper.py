"""`launch.py paper`: the ESync paper's experiment as one command. The paper's cluster shape (4 fast devices, 2 about
20x slower), its modes (ESync under the paper's rule and, beside it, as the project runs it by default; SSGD, ASGD,
DC-ASGD), i.i.d. and non-i.i.d. data, repeats with different seeds, and
the standalone baseline (sequential SGD on the fastest device); then Table 1 and Figures 3-5.

    python launch.py paper                                  # lenet on Fashion-MNIST, 6 CPU workers at 1,1,1,1,20,20
    python launch.py paper --repeats 2 --max-time 5         # a quick look
    python launch.py paper -n resnet18-v1 -dd ~/data --devices gpu0,gpu1,gpu2,gpu3,cpu,cpu \\
        --slowdown 1 --max-time 900                         # real devices: no emulated slowdown
    python launch.py paper --report-only                    # the table and figures again from the logs
    python launch.py paper --esync-variants default,apply-drift --resume   # one more ESync configuration,
                                                            # keeping the runs an earlier command finished
    sudo .venv/bin/python launch.py paper --hosts netns --comm-ratio 12   # on links shaped to the paper's regime

Repeat r trains every mode on i.i.d. data, then on non-i.i.d. data (the launcher's --non-iid; --splits chooses), with seed S+r-1,
one launch.py run each, logging under <log-dir>/repeat-<r>/<network>/; each of --esync-variants is a launch.py run
of its own per repeat and split, under <log-dir>/repeat-<r>/esync-<variant>/<network>/. Table 1 (table1.md, paper.json) and the
figures go to <log-dir>/<network>/; <log-dir>/timing.json keeps the last command that ran runs and the wall time of all
that did. The launcher's host and aggregation options (--hosts netns, --bandwidth,
--comm-ratio, --ps-bandwidth, -s, --collective) go to every run, and the table and figures name the links. Every
mode trains --max-time seconds; every --snapshot-seconds of training rank 0 hands a copy of the model to the
launcher's evaluator process, which tests it off the training path (launch.py --help), the same for every mode.
The data is the paper's, Fashion-MNIST (apt-get install dataset-fashion-mnist puts it where it is found).
"""
import argparse
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass

from analysis import paper, paper_text, timing, tuned
from analysis import scheme_names
from coordination.rules import apply as paper_rule
from launcher import backends, checks, experiment, links, runner, supervision, workers
from launcher.studies import parallel
from launcher.dmlc import split_at_double_dash
from launcher.studies.regime_map import parse_splits
from training import config, esync_variants, modes
from training.schemes import esync
from training.checks import OneLineErrorParser, UsageError
from training.faults.failures import EXIT_FAILURE, EXIT_USAGE
from training.files import write_json
from training.runlog import read_json

PAPER_SLOWDOWN = "1,1,1,1,20,20"   # 4 fast devices, 2 slow ones (the paper's GPU and CPU steps differ ~100x)
PAPER_MODES = ("esync", "sync", "async", "dcasgd")
PAPER_ESYNC_POLICY = paper_rule.NAME  # the paper's rule, whatever the project's default
DEFAULT_LOG_DIR = os.path.join("logs", "paper")


def build_parser():
    p = OneLineErrorParser(
        prog="launch.py paper", formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__,
        allow_abbrev=False,
        usage="%(prog)s [options] [-- extra worker args]")
    p.add_argument("-n", "--networks", default="lenet", help="comma list of networks, a Table 1 each (default lenet)")
    p.add_argument("--dataset", default=paper.PAPER_DATASET, choices=config.DATASETS,
                   help=f"(default {paper.PAPER_DATASET})")
    p.add_argument("-dd", "--data-dir", help="(default: the first of data, /usr/share/datasets that holds it)")
    p.add_argument("--devices", help="one entry per worker, as launch.py's (default: one cpu per --slowdown factor)")
    p.add_argument("--slowdown", default=PAPER_SLOWDOWN, help=f"as launch.py's (default {PAPER_SLOWDOWN})")
    experiment.add_aggregation_options(p)
    links.add_host_options(p)
    experiment.add_device_options(p)
    experiment.add_run_options(p)
    experiment.add_clock_options(p, jobs=True)
    p.add_argument("--modes", default=",".join(PAPER_MODES),
                   help=f"the cluster modes to compare (default {','.join(PAPER_MODES)}); the standalone baseline "
                        "always runs")
    p.add_argument("--esync-policy", default=PAPER_ESYNC_POLICY, choices=esync.POLICIES,
                   help=f"ESync's policy (default {PAPER_ESYNC_POLICY}, the paper's rule; see launch.py --help)")
    p.add_argument("--esync-variants", default=esync_variants.DEFAULT,
                   help="ESync configurations to run and tabulate beside --esync-policy's, as the regime map names "
                        "them without 'esync-' (default: default, what --modes esync runs with no other flag; "
                        "adaptive-drift; apply-drift; training/esync_variants.py; '' for none); each is a launcher "
                        "run of its own per repeat and split")
    p.add_argument("--fast-only", action=argparse.BooleanOptionalAction, default=True,
                   help="a row of SSGD on the profile's fastest devices alone, the stragglers dropped, a launcher run "
                        "of its own per repeat and split, where the profile has slower devices (default on)")
    p.add_argument("--splits", default=",".join(paper.SPLITS),
                   help="the data splits, iid and niid (each worker a block of classes), in the order they run "
                        "(default iid,niid); the standalone baseline runs with the first")
    p.add_argument("--repeats", type=int, default=5, help="runs of every mode and split (default 5)")
    p.add_argument("--seed", type=int, default=0, help="the first repeat's seed; repeat r uses seed + r - 1")
    p.add_argument("--max-time", type=float, default=75.0,
                   help="seconds each mode trains (default 75: SSGD on the default profile reaches 0.8 in 40-60 s)")
    p.add_argument("--target", type=float, default=paper.PAPER_TARGET,
                   help=f"the accuracy the speedups are timed to (default {paper.PAPER_TARGET:g}, the paper's)")
    p.add_argument("--thresholds", default="0.7,0.8,0.9",
                   help="accuracies whose time to reach each mode's repeats report as mean ± stddev beside Table 1 "
                        "(NBSSGD's measure; default 0.7,0.8,0.9; '' for none)")
    experiment.add_snapshot_option(p)
    p.add_argument("-ld", "--log-dir", "--logs", dest="log_dir", default=DEFAULT_LOG_DIR,
                   help=f"(default {DEFAULT_LOG_DIR})")
    p.add_argument("--progress-every", type=float, default=10.0, help="seconds between progress lines (default 10)")
    p.add_argument("--resume", action="store_true",
                   help="keep every launcher run an earlier command finished in --log-dir as the same experiment, and "
                        "run the rest: --repeats may grow and --esync-variants may add configurations")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: the table and figures from the repeats an earlier run left in --log-dir")
    return p


def parse_thresholds(text):
    try:
        thresholds = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--thresholds {text!r}: give accuracies, e.g. 0.7,0.8,0.9")
    if any(not 0 < t <= 1 for t in thresholds):
        raise UsageError(f"--thresholds {text!r}: every accuracy must be in (0, 1]")
    return thresholds


def parse_variants(text):
    variants = tuple(v.strip() for v in text.split(",") if v.strip())
    for variant in variants:
        try:
            esync_variants.composition(variant)
        except ValueError as error:
            raise UsageError(f"--esync-variants {variant}: {error}")
    if len(set(variants)) != len(variants):
        raise UsageError(f"--esync-variants {text} names a configuration twice")
    return variants


@dataclass(frozen=True)
class PaperRun:
    """One launcher run of the command, and the file it leaves when it finished (the run's record, by which
    --resume knows it)."""
    label: str
    record: str
    experiment: object


def parse(argv):
    """(options, networks, [PaperRun], Table 1's rows: the cluster modes and ESync's variants as 'esync-<variant>');
    UsageError for bad input, found before anything runs."""
    own, worker_args = split_at_double_dash(list(argv))
    ns = build_parser().parse_args(own)
    if ns.repeats < 1 or ns.max_time <= 0 or ns.snapshot_seconds <= 0:
        raise UsageError("--repeats, --max-time and --snapshot-seconds must be positive")
    if not 0 < ns.target <= 1:
        raise UsageError(f"--target {ns.target:g} is not an accuracy in (0, 1]")
    parallel.check_jobs(ns.jobs, backends.of(ns))
    ns.slowdown = ",".join(workers.parse_factors(ns.slowdown, "--slowdown"))
    ns.thresholds = parse_thresholds(ns.thresholds)
    ns.splits = parse_splits(ns.splits)
    ns.esync_variants = parse_variants(ns.esync_variants)
    cluster_modes = experiment.parse_modes(ns.modes)
    alone = [mode for mode in cluster_modes if not modes.MODES[mode].cluster]
    if alone:
        raise UsageError(f"--modes {alone[0]}: the standalone baseline always runs; list cluster modes only")
    networks = tuple(n.strip() for n in ns.networks.split(",") if n.strip())
    if not ns.report_only:
        ns.data_dir = experiment.data_dir(ns)
    ns.fast_only = ns.fast_only and len(fastest_devices(ns)[0].split(",")) < len(ns.slowdown.split(","))
    runs = [] if ns.report_only else planned_runs(ns, networks, cluster_modes, worker_args)
    if runs:
        checks.check_worker_flags_read(worker_args, tuple(dict.fromkeys(m for run in runs for m in run.experiment.modes)))
    return ns, networks, runs, (cluster_modes + tuple(esync_variants.PREFIX + v for v in ns.esync_variants)
                                + ((paper.FAST_ONLY,) if ns.fast_only else ()))


def planned_runs(ns, networks, cluster_modes, worker_args):
    """Every launcher run, in order: per network and repeat, the run of each split (the first with the standalone
    baseline), each followed by ESync's variants' runs."""
    runs = []
    for network in networks:
        for repeat in range(1, ns.repeats + 1):
            for split in ns.splits:
                chosen = cluster_modes + ((modes.STANDALONE,) if split == ns.splits[0] else ())
                log_dir = paper.repeat_dir(ns.log_dir, repeat)
                policy = ({"esync_policy": ns.esync_policy}
                          if any(config.reads(mode, "esync_policy") for mode in chosen) else {})
                runs.append(paper_run(ns, network, repeat, split, chosen, log_dir, policy, worker_args))
                for variant in ns.esync_variants:
                    configuration = esync_variants.composition(variant)
                    runs.append(paper_run(ns, network, repeat, split, ("esync",),
                                          paper.variant_dir(ns.log_dir, repeat, variant),
                                          configuration.launcher_options(),
                                          list(worker_args) + configuration.worker_flags(),
                                          f"ESync ({configuration.describe()})"))
                if ns.fast_only:
                    runs.append(fast_only_run(ns, network, repeat, split, worker_args))
    return runs


def fastest_devices(ns):
    """(--slowdown, --devices) of the profile's fastest devices alone; devices None where --devices is not given."""
    fastest = scheme_names.fastest_positions(ns.slowdown)
    devices = ns.devices.split(",") if ns.devices else None
    return (scheme_names.fastest_profile(ns.slowdown),
            ",".join(devices[i] for i in fastest) if devices and len(devices) == len(ns.slowdown.split(","))
            else ns.devices)


def fast_only_run(ns, network, repeat, split, worker_args):
    """SSGD on the fastest devices alone, at fast-only's tuned values in the whole profile's cell (--tuned)."""
    slowdown, devices = fastest_devices(ns)
    flags = ()
    if ns.tuned:
        cell = tuned.cell_key(network, ns.dataset, ns.slowdown, links.link_of(ns), split == "niid")
        flags = tuned.scheme_flags(ns.tuned, cell, paper.FAST_ONLY)
    return paper_run(ns, network, repeat, split, ("sync",), paper.fast_only_dir(ns.log_dir, repeat),
                     {"slowdown": slowdown, "devices": devices, "tuned": None}, list(worker_args) + list(flags),
                     paper.display(paper.FAST_ONLY))


def paper_run(ns, network, repeat, split, chosen, log_dir, launcher_options, worker_args, name=None):
    run = experiment.build(run_options(ns, network, repeat, split, chosen, log_dir, launcher_options), worker_args)
    label = (f"{network}, repeat {repeat} (seed {run.seed}), {'non-i.i.d.' if run.non_iid else 'i.i.d.'} data: "
             f"{name or ', '.join(run.modes)}")
    return PaperRun(label, os.path.join(log_dir, f"paper-{network}-{split}.json"), run)


def run_options(ns, network, repeat, split, chosen, log_dir, launcher_options):
    """The launcher's options of one run: `chosen` modes on one split of one repeat, logging under log_dir."""
    given = dict(modes=",".join(chosen), network=network, dataset=ns.dataset, data_dir=ns.data_dir,
                 slowdown=ns.slowdown, devices=ns.devices, max_time=ns.max_time, seed=ns.seed + repeat - 1,
                 log_dir=log_dir, progress_every=ns.progress_every, figures=False,
                 snapshot_seconds=ns.snapshot_seconds, non_iid=split == "niid", **experiment.handed_on(ns))
    return experiment.options(**{**given, **launcher_options})


UNMEASURED_FIELDS = ("progress_every", "netns_prefix", "run_id")  # how often a run prints, its namespaces' names, its id


def record_of(run):
    """What identifies a run's results, as JSON stores it: every field of its Experiment but the UNMEASURED_FIELDS.
    --resume keeps a run whose record of an earlier command equals it."""
    fields = {name: value for name, value in asdict(run).items() if name not in UNMEASURED_FIELDS}
    return json.loads(json.dumps(fields))


def finished_before(run):
    """Whether an earlier command finished `run` as the same experiment (a run not made yet: silently not)."""
    if not os.path.exists(run.record):
        return False
    try:
        return read_json(run.record, "paper run record")["experiment"] == record_of(run.experiment)
    except (ValueError, TypeError, KeyError):
        return False


def main(argv):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    try:
        ns, networks, runs, rows = parse(argv)
        first_runs = {}
        for run in runs:
            first_runs.setdefault(run.experiment.network, run.experiment)
        for run in first_runs.values():  # every run of a network has the same workers, data and folders
            checks.check_machine(run)
    except UsageError as error:
        print(f"launch.py paper: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if runs:
        started = time.time()
        code = run_all(runs, ns.jobs, {index for index, run in enumerate(runs) if ns.resume and finished_before(run)})
        timing.record(ns.log_dir, "paper", argv, time.time() - started, ns.resume)
        if code:
            return code
    return report(ns, networks, rows)


def run_all(runs, jobs, kept):
    """Every run not `kept`, `jobs` at once; each finished one leaves its record. The first failure's exit code."""
    def finished(index):
        write_json(runs[index].record, {"experiment": record_of(runs[index].experiment)})

    if jobs > 1:
        labelled = [(index, run.label, run.experiment) for index, run in enumerate(runs) if index not in kept]
        return parallel.run_at_once(labelled, jobs, "paper", lambda index, code: code or finished(index),
                                    total=len(runs))
    return runner.run_in_turn([(run.label, run.experiment) for run in runs], "paper", kept, finished)


def report(ns, networks, cluster_modes):
    from analysis import paper_figures  # matplotlib: only when drawing

    repeats = list(range(1, ns.repeats + 1)) if not ns.report_only else paper.repeats_in(ns.log_dir)
    if not repeats:
        print(f"launch.py paper: error: no repeat-<r> folders under {ns.log_dir}", file=sys.stderr)
        return EXIT_USAGE
    description = {"dataset": ns.dataset, "seeds": [ns.seed + r - 1 for r in repeats], "max_time": ns.max_time,
                   "slowdown": ns.slowdown, "devices": ns.devices, "modes": list(cluster_modes),
                   "esync_policy": ns.esync_policy, **timing.read(ns.log_dir)}
    for network in networks:
        try:
            result, grid = paper.build_report(ns.log_dir, network, cluster_modes, repeats, ns.target, description,
                                              ns.thresholds, ns.splits)
        except paper.PaperError as error:
            print(f"launch.py paper: error: {error}", file=sys.stderr)
            return EXIT_FAILURE
        out_dir = os.path.join(ns.log_dir, network)
        text, paths = paper_text.write_report(result, out_dir)
        paths += paper_figures.draw_all(result, grid, cluster_modes, os.path.join(out_dir, "figures"))
        print("\n" + text)
        print("written:\n" + "\n".join(f"  {path}" for path in paths), flush=True)
    return 0


def run(argv):
    return supervision.run_subprogram(main, argv)
