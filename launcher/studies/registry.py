"""The studies: each declared in results/<name>/declared.json before its first run, and run by its name as declared.

    python launch.py study                        # every study: declared before its results or after, run or not
    python launch.py study <name> [--resume]      # run it as declared, its results kept in results/<name>/

A declaration is a JSON object: the question, `command` (or `commands`, run in order: launch.py's own command lines,
`python launch.py regimes ... -ld logs/<folder>`), the seeds, the budget, the targets, the test and where the values
come from. `launch.py study <name>` refuses, in one line and before anything runs, a declaration that is not
committed as it stands (the commit order then shows it came before the results) and a folder that holds results of
another command: an arm, a seed or a target added to a study that has results is a new study (results/<name>-v2/),
the earlier one kept. After each map its plan, results, table and wall time are copied from its log folder into the
study's folder (into <name>/<log folder's name>/ where the study runs several maps); after a search (`launch.py tune
... --until N`), its tuned.json, tuned.md and its trials (studies.db, also every --keep-every seconds while it runs),
which go back into a log folder that lacks them (a fresh clone): the same search again runs only the trials its
studies lack, on any machine (kept.py). The study's README.md gets a generated block for each result; `launch.py
docs` fills them, and the README's verdict table (every study that holds a map) follows.
"""
import argparse
import os
import shlex
import signal
import subprocess
import sys

from analysis import regime_map, timing, tuned
from launcher.studies import cost
from launcher.studies.kept import (KEEP_EVERY, KEPT, RESULTS, SEARCH_KEPT, keep, keep_store, kept_files, kept_in,
                                   map_folder, restore_search)
from launcher.supervision import interrupt
from training.checks import OneLineErrorParser, UsageError
from training.faults.failures import EXIT_USAGE
from training.files import read_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # launch.py's; and the studies'

DECLARATION = regime_map.DECLARATION_FILE
# a map's, the paper's table's, a noise scale's, a rate sweep's, one launcher run's (the README's demo)
RESULT_FILES = ("regimes.json", "paper.json", "noise-scale.json", "rate-sweep.json", "experiment.json")
# the launcher's commands a declaration may run
RUNNABLE = ("regimes", "tune", "calibrate", "noise-scale", "rate-sweep")


def declaration_path(name, root=ROOT):
    return os.path.join(root, RESULTS, name, DECLARATION)


def declared(name, root=ROOT):
    """The declaration of study `name`; UsageError (one line) where there is none or it is not one."""
    path = declaration_path(name, root)
    if not os.path.isfile(path):
        known = ", ".join(studies(root)) or "none"
        raise UsageError(f"no study {name!r}: no {os.path.relpath(path, root)} (declared: {known})")
    try:
        found = read_json(path)
    except ValueError as error:
        raise UsageError(f"{os.path.relpath(path, root)}: not JSON ({error})") from None
    if not isinstance(found, dict) or not commands_of(found):
        raise UsageError(f"{os.path.relpath(path, root)}: give the study's command, or its commands in order")
    return found


def studies(root=ROOT):
    """The names of the declared studies."""
    folder = os.path.join(root, RESULTS)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(name for name in names if os.path.isfile(declaration_path(name, root)))


def commands_of(declaration):
    """[the launcher's arguments] of each command the declaration runs, in order."""
    commands = declaration.get("commands") or ([declaration["command"]] if declaration.get("command") else [])
    return [shlex.split(command)[2:] for command in commands if isinstance(command, str)]


def check_runnable(name, commands):
    for argv in commands:
        if not argv or argv[0] not in RUNNABLE:
            raise UsageError(f"study {name}: runs {' '.join(argv[:1]) or 'nothing'}; a study runs launch.py "
                             + " or ".join(RUNNABLE))


def git(root, *argv):
    return subprocess.run(["git", "-C", root, *argv], capture_output=True, text=True)


def check_committed(name, root=ROOT):
    """UsageError unless the declaration is committed as it stands (where the study lives in a git checkout)."""
    path = os.path.relpath(declaration_path(name, root), root)

    if git(root, "rev-parse", "--is-inside-work-tree").returncode != 0:
        return
    if (git(root, "ls-files", "--error-unmatch", path).returncode != 0
            or git(root, "diff", "--quiet", "HEAD", "--", path).returncode != 0):
        raise UsageError(f"{path} is not committed as it stands: commit the declaration before the study runs, so "
                         "that the history shows it came first")


