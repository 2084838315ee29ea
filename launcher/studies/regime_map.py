"""`launch.py regimes`: which scheme wins where. Every scheme over a grid of links x heterogeneity x data split, with
repeats; then a table and a heatmap per split (analysis/regime_map.py).

    python launch.py regimes                                  # the full map (root: the shaped links need it)
    python launch.py regimes --links loopback,3 --profiles 1,1,4 --splits iid --schemes esync,async --repeats 1 \\
        --max-time 10                                         # one corner of it
    python launch.py regimes --report-only                    # the table and heatmaps again from the logs
    python launch.py regimes --repeats 3 --resume             # the same grid, adding what is not done yet

Links: `loopback`, or a communication ratio R (launcher/comm_ratio.py): every link shaped so that one transfer of
the model over a worker's link lasts R steps of the fastest worker, measured once before the first shaped run.
Profiles: the workers' slowdowns, profiles separated by `/`. Schemes: cluster modes, and ESync's variants
(training/esync_variants.py): `esync-<policy>` under a policy other than its default, `esync-<policy>-overlap` and
`esync-overlap` with --overlap, `esync-<policy>-drift` with the drift correction for non-i.i.d. data; a synchronous
scheme ending in `@ring`, `@butterfly` or `@binary-blocks` sums over that MPI collective (--collective) instead of
the parameter server, at the scheme's tuned values. Each scheme
runs alone in one launcher run per cell and repeat (a failing run is recorded and the map goes on); before them,
each profile's concurrent standalone limit is measured once, for the efficiencies. The plan, the limits, every
run's logs and exit code, regimes.json, regimes.md and regimes-<split>.png go under --log-dir. `--resume` keeps
every run that ended well and the limits of an earlier map of the same grid in --log-dir (only --repeats may
differ, and --schemes may add schemes) and runs the rest. Exit codes: 0 every run done, 1 a run failed (the map is
still written, showing it), 2 bad input, 130 interrupted.
"""
import argparse
import logging
import json
import os
import shutil
import sys
import time

from analysis import paired, paper, regime_map, timing, tuned
from launcher import backends, calibration, checks, experiment, links, runner, supervision, workers
from launcher.studies import map_schemes, parallel
from launcher.dmlc import split_at_double_dash
from training import config, modes
from training.clocks import network
from training.checks import OneLineErrorParser, UsageError
from training.faults.failures import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE
from training.files import read_json, write_json

DEFAULT_LINKS = "loopback,0.3,3,12"   # 12: the ESync paper's cluster (launcher/comm_ratio.py)
DEFAULT_PROFILES = "1,1,1/1,1,4/1,1,1,1,20,20"
DEFAULT_SCHEMES = ("sync,async,dcasgd,dcasgd-paper,esync,esync-apply,esync-nonblocking,esync-overlap,"
                   "esync-apply-drift,nbsync,backup,lb-bsp,downpour,fedavg,diloco,fedasync,fedbuff,async-local-sgd,tifl,"
                   "feddrop,local,fast-only")
DEFAULT_LOG_DIR = os.path.join("logs", "regimes")
DEFAULT_HIGHER_TARGETS = "0.85"
START_UP_SECONDS = 8.0   # about what a launcher run adds to its training time (for the estimate printed)


