"""What a study costs before it runs: its runs and the seconds of their training budgets, from its declared commands,
and the hours of this machine they take at the pace of the maps already run here of the same network and clock
(each map's timing.json: its wall seconds over its training budgets, runs at once included)."""
import glob
import os
import shlex

from analysis import timing


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
    """What a run's pace here depends on: its network and its clock."""
    ns = options_of(argv)
    return ns.network, ns.clock


def paces(results):
    """{(network, clock): this machine's wall seconds a second of training budget} over the maps run under
    `results` (their timing.json), the maps of a kind taken together."""
    spent = {}
    for path in glob.glob(os.path.join(results, "**", timing.FILE_NAME), recursive=True):
        recorded = timing.read(os.path.dirname(path))
        argv = shlex.split(recorded.get("command", ""))[2:]
        if argv[:1] != ["regimes"] or not recorded.get("wall_seconds"):
            continue
        kind = kind_of(argv)
        wall, budgets = spent.get(kind, (0, 0.0))
        spent[kind] = (wall + recorded["wall_seconds"], budgets + command_size(argv)[1])
    return {kind: wall / budgets for kind, (wall, budgets) in spent.items() if budgets}


def machine_hours(commands, known_paces):
    """Hours of this machine a study's commands take at their kinds' paces; None where a kind has no map run yet."""
    seconds = 0.0
    for argv in commands:
        pace = known_paces.get(kind_of(argv))
        if pace is None:
            return None
        seconds += command_size(argv)[1] * pace
    return seconds / 3600