def check_same_study(name, maps, root=ROOT, searches=()):
    """UsageError where a map's or a search's kept results came from another command than the one declared."""
    kept_search = tuned.read(os.path.join(root, RESULTS, name, SEARCH_KEPT[0]))
    for argv in [*maps, *searches]:
        wanted = f"python launch.py {shlex.join(argv)}"
        if argv[0] == "regimes":
            ran = timing.read(kept_in(name, argv, len(maps), root)).get("command")
        else:
            commands = [command for cell in kept_search.values() for command in cell.get("commands", [])]
            ran = next((c for c in commands if as_declared(c) != as_declared(wanted)), None)
        if ran and as_declared(ran) != as_declared(wanted):
            raise UsageError(f"results/{name} holds results of `{ran}`, not of the declared `{wanted}`: declare the "
                             f"changed study anew (results/{name}-v2/{DECLARATION}); the earlier one stays")


def as_declared(command):
    """A command line's words, --resume aside (a resumed map runs the same study)."""
    return [word for word in shlex.split(command) if word != "--resume"]


def run_study(name, resume, root=ROOT, keep_every=KEEP_EVERY):
    """Run every command of study `name` in order (a map with --resume where asked); the first exit code that is not
    0, else 0."""
    declaration = declared(name, root)
    commands = commands_of(declaration)
    check_runnable(name, commands)
    maps = [argv for argv in commands if argv[0] == "regimes"]
    for argv in maps:
        map_folder(argv)
    check_rivals(name, declaration, maps)
    check_committed(name, root)
    check_same_study(name, maps, root, [argv for argv in commands if argv[0] == "tune"])
    for argv in commands:
        if kept_files(argv):
            map_folder(argv)  # named before anything runs
    for argv in commands:
        if argv[0] == "tune":
            restore_search(name, argv, root)
    for argv in commands:
        resumed = argv + ["--resume"] if resume and argv[0] == "regimes" else argv
        print(f"[study {name}] python launch.py {shlex.join(resumed)}", flush=True)
        code = run_command(resumed, root, (lambda: keep_store(name, argv, root)) if argv[0] == "tune" else None,
                           keep_every)
        # the results file, once the command wrote it
        written = {"regimes": KEPT[1], "tune": SEARCH_KEPT[0]}.get(argv[0])
        if written and os.path.isfile(os.path.join(root, map_folder(argv), written)):
            keep(name, argv, len(maps), root)
        if code != 0:
            return code
    print(f"[study {name}] done: `python launch.py docs` writes its README and the docs from its results", flush=True)
    return 0


def run_command(argv, root, while_running=None, every=KEEP_EVERY):
    """The exit code of `python launch.py argv`. It runs in a session of its own, so that an interrupt of the study
    (Ctrl-C, SIGTERM) reaches it once, from here: it stops as on its own Ctrl-C (its runs in flight stopped, what it
    has written kept) and is waited for; a second interrupt only waits on. `while_running`, where given, is called
    every `every` seconds until it ends."""
    # SIGINT even where this process was started with it ignored (a background job of a script): `kill -INT` stops
    # it. Installed before the command starts, which would inherit the ignored SIGINT and never stop
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    asked = False
    try:
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "launch.py"), *argv], cwd=root,
                                start_new_session=True)
        while True:
            try:
                try:
                    return proc.wait(timeout=every if while_running else None)
                except subprocess.TimeoutExpired:
                    while_running()  # an interrupt that comes while it runs is the outer handler's too
            except KeyboardInterrupt:
                if not asked:
                    print(f"[study] interrupted: `launch.py {argv[0]}` stops its runs in flight and keeps what it "
                          "wrote", file=sys.stderr, flush=True)
                    proc.send_signal(signal.SIGINT)
                    asked = True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def missing_rivals(declaration, maps):
    """What a verdict study must run, or leave out with a reason ({"left_out": {scheme: why}}), that no map of it runs:
    the project's schemes (launch.py regimes' default list) in any topology; where a map's links cost anything, each
    synchronous scheme it runs also over ring allreduce (<scheme>@ring); and each scheme of local steps it runs also on
    the fast devices alone (fast:<scheme>, over any collective)."""
    from analysis import scheme_names

    left_out = set(declaration.get("left_out") or {})
    wanted = []
    for argv in maps:
        ns = cost.map_options(argv)
        schemes = ns.schemes.split(",")
        costly = any(link != regime_map.LOOPBACK for link in ns.links.split(","))
        for scheme in schemes:
            base, collective = scheme_names.collective_of(scheme)
            if costly and collective is None and scheme_names.synchronous(scheme):
                wanted.append(f"{scheme}{scheme_names.OVER}ring")
            if scheme_names.takes_local_steps(scheme) and not scheme_names.on_fast_devices(scheme):
                wanted.append(scheme_names.FAST + base)  # over any collective
    run = {scheme for argv in maps for scheme in cost.map_options(argv).schemes.split(",")}
    anywhere = {scheme_names.collective_of(scheme)[0] for scheme in run}
    wanted = [s for s in regime_map_schemes() if s not in anywhere] + wanted
    return list(dict.fromkeys(s for s in wanted if s not in run | anywhere and s not in left_out))