def build_parser():
    p = OneLineErrorParser(
        prog="launch.py regimes", formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__,
        allow_abbrev=False,
        usage="%(prog)s [options] [-- extra worker args]")
    p.add_argument("--links", default=DEFAULT_LINKS,
                   help=f"comma list of loopback and communication ratios R > 0 (default {DEFAULT_LINKS})")
    p.add_argument("--profiles", default=DEFAULT_PROFILES,
                   help=f"the workers' slowdowns, profiles separated by /, each as --slowdown takes it (NxF: F for N "
                        f"workers in a row) (default {DEFAULT_PROFILES})")
    p.add_argument("--splits", default="iid,niid", help="iid, niid or both (default iid,niid)")
    p.add_argument("--schemes", default=DEFAULT_SCHEMES,
                   help=f"cluster modes, esync-<policy>[-overlap][-drift], local (one fast device) and fast-only (SSGD "
                        f"on the fastest devices alone; fast:<scheme> is any other scheme there); a synchronous one "
                        f"may end in @ring, @butterfly or @binary-blocks: summed over that MPI collective; any may "
                        f"end in @sharded: over as many "
                        f"parameter servers as workers, the keys split over them (default {DEFAULT_SCHEMES})")
    p.add_argument("--repeats", type=int, default=5,
                   help="runs of every scheme in every cell, on seeds --seed, --seed + 1, ... (default 5: the "
                        "smallest p-value 5 against 5 allows is 0.0079; a winner is named only where the spread "
                        "allows)")
    p.add_argument("--seed", type=int, default=0, help="the first repeat's seed; repeat r uses seed + r - 1")
    p.add_argument("--max-time", type=float, default=30.0, help="seconds each run trains (default 30)")
    p.add_argument("--target", type=float, default=paper.PAPER_TARGET,
                   help=f"the accuracy the times are taken to (default {paper.PAPER_TARGET:g}, the paper's)")
    p.add_argument("--higher-targets", default=DEFAULT_HIGHER_TARGETS,
                   help="comma list of higher accuracies the map also times the schemes to, each with its winners "
                        f"and heatmaps, where the schemes separate past the first seconds (default "
                        f"{DEFAULT_HIGHER_TARGETS}; '' for none)")
    experiment.add_snapshot_option(p)
    p.add_argument("--limit-seconds", type=float, default=10.0,
                   help="seconds of each profile's concurrent standalone runs (default 10)")
    p.add_argument("-n", "--network", default="lenet", help="(default lenet)")
    p.add_argument("--dataset", default=paper.PAPER_DATASET, choices=config.DATASETS,
                   help=f"(default {paper.PAPER_DATASET})")
    p.add_argument("-dd", "--data-dir", help="(default: the first of data, /usr/share/datasets that holds it)")
    experiment.add_aggregation_options(p)
    links.add_host_options(p, rates=False)
    experiment.add_device_options(p)
    experiment.add_clock_options(p, jobs=True)
    experiment.add_run_options(p)
    p.add_argument("-ld", "--log-dir", "--logs", dest="log_dir", default=DEFAULT_LOG_DIR,
                   help=f"(default {DEFAULT_LOG_DIR})")
    p.add_argument("--progress-every", type=float, default=10.0, help="seconds between progress lines (default 10)")
    p.add_argument("--no-figures", dest="figures", action="store_false", help="the table without the heatmaps")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs that ended well and the limits of an earlier map of this grid in --log-dir "
                        "(--schemes may add schemes to it)")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: the table and heatmaps from the runs an earlier run left in --log-dir")
    return p


# ----------------------------------------------------------------------------------------------
# The grid


def parse_links(text):
    links = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == regime_map.LOOPBACK:
            links.append(part)
            continue
        try:
            ratio = float(part)
        except ValueError:
            raise UsageError(f"--links {part!r}: give loopback or a communication ratio, e.g. loopback,0.3,3,12")
        if not 0 < ratio < float("inf"):
            raise UsageError(f"--links {part}: a communication ratio must be positive")
        links.append(ratio)
    return unique(links, "--links", text)


def parse_profiles(text):
    """The profiles of --profiles, each written out one factor a device (launcher/workers.py parse_factors)."""
    profiles = [",".join(workers.parse_factors(p.strip(), "--profiles")) for p in text.split("/") if p.strip()]
    return unique(profiles, "--profiles", text)


def parse_splits(text):
    splits = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in splits if s not in regime_map.SPLIT_NAMES]
    if unknown:
        raise UsageError(f"--splits {unknown[0]!r}: give iid, niid or both")
    return unique(splits, "--splits", text)


def parse_schemes(text):
    schemes = [s.strip() for s in text.split(",") if s.strip()]
    for scheme in schemes:
        map_schemes.check(scheme)
    return unique(schemes, "--schemes", text)


def unique(values, flag, text):
    if not values:
        raise UsageError(f"{flag} {text!r} names nothing")
    if len(set(values)) != len(values):
        raise UsageError(f"{flag} {text!r} names an entry twice")
    return values


def plan_of(ns):
    return {"network": ns.network, "dataset": ns.dataset, "links": parse_links(ns.links),
            "profiles": parse_profiles(ns.profiles), "splits": parse_splits(ns.splits),
            "schemes": parse_schemes(ns.schemes), "repeats": ns.repeats, "seed": ns.seed, "max_time": ns.max_time,
            "target": ns.target, "targets": [ns.target] + parse_higher_targets(ns.higher_targets, ns.target),
            "snapshot_seconds": ns.snapshot_seconds, "clock": ns.clock, "step_seconds": ns.step_seconds,
            "step_jitter": ns.step_jitter, "step_overhead": ns.step_overhead, "latency": ns.latency,
            "round_trip": ns.round_trip, **servers_of(ns),
            **({"server_apply": ns.server_apply} if ns.server_apply else {})}


