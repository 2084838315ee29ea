"""`launch.py docs`: the result tables of the README and docs/, written again from the committed result files.

A generated table sits between two markers in a markdown file (STUDY a comma list of studies for the kinds of
MANY_FOLDERS, whose rows then make one table; `map` every study that holds a map, in the map's order):

    <!-- generated: KIND STUDY [FIGURE.png] -->
    ...
    <!-- end generated -->

A block of FIGURES' kinds may name a figure (relative to its document), drawn again by `launch.py docs`. A study's
results are in results/<study>/. KIND is one of KINDS: `search`, `verdict` (per cell and target, the leader, the
schemes tied with it, one fast device, whether the cluster pays), `brief`, `answers` (a column a link), `repeats`,
`beside-paper` (ESync beside the paper's figures), `validation` (real time and the virtual clock) or `table1`.
`launch.py docs` rewrites every block of README.md, docs/ and results/ (README.md files); `--check` changes nothing and
exits 1 naming each block that differs.
"""
import difflib
import glob
import importlib
import os
import re
import statistics
import sys

from analysis import paired, paper, paper_tables, paper_text, regime_map, timing, tuned, validation_table
from analysis import scheme_names
from analysis.regime_map import cell_name, cells_at_targets, horizon_of
from analysis.tables import markdown_table
from training import runlog
from training.checks import OneLineErrorParser
from training.files import read_json, write_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(?P<start><!-- generated: (?P<kind>[\w-]+) (?P<folder>\S+)(?: (?P<figure>\S+\.png))? -->\n)"
                   r"(?P<body>.*?)(?P<end><!-- end generated -->)", re.DOTALL)
SPLIT_NAMES = regime_map.SPLIT_NAMES
RESULTS, MAP, EVERY = "results", "map", "all"  # where the studies are; every study that holds a map; every one


class DocsError(Exception):
    """A block names a kind or a study that does not exist; the message is one line."""


# ----------------------------------------------------------------------------------------------
# What each kind of block holds


def search_block(folder):
    """Each cell's search (tuned.markdown), with the commands that ran it and their wall time."""
    cells = tuned.read(os.path.join(folder, tuned.FILE_NAME))
    reused = {cell: entry for cell, entry in cells.items() if entry.get("reused_from")}
    parts = [tuned.markdown(cell, entry) + ran_by([entry], folder)
             for cell, entry in cells.items() if cell not in reused]
    if reused:  # their values are their neighbour's table: one row a cell
        parts.append(tuned.reused_markdown(reused) + ran_by(reused.values(), folder))
    return "\n".join(parts)


def ran_by(entries, folder):
    """'Run by (N minutes in all):' and the commands that wrote these cells of tuned.json, each once: a search
    stopped and started again is the same command run again."""
    ran = [with_committed_values(command, folder) for e in entries for command in e.get("commands", [])]
    commands = list(dict.fromkeys(ran))
    took = sum(e.get("wall_seconds") or 0 for e in entries)
    notes = ([f"{took / 60:.0f} minutes in all"] if took else []) + (
        [f"{len(ran)} runs, each run again going on where it stopped"] if len(commands) < len(ran) else [])
    said = f" ({'; '.join(notes)})" if notes else ""
    return f"\nRun by{said}:\n" + "".join(f"\n    {command}" for command in commands) + "\n" if commands else ""


def verdict_block(*folders):
    """Per cell and target of each folder's map: the leader and its values, the schemes it does not lead beyond the
    spread, one fast device, whether the cluster pays, and what the repeats can tell."""
    rows = [row for folder in folders for row in verdict_rows(folder)]
    return markdown_table(["cell", "target", "repeats", "leader (its tuned values): mean time, misses at the budget",
                           "tied with it (Holm-adjusted p)", "one fast device", "does the cluster pay?",
                           "one device's mean capped time / the best cluster scheme's, paired (95 % interval)",
                           "smallest p the pairs allow", "ratio of times the pairs detect"], rows) + "\n"


EARLIER_MODELS = {  # the mark of a cell charged an earlier link model of the virtual clock: that model
    "†": "† charged on the virtual clock's first link model: one parameter server on one link of a worker's rate, "
         "one transfer at a time, the sums handed back by rank.",
    "‡": "‡ charged on its second: the links shared fairly, but a sum over the servers pulled only once the whole "
         "model was pushed (not pipelined per key). The other virtual cells share every link fairly among its "
         "transfers over the servers each scheme names, the sums pipelined per key (docs/virtual-clock.md)."}