def regime_map_schemes():
    """The project's schemes, as launch.py regimes lists them by default."""
    from launcher.studies import regime_map

    return regime_map.DEFAULT_SCHEMES.split(",")


def check_rivals(name, declaration, maps):
    """UsageError where a study declared a verdict study ({"verdict": true}) leaves a rival out without a reason."""
    missing = missing_rivals(declaration, maps)
    if declaration.get("verdict") and missing:
        raise UsageError(f"study {name} is declared a verdict study but runs neither {', '.join(missing)} nor gives "
                         "a reason for leaving each out (\"left_out\": {scheme: why})")


def listing(root=ROOT):
    """One line a folder of results/: whether a study was declared there, before its results or after, and whether it
    ran; a folder of results with no declaration is exploratory."""
    lines = []
    for name, state, (runs, hours, rivals, machine), later in states(root):
        size = (f"; {runs} runs, {hours:.1f} h of training budgets" if runs else "") + (
            f" (about {machine:.1f} h of this machine)" if machine else "") + (
            f", {rivals} of the project's {len(regime_map_schemes())} schemes run or left out with a reason"
            if rivals is not None else "")
        lines.append(f"{name}: {state}{size}" + (f"; superseded by {later}" if later else ""))
    return lines


def states(root=ROOT, names=None):
    """[(study, its state, (runs, hours of training budgets, rivals covered or None, hours of this machine at the
    pace of the maps and searches run here or None), the study superseding it or None)] of each folder of results/ (of `names`
    where given)."""
    top = os.path.join(root, RESULTS)
    later, paces = superseded(root), cost.paces(top)
    rows = []
    for name in names or sorted(entry for entry in os.listdir(top) if os.path.isdir(os.path.join(top, entry))):
        ran = bool(results_files(os.path.join(top, name)))
        if not os.path.isfile(declaration_path(name, root)):
            state = "run, never declared (exploratory)" if ran else "no study"
            rows.append((name, state, (0, 0.0, None, None), None))
            continue
        order = {True: ", declared before its results", False: ", declared after its results", None: ""}
        declaration = read_json(declaration_path(name, root))
        maps = [argv for argv in commands_of(declaration) if argv[:1] == ["regimes"]]
        searches = [argv for argv in commands_of(declaration) if argv[:1] == ["tune"]]
        runs, seconds = cost.size_of(searches + maps)
        missing = missing_rivals(declaration, maps)
        rivals = len([s for s in regime_map_schemes() if s not in missing]) if maps else None
        searched = os.path.isfile(os.path.join(top, name, SEARCH_KEPT[0]))
        state = ("run" + order[declared_first(name, root)] if ran else
                 f"declared, in progress (its search at {search_progress(name, searches, root)})" if searched
                 else "declared, not run")
        machine = cost.machine_hours(searches + maps, paces)
        rows.append((name, state, (runs, seconds / 3600, rivals, machine), later.get(name)))
    return rows


def search_progress(name, searches, root=ROOT):
    """'T of N trials, S of its K schemes done, about H h more': the trials that ended (complete or pruned) in the
    kept search against those its commands declare, and the hours the rest take at the pace of the trials that ended
    (their own times, where tuned.json keeps them: a store carried over from an earlier search holds trials its
    commands' wall time did not run)."""
    from launcher.studies import tune

    kept = tuned.read(os.path.join(root, RESULTS, name, SEARCH_KEPT[0]))
    entries = [entry for cell in kept.values() for entry in cell["schemes"].values()]
    declared = [tune.build_parser().parse_known_args(argv[1:])[0] for argv in searches]
    wanted = sum(len(ns.schemes.split(",")) for ns in declared)
    until = max((ns.until or ns.trials for ns in declared), default=0)
    stages = [stages_ended(entry) for entry in entries]  # a search whose chosen value lay at an edge goes on
    ended = sum(min(until, n) for found in stages for n in found)
    done = sum(all(n >= until for n in found) for found in stages)
    widenings = sum(len(found) - 1 for found in stages)
    total = (wanted + widenings) * until
    timed = [entry for entry in entries if "trial_seconds" in entry]
    seconds, timed_trials = sum(e["trial_seconds"] for e in timed), sum(sum(stages_ended(e)) for e in timed)
    pace = (f", about {seconds / timed_trials * (total - ended) / 3600:.1f} h more"
            if seconds and timed_trials and total > ended else "")
    return (f"{ended} of {total} trials" + (f" ({widenings} widened)" if widenings else "")
            + f", {done} of its {wanted} schemes done{pace}")