def servers_of(ns):
    """The parameter servers every scheme but those @sharded or @<collective> sums over, where not one server on a
    worker's link: a map's plan without them is one of a single server."""
    given = {"num_servers": ns.num_servers} if ns.num_servers != 1 else {}
    given.update({name: getattr(ns, name) for name in LINK_RATES if getattr(ns, name)})
    return given


def parse_higher_targets(text, target):
    try:
        higher = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--higher-targets {text!r}: give accuracies, e.g. 0.85,0.88")
    if any(not target < t <= 1 for t in higher):
        raise UsageError(f"--higher-targets {text!r}: each must be above --target {target:g} and at most 1")
    return higher


NETNS_OPTIONS = ("netns_prefix", "netns_subnet")  # handed on to the runs on shaped links only
LINK_RATES = ("ps_bandwidth", "link_slowdown")  # handed on to the runs on shaped links and on the virtual clock


def relative_link_rates(ns):
    """The LINK_RATES given as multiples of the workers' links: each worker's slowdown, the servers' "Nx"."""
    relative = ("link_slowdown",)
    if ns.ps_bandwidth and network.is_multiple(ns.ps_bandwidth):
        relative += ("ps_bandwidth",)
    return relative


def check_link_options(ns, link_list):
    """UsageError for a link option that no cell of the map would use: where every link is loopback, the namespaces'
    options and, in real time, the links' rates; on the virtual clock the multiples of free workers' links."""
    if any(link != regime_map.LOOPBACK for link in link_list):
        return
    unused = NETNS_OPTIONS + (relative_link_rates(ns) if backends.of(ns).charges_time else LINK_RATES)
    defaults = build_parser().parse_args([])
    given = [name for name in unused if getattr(ns, name) != getattr(defaults, name)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise UsageError(f"{flag} {getattr(ns, given[0])}: --links {','.join(link_list)} has loopback cells only, "
                         "where it sets nothing")


def run_options(ns, plan, link, profile, split, repeat, scheme, mode, own_options, devices=None):
    """The launcher's options of one scheme (its mode and own options) in one cell and repeat; `devices`: the
    slowdowns it trains on where they are not the cell's profile (fast-only's)."""
    links = experiment.handed_on(ns)
    if not modes.MODES[mode].cluster:  # one device alone: no servers to count
        links.pop("num_servers", None)
    virtual = backends.of(ns).charges_time  # the links charged, not shaped
    if link == regime_map.LOOPBACK or virtual:
        dropped = NETNS_OPTIONS if virtual else (*NETNS_OPTIONS, *LINK_RATES, "step_seconds")
        if virtual and link == regime_map.LOOPBACK:
            dropped += relative_link_rates(ns)  # a multiple of free links is free
        links = {name: value for name, value in links.items() if name not in dropped}
        links.update(hosts="local", comm_ratio=None if link == regime_map.LOOPBACK else float(link))
    else:
        links.update(hosts="netns", comm_ratio=float(link))
    return experiment.options(
        modes=mode, network=plan["network"], dataset=plan["dataset"], data_dir=ns.data_dir, slowdown=devices or profile,
        max_time=float(plan["max_time"]), seed=plan["seed"] + repeat - 1, progress_every=ns.progress_every,
        figures=False, snapshot_seconds=plan["snapshot_seconds"], non_iid=split == "niid",
        log_dir=regime_map.run_dir(ns.log_dir, link, profile, split, repeat, scheme), **{**links, **own_options})


def planned_runs(ns, plan, worker_args):
    """[(label, folder, Experiment)], repeat by repeat, so that a map cut short holds whole repeats."""
    runs = []
    for repeat in range(1, plan["repeats"] + 1):
        for link in plan["links"]:
            for profile in plan["profiles"]:
                for split in plan["splits"]:
                    for scheme in plan["schemes"]:
                        label = (f"{scheme}, {regime_map.describe_link(link)}, workers {regime_map.compact(profile)}, "
                                 f"{regime_map.SPLIT_NAMES[split]}, repeat {repeat}")
                        mode, own_options, own_flags, devices = map_schemes.in_cell(
                            scheme, ns.tuned, tuned.cell_key(plan["network"], plan["dataset"], profile, link,
                                                             split == "niid"), profile, ns.link_slowdown)
                        options = run_options(ns, plan, link, profile, split, repeat, scheme, mode, own_options,
                                              devices)
                        run = experiment.build(options, own_flags + list(worker_args))
                        runs.append((label, regime_map.run_dir(ns.log_dir, link, profile, split, repeat, scheme), run))
    checks.check_worker_flags_read(worker_args, tuple(dict.fromkeys(mode for _, _, run in runs for mode in run.modes)))
    return runs


def parse(argv):
    """(options, plan, runs); UsageError (one line) for bad input, before anything runs."""
    own, worker_args = split_at_double_dash(list(argv))
    ns = build_parser().parse_args(own)
    ns.log_dir = os.path.abspath(ns.log_dir)
    if ns.report_only:
        return ns, None, []
    if ns.repeats < 1 or ns.max_time <= 0 or ns.snapshot_seconds <= 0 or ns.limit_seconds <= 0:
        raise UsageError("--repeats, --max-time, --snapshot-seconds and --limit-seconds must be positive")
    if not 0 < ns.target <= 1:
        raise UsageError(f"--target {ns.target:g} is not an accuracy in (0, 1]")
    ns.data_dir = experiment.data_dir(ns)
    parallel.check_jobs(ns.jobs, backends.of(ns))
    calibration.resolve_charges(ns, worker_args)  # a calibration file read once: the plan and the limits take it
    if ns.link_probe and not any(link != regime_map.LOOPBACK for link in parse_links(ns.links)):
        raise UsageError("--step-seconds FILE in real time sets the shaped links' rate: give a ratio in --links, or "
                         "--clock virtual")
    check_link_options(ns, parse_links(ns.links))
    plan = plan_of(ns)
    if ns.resume:
        check_resumable(ns.log_dir, plan)
    return ns, plan, planned_runs(ns, plan, worker_args)


def check_resumable(log_dir, plan):
    """UsageError unless --log-dir holds an earlier map of the same grid (the number of repeats aside, schemes added
    to it, and the higher targets, which only the report reads)."""
    path = os.path.join(log_dir, regime_map.PLAN_FILE)
    try:
        earlier = read_json(path)
    except FileNotFoundError:
        raise UsageError(f"--resume: no {regime_map.PLAN_FILE} under {log_dir}; leave out --resume to start a map")
    except ValueError as error:
        raise UsageError(f"--resume: {path} is not JSON: {error}")
    differing = sorted(key for key in set(plan) | set(earlier)
                       if key not in ("repeats", "schemes", "targets")
                       and earlier.get(key) != json_round_trip(plan).get(key))
    if differing:
        raise UsageError(f"--resume: the map in {log_dir} has another {', '.join(differing)}; only --repeats and "
                         "--higher-targets may differ, and --schemes may add schemes")
    dropped = [scheme for scheme in earlier.get("schemes", []) if scheme not in plan["schemes"]]
    if dropped:
        raise UsageError(f"--resume: the map in {log_dir} also has {', '.join(dropped)}: --schemes may add schemes "
                         "to it, not leave any out")


def json_round_trip(value):
    return json.loads(json.dumps(value))


def done_before(folder):
    """Whether an earlier map's run in `folder` ended well."""
    try:
        return read_json(os.path.join(folder, regime_map.STATUS_FILE)).get("exit_code") == 0
    except (FileNotFoundError, ValueError, AttributeError):
        return False


# ----------------------------------------------------------------------------------------------
# Running


def check_machine(runs):
    """The checks of the first run on each kind of host (namespaces need root)."""
    checked = set()
    for _, _, run in runs:
        if run.cluster.hosts not in checked:
            checks.check_machine(run)
            checked.add(run.cluster.hosts)


def measure_limits(ns, plan, worker_args):
    """{profile: each worker's concurrent standalone samples/s}, written to limits.json (with --resume, the
    profiles an earlier map measured are kept)."""
    job_args = ["-n", plan["network"], "--dataset", plan["dataset"], "-dd", ns.data_dir, *worker_args]
    limits = earlier_limits(ns.log_dir) if ns.resume else {}
    for profile in plan["profiles"]:
        name = regime_map.compact(profile)
        if profile in limits:
            print(f"[regimes] workers {name}: {sum(limits[profile]):.0f} samples/s together (measured before)",
                  flush=True)
            continue
        print(f"[regimes] the concurrent standalone limit of workers {name} ({ns.limit_seconds:g} s)", flush=True)
        workdir = os.path.join(ns.log_dir, "limits", regime_map.profile_folder(profile))
        slowdowns = [float(f) for f in profile.split(",")]
        if backends.of(ns).charges_time:  # what the devices are charged: each a batch every step x slowdown
            batch = config.parse_args(config.flags_for_mode(job_args, modes.STANDALONE)).batch_size
            limits[profile] = [batch / (ns.step_seconds * factor + ns.step_overhead) for factor in slowdowns]
        else:
            share, _ = workers.device_share(slowdowns, ns.device_share, ns.sleeping_slowdown)
            limits[profile] = workers.concurrent_standalone(slowdowns, ns.limit_seconds, workdir,
                                                           config.flags_for_mode(job_args, modes.STANDALONE), share)
        print(f"[regimes] workers {name}: {sum(limits[profile]):.0f} samples/s together", flush=True)
    write_json(os.path.join(ns.log_dir, regime_map.LIMITS_FILE), limits, indent=1)


def earlier_limits(log_dir):
    try:
        limits = read_json(os.path.join(log_dir, regime_map.LIMITS_FILE))
    except (FileNotFoundError, ValueError):
        return {}
    return limits if isinstance(limits, dict) else {}


def run_all(runs, resume=False, jobs=1):
    """Every run (`jobs` at once), each one's exit code written beside its logs; a failed run is recorded and the
    map goes on. EXIT_INTERRUPTED when interrupted, EXIT_FAILURE when a run failed, else 0."""
    if jobs > 1:
        return run_at_once(runs, resume, jobs)
    measured = {}
    failed = 0
    for index, (label, folder, run) in enumerate(runs):
        if resume and done_before(folder):
            print(f"[regimes {index + 1}/{len(runs)}] {label}: done before, kept", flush=True)
            continue
        print(f"[regimes {index + 1}/{len(runs)}] {label}", flush=True)
        if os.path.isdir(folder):
            shutil.rmtree(folder)  # a run that failed or was cut short: its logs would mix with the new ones
        code = runner.run(run, measured)
        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, regime_map.STATUS_FILE), {"exit_code": code})
        if code == EXIT_INTERRUPTED:
            print("launch.py regimes: interrupted; the runs before it kept their logs (--report-only maps them)",
                  file=sys.stderr)
            return code
        failed += code != 0
    if failed:
        print(f"launch.py regimes: {failed} of {len(runs)} runs failed; the map shows them as failed",
              file=sys.stderr)
    return EXIT_FAILURE if failed else 0