def answers_block(*folders):
    """Does the cluster pay? A row per network, devices, split, clock and target, a column per link (free first): the
    answer, one device's time / the best cluster scheme's, its interval, that scheme; EARLIER_MODELS' marks."""
    answers, links = answers_of(folders)
    rows = [[", ".join(cluster), target, *(answer_text(found[link]) + earlier_model(found[link])
                                           if link in found else "not run" for link in links)]
            for (cluster, target), found in answers.items()]
    names = ["free links" if link == regime_map.LOOPBACK else regime_map.describe_link(link) for link in links]
    marked = any(earlier_model(found[link]) for found in answers.values() for link in found)
    return (markdown_table(["devices, data, clock", "target", *names], rows)
            + (f"\n{' '.join(EARLIER_MODELS.values())}\n" if marked else ""))


def earlier_model(cell):
    """" †" or " ‡" for a virtual cell with costly links whose runs recorded no servers, or no pipelined sums."""
    schemes = cell["schemes"].values()
    if not cell.get("virtual") or cell["link"] == regime_map.LOOPBACK or any(s.get("sums") for s in schemes):
        return ""
    return " ‡" if any(scheme.get("servers") for scheme in schemes) else " †"


def answers_of(folders):
    """({((network and data set, devices, split and clock), target): {link: cell}} in the order met, each cluster's
    targets rising; the links, free first)."""
    answers, links = {}, set()
    for folder in folders:
        result = read_json(os.path.join(folder, regime_map.RESULTS_FILE))
        clock = "virtual clock" if result.get("clock") == runlog.VIRTUAL_CLOCK else "real time"
        for target, cell in paired.judged_cells(folder, result, cells_at_targets(result)):
            devices = f"{len(cell['profile'].split(','))} devices {regime_map.compact(cell['profile'])}"
            cluster = (f"{result['network']}, {result['dataset']}", devices, f"{SPLIT_NAMES[cell['split']]}, {clock}")
            ceiling = later("launcher.studies.noise_scale", "ceiling")(folder, result, cell, target)  # or None
            answers.setdefault((cluster, f"{target:g}"), {})[cell["link"]] = {**cell, "ceiling": ceiling,
                                                                               "virtual": clock != "real time"}
            links.add(cell["link"])
    clusters = list(dict.fromkeys(cluster for cluster, _ in answers))
    ordered = sorted(answers, key=lambda row: (clusters.index(row[0]), float(row[1])))
    return {row: answers[row] for row in ordered}, sorted(links, key=lambda link: -1 if link == regime_map.LOOPBACK
                                                          else link)


def answers_figure(path, *folders):
    """The answers as a figure: per cluster, link and target, the ratio and its interval (analysis/regime_figures.py);
    the network and data set in the title where every row shares them."""
    from analysis import regime_figures

    answers, links = answers_of(folders)
    trained = {cluster[0] for cluster, _ in answers}
    shared = trained.pop() if len(trained) == 1 else ""
    points = [(", ".join(cluster[1 if shared else 0:] + (regime_map.describe_link(link), f"to {target}")),
               found[link].get("cluster_pays"), ratio_of(found[link]))
              for (cluster, target), found in answers.items() for link in links if link in found]
    regime_figures.draw_answers(points, path, shared)


def answer_text(cell):
    said = f"{answer_word(cell)}: {ratio_text(cell)}" if ratio_of(cell) else answer_word(cell)
    return said + (f"; ceiling {cell['ceiling']:.2f}" if cell.get("ceiling") else "")


def answer_word(cell):
    return {"yes": "**yes**", "no": "**no**"}.get(cell.get("cluster_pays"), cell.get("cluster_pays") or "–")


def brief_block(*folders):
    """The verdict in short, one row per cell and target: the leader (in bold where it wins) and the schemes tied
    with it, whether the cluster pays, and by how much."""
    rows = []
    for folder in folders:
        result = read_json(os.path.join(folder, regime_map.RESULTS_FILE))
        for target, cell in paired.judged_cells(folder, result, cells_at_targets(result)):
            rows.append([cell_name(result, cell), f"{target:g}", str(test_of(cell)["repeats"]), brief_leader(cell),
                         answer_word(cell), ratio_text(cell)])
    return markdown_table(["cell", "target", "repeats", "leader (tied with it)", "does the cluster pay?",
                           "one device's mean capped time / the best cluster scheme's, paired (95 % interval)"],
                          rows) + "\n"