def stages_ended(entry):
    """The trials that ended in each stage of a scheme's search: over its declared ranges, then each widening."""
    widened = [stage["ended"] for stage in entry.get("widenings", [])]
    return [entry["complete"] + entry["pruned"] - sum(widened), *widened]


def studies_block(*folders):
    """The studies of `folders` (results/<name>) as a table: state, size, the version that supersedes each (the
    docs' kind `studies`)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(folders[0])))
    lines = ["| study | state | runs | hours of training budgets | hours of this machine, at the pace of the maps and "
             "searches run here (another network's, by the calibrated steps) | superseded by |",
             "|---|---|---|---|---|---|"]
    for name, state, (runs, hours, _, machine), later in states(root, [os.path.basename(f) for f in folders]):
        link = f"[{name}]({name}/)" if os.path.isfile(declaration_path(name, root)) else name
        by_machine = f"{machine:.1f}" if machine is not None and runs else "–"
        lines.append(f"| {link} | {state} | {runs or '–'} | {f'{hours:.1f}' if runs else '–'} | {by_machine} "
                     f"| {later or '–'} |")
    return "\n".join(lines) + "\n"


def superseded(root=ROOT):
    """{study: the study declared as its next version ({"supersedes": study})}."""
    found = {name: read_json(declaration_path(name, root)).get("supersedes") for name in studies(root)}
    return {earlier: name for name, earlier in found.items() if earlier}


def results_files(folder):
    return [os.path.join(top, file_name) for top, _, files in os.walk(folder) for file_name in files
            if file_name in RESULT_FILES]


def declared_first(name, root=ROOT):
    """Whether the commit that added the declaration came before (is an ancestor of, and is not) the first commit of
    any of its results; None where git does not know."""
    def first_commit(path):
        found = git(root, "log", "--format=%H", "--", os.path.relpath(path, root)).stdout.split()
        return found[-1] if found else None

    declaration = first_commit(declaration_path(name, root))
    results = {first_commit(path) for path in results_files(os.path.join(root, RESULTS, name))} - {None}
    if declaration is None or not results:
        return None
    return all(commit != declaration and git(root, "merge-base", "--is-ancestor", declaration, commit).returncode == 0
               for commit in results)


def parse(argv):
    """The options of `launch.py study`; the study's declaration read and checked where a name is given."""
    p = OneLineErrorParser(prog="launch.py study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="the study to run (its folder in results/); none: list them")
    p.add_argument("--resume", action="store_true", help="hand --resume to its maps: keep the runs already done")
    p.add_argument("--keep-every", type=float, default=KEEP_EVERY, metavar="SECONDS",
                   help=f"copy a running search's trials into the study's folder this often (default {KEEP_EVERY:g})")
    p.add_argument("--root", default=ROOT, help="the checkout whose results/ holds the studies (default: this one)")
    ns = p.parse_args(argv)
    ns.root = os.path.abspath(ns.root)
    if not 0 < ns.keep_every < float("inf"):
        raise UsageError(f"--keep-every {ns.keep_every:g}: give a period in seconds")
    if ns.name is None and (ns.resume or ns.keep_every != KEEP_EVERY):
        raise UsageError("--resume and --keep-every are for running a study: give its name")
    if ns.name is not None:
        check_runnable(ns.name, commands_of(declared(ns.name, ns.root)))
    return ns


def run(argv):
    try:
        ns = parse(argv)
        if ns.name is None:
            print("\n".join(listing(ns.root)) or "no study declared")
            return 0
        return run_study(ns.name, ns.resume, ns.root, ns.keep_every)
    except UsageError as error:
        print(f"launch.py study: error: {error}", file=sys.stderr)
        return EXIT_USAGE
