"""`launch.py sweep`: one launcher experiment per value of a worker flag, then one figure of each mode's final
accuracy against the value (ZenoPS's Figure 7 is a sweep of its paper's rho, the bound here called --eta).

    python launch.py sweep --eta -0.1,-0.01,-0.001,0,0.001,0.01,0.1 --modes zeno --byzantine 1 --attack random \\
        -n lenet --dataset mnist-5k --devices cpu,cpu,cpu,cpu --max-time 30
    python launch.py sweep -l 0.0005,0.001,0.002 --modes esync,sync --slowdown 1,1,4 -n lenet --dataset mnist-5k \\
        --max-time 20 -- -b 32

The launcher's options include its links (--hosts netns with --bandwidth or --comm-ratio); the figure names them.
The first two arguments are the flag (any main.py flag the launcher does not set itself) and its comma-separated
values; the rest is a launch.py command line. Value V runs as that command with `-- FLAG V` added to every worker's
arguments, logging under <log-dir>/<flag>-<V>/; the figure and a JSON of the points go to
<log-dir>/<network>/sweep-<flag>.png and .json.
"""
import copy
import os
import sys

from analysis import summary
from launcher import checks, experiment, runner, supervision
from launcher.dmlc import split_at_double_dash
from training import config, modes
from training.checks import UsageError
from training.faults.failures import EXIT_FAILURE, EXIT_USAGE
from training.files import write_json

USAGE = "usage: launch.py sweep FLAG V1,V2,... LAUNCH-OPTIONS [-- WORKER-ARGS]"


def parse(argv):
    """(flag, [(value, Experiment)]); UsageError (one line) for bad input, before anything runs."""
    if len(argv) < 2 or not argv[0].startswith("-"):
        raise UsageError(USAGE)
    flag, values = argv[0], [v.strip() for v in argv[1].split(",") if v.strip()]
    if flag in checks.RESERVED_WORKER_FLAGS:
        raise UsageError(f"{flag} is set by the launcher; sweep it through the launcher's own option instead")
    if len(values) < 2 or len(set(values)) != len(values):
        raise UsageError(f"sweep {flag} needs at least two distinct values, got {argv[1]!r}")
    own, worker_args = split_at_double_dash(list(argv[2:]))
    for value in values:
        config.build_parser().parse_args(worker_args + [flag, value])  # a bad value exits 2 here, in one line
    given = experiment.build_parser().parse_args(own)
    runs = []
    for value in values:
        options = copy.copy(given)
        options.log_dir = os.path.join(given.log_dir, folder_name(flag, value))
        runs.append((value, experiment.build(options, worker_args + [flag, value])))
    checks.check_worker_flags_read(worker_args + [flag], runs[0][1].modes)
    return flag, runs


def folder_name(flag, value):
    return f"{flag.lstrip('-')}-{value}"


def final_accuracies(run):
    """{mode: final accuracy} of one value's experiment (None where a mode logged none)."""
    network_dir = os.path.join(run.log_dir, run.network)
    found = {}
    for mode in run.modes:
        folder = os.path.basename(run.mode_folder(mode))
        loaded = summary.load_summary(network_dir, folder)
        found[mode] = loaded.get("final_accuracy") if loaded else None
    return found


def links_of(run):
    """The links the run's first mode recorded (None when it recorded none)."""
    folder = os.path.basename(run.mode_folder(run.modes[0]))
    return (summary.load_summary(os.path.join(run.log_dir, run.network), folder) or {}).get("links")


def as_number(text):
    try:
        return float(text)
    except ValueError:
        return None


def draw(flag, points, network, path, links=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    values = [as_number(v) for v, _ in points]
    if None in values:  # named values (--staleness hinge): evenly spaced, in the order given
        ax.set_xticks(range(len(points)), [v for v, _ in points])
        values = list(range(len(points)))
    for mode in points[0][1]:
        ax.plot(values, [accuracies[mode] for _, accuracies in points], "o-", color=modes.MODES[mode].colour,
                label=modes.MODES[mode].display)
    ax.set_xlabel(flag)
    ax.set_ylabel("final test accuracy")
    ax.set_title(f"{network}: final accuracy against {flag}" + (f"\nlinks: {links}" if links else ""),
                 fontsize="small" if links else None, wrap=True)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{USAGE}\n\n{__doc__}")
        return 0
    try:
        flag, runs = parse(argv)
        checks.check_machine(runs[0][1])
    except UsageError as error:
        print(f"launch.py sweep: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    code = runner.run_in_turn([(f"{flag} {value}", run) for value, run in runs], "sweep")
    if code:
        return code
    points = [(value, final_accuracies(run)) for value, run in runs]
    first = runs[0][1]
    out_dir = os.path.join(os.path.dirname(first.log_dir), first.network)
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, f"sweep-{flag.lstrip('-')}")
    links = links_of(first)
    write_json(stem + ".json", {"flag": flag, "links": links,
                                "points": [{"value": v, "final_accuracy": a} for v, a in points]}, indent=1)
    if any(a is None for _, accuracies in points for a in accuracies.values()):
        print(f"launch.py sweep: a run logged no accuracy; see {stem}.json", file=sys.stderr)
        return EXIT_FAILURE
    draw(flag, points, first.network, stem + ".png", links)
    for value, accuracies in points:
        print(f"{flag} {value}: " + ", ".join(f"{mode} {a:.4f}" for mode, a in accuracies.items()))
    print(f"written: {stem}.json, {stem}.png", flush=True)
    return 0


def run(argv):
    return supervision.run_subprogram(main, argv)