def brief_leader(cell):
    if cell["leader"] is None:
        return "none reached the target"
    if cell["winner"]:
        return f"**{scheme_names.display(cell['leader'])}**"
    tied = ", ".join(scheme_names.display(s) for s in cell["tied"][1:])
    return scheme_names.display(cell["leader"]) + (f" ({tied})" if tied else "")


def test_of(cell):
    """What the cell's repeats can tell (regime_map.power_of), as the map stored it or from its times."""
    return cell.get("test") or regime_map.power_of(cell["schemes"])


def ratio_of(cell):
    """One device's time over the best cluster scheme's, as stored (paired: the test's) or from its times; or None."""
    return cell["one_device_over_best"] if "one_device_over_best" in cell else regime_map.one_device_over_best(
        cell["schemes"])


def verdict_rows(folder):
    result = read_json(os.path.join(folder, regime_map.RESULTS_FILE))
    values = tuned_values(folder, result)
    rows = []
    for target, cell in paired.judged_cells(folder, result, cells_at_targets(result)):
        test = test_of(cell)
        rows.append([cell_name(result, cell), f"{target:g}", str(test["repeats"]), leader_text(cell, values),
                     tied_text(cell), alone_text(cell), pays_text(cell), ratio_text(cell), f"{test['floor']:.2g}",
                     "none" if test["detectable_ratio"] is None else f"{test['detectable_ratio']:.1f}×"])
    return rows


def tuned_values(folder, result):
    """{(cell key, scheme): its tuned values as text} from the folder's tuned.json ({} without one)."""
    path = os.path.join(folder, tuned.FILE_NAME)
    found = {}
    for key, entry in (tuned.read(path) if os.path.exists(path) else {}).items():
        for scheme, values in entry["schemes"].items():
            found[(key, scheme)] = tuned.values_text(values)
    return {(cell["split"], cell["profile"], cell["link"], scheme): found.get((tuned.cell_key_of(result, cell), scheme))
            for cell in result["cells"] for scheme in result["schemes"]}


def mean_time(numbers, horizon):
    """A scheme's mean time to the target with each miss at `horizon`, and how many repeats reached it."""
    times = [t if reached else horizon for t, reached in numbers["censored_times"]]
    if not times:
        return "not run"
    diverged = f", {numbers['diverged']} diverged" if numbers.get("diverged") else ""
    return f"{statistics.fmean(times):.1f} s ({numbers['reached']} of {len(times)} reached{diverged})"


def leader_text(cell, values):
    leader = cell["leader"]
    if leader is None:
        return "none reached the target"
    shown = values.get((cell["split"], cell["profile"], cell["link"], leader))
    name = f"**{scheme_names.display(leader)}**" if cell["winner"] else scheme_names.display(leader)
    return f"{name}{f' ({shown})' if shown else ''}: {mean_time(cell['schemes'][leader], horizon_of(cell))}"


def tied_text(cell):
    if cell["leader"] is None:
        return "–"
    adjusted = cell.get("adjusted_p_values", {})
    tied = [f"{scheme_names.display(s)} ({adjusted[s]:.2g})" for s in cell["tied"][1:] if s in adjusted]
    if tied:
        return ", ".join(tied)
    return f"none: it wins (largest p {max(adjusted.values()):.2g})" if adjusted else "–"


def alone_text(cell):
    """One fast device's mean time and, where the map counted them, the median of the steps it took to the target."""
    alone = cell["schemes"].get(scheme_names.STANDALONE)
    if not alone:
        return "not run"
    steps = [v for v in (alone.get("rounds_to_target") or {}).get("values", []) if v is not None]
    return mean_time(alone, horizon_of(cell)) + (f"; {statistics.median(steps):.0f} steps" if steps else "")


def pays_text(cell):
    answer, test = cell.get("cluster_pays"), cell.get("cluster_pays_test")
    if answer is None or not test or answer == "exploratory":
        return f"exploratory: {test['pairs']} paired repeats, a verdict takes {paired.MIN_PAIRS}" if test else "–"
    adjusted = test["adjusted_p_values"]
    if answer == "yes":
        return "**yes**: " + ", ".join(f"{scheme_names.display(s)} (p = {adjusted[s]:.2g})" for s in test["faster"])
    if answer == "no":
        return f"**no**: one device leads every cluster scheme (p ≤ {max(adjusted.values()):.2g})"
    means = regime_map.restricted_means(cell["schemes"])
    ahead = [s for s in adjusted if means[s] < means[scheme_names.STANDALONE]]
    if ahead:
        closest = min(ahead, key=adjusted.get)
        said = (f"cannot be told: {scheme_names.display(closest)} is sooner in the mean, within the spread "
                f"(p = {adjusted[closest]:.2g})")
    else:
        said = "cannot be told: no cluster scheme is sooner than one device in the mean"
    if test["slower"]:
        said += "; one device leads " + ", ".join(f"{scheme_names.display(s)} (p = {adjusted[s]:.2g})"
                                                  for s in test["slower"])
    return said