def run_at_once(runs, resume, jobs):
    """run_all's runs `jobs` at a time (launcher/studies/parallel.py)."""
    labelled = []
    for index, (label, folder, run) in enumerate(runs):
        if resume and done_before(folder):
            print(f"[regimes {index + 1}/{len(runs)}] {label}: done before, kept", flush=True)
            continue
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        labelled.append((index, label, run))

    def finished(index, code):
        write_json(os.path.join(runs[index][1], regime_map.STATUS_FILE), {"exit_code": code})

    code = parallel.run_at_once(labelled, jobs, "regimes", finished, total=len(runs))
    if code == EXIT_FAILURE:
        print("launch.py regimes: some runs failed; the map shows them as failed", file=sys.stderr)
    return code


def main(argv):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    try:
        ns, plan, runs = parse(argv)
        check_machine(runs)
    except UsageError as error:
        print(f"launch.py regimes: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not ns.report_only:
        minutes = len(runs) * (plan["max_time"] + START_UP_SECONDS) / 60
        print(f"[regimes] {len(runs)} runs of {plan['max_time']:g} s each, about {minutes:.0f} minutes", flush=True)
        os.makedirs(ns.log_dir, exist_ok=True)
        write_json(os.path.join(ns.log_dir, regime_map.PLAN_FILE), plan, indent=1)
        try:
            measure_limits(ns, plan, split_at_double_dash(list(argv))[1])
        except workers.LimitFailed as error:
            print(f"launch.py regimes: {error}", file=sys.stderr)
            return EXIT_FAILURE
        started = time.time()
        code = run_all(runs, ns.resume, ns.jobs)
        timing.record(ns.log_dir, "regimes", argv, time.time() - started, ns.resume)
        if code == EXIT_INTERRUPTED:
            return code
        return report(ns) or code
    return report(ns)


def report(ns):
    try:
        result = paired.judged_map(regime_map.build(ns.log_dir))  # the answers as the docs give them
    except regime_map.RegimeMapError as error:
        print(f"launch.py regimes: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    text, paths = regime_map.write(result, ns.log_dir)
    if ns.figures:
        from analysis import regime_figures

        paths += regime_figures.draw(result, ns.log_dir)
    print("\n" + text)
    print("written:\n" + "\n".join(f"  {path}" for path in paths), flush=True)
    return 0


def run(argv):
    return supervision.run_subprogram(main, argv)
