"""What a study costs before it runs: its runs and the seconds of their training budgets, from its declared commands,
and the hours of this machine they take at the pace of the maps and searches already run here of the same network and
clock: a map's timing.json, its wall seconds over its training budgets, runs at once included; a search's tuned.json,
its trials' own seconds over their seeds' budgets (a search stops a run at its target and prunes trials, so it goes
faster than a map; a search of a kind none ran yet is paced as its maps). A network none ran is paced as one that
ran on the same clock, times the ratio of their fast steps as `launch.py calibrate` measured them here
(calibration-<network>.json beside a study's results)."""
import glob
import os
import shlex

from analysis import timing
from training.files import read_json

CALIBRATIONS = "calibration-*.json"


def map_options(argv):
    """A map's parsed options (launch.py regimes' parser, its defaults where the command leaves them out)."""
    from launcher.studies import regime_map

    return regime_map.build_parser().parse_known_args(argv[1:])[0]


def options_of(argv):
    """A map's or a search's parsed options."""
    if argv[:1] != ["tune"]:
        return map_options(argv)
    from launcher.studies import tune

    return tune.build_parser().parse_known_args(argv[1:])[0]


def command_size(argv):
    """(runs, seconds of training budgets) of one command: a map's every run, or a search's at its most (every trial
    on every seed, none pruned)."""
    ns = options_of(argv)
    if argv[:1] == ["tune"]:
        runs = len(ns.schemes.split(",")) * (ns.until or ns.trials) * ns.trial_seeds
    else:
        runs = len(ns.links.split(",")) * len(ns.profiles.split("/")) * len(ns.splits.split(",")) * len(
            ns.schemes.split(",")) * ns.repeats
    return runs, runs * ns.max_time


def size_of(commands):
    """(runs, seconds of training budgets) of a study's maps and searches."""
    sizes = [command_size(argv) for argv in commands]
    return sum(runs for runs, _ in sizes), sum(seconds for _, seconds in sizes)


def kind_of(argv):
    """What a run's pace here depends on: its command (a map or a search), its network and its clock."""
    ns = options_of(argv)
    return argv[0], ns.network, ns.clock


def paces(results):
    """{(command, network, clock): this machine's wall seconds a second of training budget} over the maps and searches
    kept under `results`, those of a kind taken together."""
    spent = {}
    for kind, wall, budgets in [*map_times(results), *search_times(results)]:
        before = spent.get(kind, (0, 0.0))
        spent[kind] = (before[0] + wall, before[1] + budgets)
    measured = {kind: wall / budgets for kind, (wall, budgets) in spent.items() if budgets}
    return {**scaled_paces(measured, step_seconds(results)), **measured}


def step_seconds(results):
    """{network: a fast step's seconds} of the calibrations committed under `results`; the fastest where several."""
    steps = {}
    for path in glob.glob(os.path.join(results, "**", CALIBRATIONS), recursive=True):
        record = read_json(path)
        steps[record["network"]] = min(record["step_seconds"], steps.get(record["network"], float("inf")))
    return steps


def scaled_paces(measured, steps):
    """{(command, network, clock): pace} for each calibrated network without a measured pace of that command and
    clock: a calibrated network's measured pace times the ratio of their steps (the first such network, by name)."""
    scaled = {}
    for (command, network, clock), pace in sorted(measured.items()):
        if network not in steps:
            continue
        for other, seconds in steps.items():
            scaled.setdefault((command, other, clock), pace * seconds / steps[network])
    return scaled


def map_times(results):
    """(kind, wall seconds, seconds of training budgets) of each map's timing.json under `results`."""
    for path in glob.glob(os.path.join(results, "**", timing.FILE_NAME), recursive=True):
        recorded = timing.read(os.path.dirname(path))
        argv = shlex.split(recorded.get("command", ""))[2:]
        if argv[:1] == ["regimes"] and recorded.get("wall_seconds"):
            yield kind_of(argv), recorded["wall_seconds"], command_size(argv)[1]


def search_times(results):
    """(kind, its trials' own seconds, their seeds' budgets) of each cell of a tuned.json under `results`."""
    from analysis import tuned

    for path in glob.glob(os.path.join(results, "**", tuned.FILE_NAME), recursive=True):
        for cell in tuned.read(path).values():
            timed = [entry for entry in cell.get("schemes", {}).values() if entry.get("trial_seconds")]
            argv = shlex.split(next(iter(cell.get("commands", [])), ""))[2:]
            if timed and argv[:1] == ["tune"]:
                yield (kind_of(argv), sum(entry["trial_seconds"] for entry in timed),
                       sum(entry["seed_runs"] for entry in timed) * cell["max_time"])


def machine_hours(commands, known_paces):
    """Hours of this machine a study's commands take at their kinds' paces (a search's, where none ran, as its maps');
    None where a kind has no map run yet."""
    seconds = 0.0
    for argv in commands:
        kind = kind_of(argv)
        pace = known_paces.get(kind, known_paces.get(("regimes", *kind[1:])))
        if pace is None:
            return None
        seconds += command_size(argv)[1] * pace
    return seconds / 3600