def ratio_text(cell):
    found = ratio_of(cell)
    if not found:
        return "–"
    bound = {"lower": "≥ ", "upper": "≤ ", "both": "misses on both sides: "}.get(found["bound"], "")
    return (f"{bound}{found['ratio']:.2f} ({paired.interval_text(found)}) against "
            f"{scheme_names.display(found['scheme'])}")


def repeats_block(folder):
    """Per cell and target, each scheme's times on the repeats' seeds, its mean, and its p against the leader."""
    result = read_json(os.path.join(folder, regime_map.RESULTS_FILE))
    parts = []
    for target, cell in cells_at_targets(result):
        horizon = horizon_of(cell)
        rows = []
        for scheme, numbers in regime_map.by_relative_time(cell):
            times = ", ".join(f"{t:.1f}" if reached else "–" for t, reached in numbers["censored_times"])
            p = cell.get("adjusted_p_values", {}).get(scheme)
            rows.append([scheme_names.display(scheme), times or "–", mean_time(numbers, horizon),
                         regime_map.relative_text(numbers), "leader" if scheme == cell["leader"] else
                         ("–" if p is None else f"{p:.2g}")])
        seeds = f"seeds {result['seed']} to {result['seed'] + result['repeats'] - 1}"
        parts.append(f"**{cell_name(result, cell)}, time to {target:g}** ({seeds}, {result['max_time']:g} s a run; "
                     "–: missed)\n\n" + markdown_table(
                         ["scheme", "seconds to the target, seed by seed", "mean, misses at the budget", "× leader",
                          "Holm-adjusted p against the leader"], rows) + "\n")
    if result.get("command"):
        parts.append("\n".join(timing.run_by(with_committed_values(result["command"], folder),
                                              result.get("wall_seconds"))))
    return "\n".join(parts)


def with_committed_values(command, folder):
    """The command as it ran, in a line that runs in any clone: its --tuned file the copy committed beside the results
    (the search's own stays on the machine that ran it), its log folder relative to the repository."""
    command = re.sub(r"(?<!\S)(-ld|--log-dir|--logs) (/\S+)", lambda flag: in_logs(*flag.groups()), command)
    committed = os.path.join(folder, tuned.FILE_NAME)
    if not os.path.exists(committed):
        return command
    inside = os.path.relpath(committed, ROOT)
    shown = committed if inside.startswith(os.pardir) else inside
    return re.sub(r"--tuned \S+", lambda _: f"--tuned {shown}", command)


def in_logs(flag, path):  # `flag path`, the path relative to the repository; one outside it as logs/<its name>
    inside = os.path.relpath(path, ROOT)
    shown = f"logs/{os.path.basename(path.rstrip('/'))}" if inside.startswith(os.pardir) else inside
    return f"{flag} {shown}"


def table1_block(folder):
    """Table 1 as `launch.py paper` wrote it (paper.json), its headings below the page's, and the command that ran
    it with the values committed beside the results."""
    report = read_json(os.path.join(folder, paper.RESULTS_FILE))
    if report.get("command"):
        report = {**report, "command": with_committed_values(report["command"], folder)}
    return re.sub(r"^(#+) ", lambda heading: f"###{heading.group(1)} ", paper_text.format_report(report),
                  flags=re.MULTILINE) + "\n"


def later(module, name):
    """A block drawn by `name` of `module`, imported when used (the launcher's, which the analysis does not load)."""
    return lambda *folders: getattr(importlib.import_module(module), name)(*folders)


KINDS = {"search": search_block, "verdict": verdict_block, "brief": brief_block, "answers": answers_block,
         "repeats": repeats_block, "validation": validation_table.block,
         "beside-paper": paper_tables.beside_paper_block, "table1": table1_block,
         "answers-text": lambda *f: paired.sentences(*answers_of(f), earlier_model),
         "noise-scale": later("launcher.studies.noise_scale", "block"),
         "rate-sweep": later("launcher.studies.rate_sweep", "block"), "demo": later("launcher.results", "demo_block"),
         "studies": later("launcher.studies.registry", "studies_block")}
# the kinds whose block may name several folders
MANY_FOLDERS = ("verdict", "brief", "answers", "beside-paper", "answers-text", "noise-scale", "studies")
FIGURES = {"answers": (answers_figure, "one fast device's mean capped time over the best cluster scheme's, paired by "
                                       "seed, with its 95 % interval, per cluster, link and target")}  # with a figure


# ----------------------------------------------------------------------------------------------
# The files


def documents(root=ROOT):
    """README.md, docs/, results/README.md (every cell in short) and each study's README.md."""
    docs = sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    studies = sorted(glob.glob(os.path.join(root, RESULTS, "*", "README.md")))
    return [os.path.join(root, "README.md"), *docs, *glob.glob(os.path.join(root, RESULTS, "README.md")), *studies]


def regenerate(text, root=ROOT, at=None, draw=False):
    """`text` with every generated block written again from its folder; a block naming a figure (FIGURES' kinds) links
    it below the table, and with `draw` the figure is drawn again (its path relative to the document's folder `at`,
    the repository's by default)."""
    def block(match):
        kind, folder, figure = match.group("kind"), match.group("folder"), match.group("figure")
        if kind not in KINDS:
            raise DocsError(f"a block of unknown kind {kind!r} (known: {', '.join(KINDS)})")
        paths = study_folders(folder.split(","), root, kind)
        if len(paths) > 1 and kind not in MANY_FOLDERS:
            raise DocsError(f"a {kind} block names {len(paths)} folders; only {', '.join(MANY_FOLDERS)} take several")
        body = KINDS[kind](*paths)
        if figure:
            if kind not in FIGURES:
                raise DocsError(f"a {kind} block names a figure; only {', '.join(FIGURES)} draw one")
            body += f"\n![{FIGURES[kind][1]}]({figure})\n"
            if draw:
                FIGURES[kind][0](os.path.join(at or root, figure), *paths)
        return match.group("start") + body + match.group("end")

    return BLOCK.sub(block, text)


def study_folders(names, root, kind):
    """The folders of the studies `names` name: results/<name>, MAP for every study that holds a map, EVERY for every
    folder of results/."""
    results = os.path.join(root, RESULTS)
    unknown = [name for name in names if name not in (MAP, EVERY) and not os.path.isdir(os.path.join(results, name))]
    for name in unknown:
        raise DocsError(f"a {kind} block names {name}, which is not a study of {RESULTS}/")
    every = sorted(entry.path for entry in os.scandir(results) if entry.is_dir())
    return [path for name in names for path in (regime_map.map_studies(results) if name == MAP else every
                                                if name == EVERY else [os.path.join(results, name)])]


def figures_missing(text, at):
    """The figures `text`'s blocks name that are not there."""
    return [m.group("figure") for m in BLOCK.finditer(text)
            if m.group("figure") and not os.path.exists(os.path.join(at, m.group("figure")))]


def stale(root=ROOT, draw=False):
    """{path: (committed text, generated text)} of the documents whose blocks differ from their results or lack a
    figure they name; with `draw`, their figures drawn again."""
    found = {}
    for path in documents(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        at = os.path.dirname(path)
        try:
            fresh = regenerate(text, root, at, draw)
        except DocsError as error:
            raise DocsError(f"{os.path.relpath(path, root)}: {error}") from None
        if fresh != text or figures_missing(fresh, at):
            found[path] = (text, fresh)
    return found


def parse(argv):
    p = OneLineErrorParser(prog="launch.py docs", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="change nothing, draw nothing; exit 1 where a table differs or a figure it names is missing")
    return p.parse_args(argv)


def run(argv):
    ns = parse(argv)
    try:
        differing = stale(draw=not ns.check)
    except DocsError as error:
        print(f"launch.py docs: error: {error}", file=sys.stderr)
        return 2
    for path, (text, fresh) in differing.items():
        name = os.path.relpath(path, ROOT)
        if ns.check:
            changed = sum(1 for line in difflib.unified_diff(text.splitlines(), fresh.splitlines(), n=0)
                          if line.startswith(("+", "-")) and not line.startswith(("+++", "---")))
            missing = figures_missing(fresh, os.path.dirname(path))
            print(f"{name}: {changed} line(s) of its generated tables differ from the results"
                  + (f"; {', '.join(missing)} not drawn" if missing else ""), file=sys.stderr)
        else:
            write_text(path, fresh)
            print(f"wrote {name}")
    return 1 if ns.check and differing else 0
