"""The file `launch.py tune` writes (tuned.json) and what a run takes from it (`--tuned FILE`).

tuned.json holds, per cell (network, data set, profile, links, split: cell_key), per scheme, the best values its
search found: their flags, the trials run and pruned, the best objective and the spread of the few best trials. A
run started with --tuned FILE gives each of its modes the flags of its scheme in the run's own cell; a file that has
no entry for the cell is refused in one line. A cell is named here once: its key (cell_key, of a map's cell
cell_key_of) and its profile as tables and folders write it (compact).
"""
import os

from training import config, esync_variants, modes
from training.checks import UsageError
from training.files import read_json, write_json

FILE_NAME = "tuned.json"  # in the search's --log-dir, and beside the results committed from it
LOOPBACK = "loopback"


def cell_key(network, dataset, profile, link, non_iid):
    """'lenet/fashion-mnist/1,1,4/loopback/iid': the cell a search ran in; `link` is loopback or the links' ratio."""
    profile = ",".join(f"{float(factor):g}" for factor in profile.split(","))
    return "/".join([network, dataset, profile, link_name(link), "niid" if non_iid else "iid"])


def cell_key_of(result, cell):
    """The key of a cell of a map (analysis/regime_map.py's result and one of its cells): the cell whose values it
    ran at."""
    link = cell["link"] if cell["link"] == LOOPBACK else f"{cell['link']:g}"
    return cell_key(result["network"], result["dataset"], cell["profile"], link, cell["split"] == "niid")


COMPACT_ABOVE = 8  # profiles of more devices are written NxF, F for N devices in a row (launcher/workers.py)


def compact(profile):
    """A profile as tables and folders name it: as given up to COMPACT_ABOVE devices, else its runs of equal factors
    as NxF ("48x1,16x4")."""
    factors = profile.split(",")
    if len(factors) <= COMPACT_ABOVE:
        return profile
    runs = []
    for factor in factors:
        if runs and runs[-1][1] == factor:
            runs[-1][0] += 1
        else:
            runs.append([1, factor])
    return ",".join(f"{n}x{factor}" if n > 1 else factor for n, factor in runs)


def link_name(link):
    """loopback, a ratio ('12') or a rate ('100mbit')."""
    if link in (None, LOOPBACK):
        return LOOPBACK
    try:
        return f"{float(link):g}"
    except ValueError:
        return str(link)


def read(path):
    """The cells of a tuned.json ({} where the file does not exist yet); UsageError for a file that is not one."""
    if not os.path.exists(path):
        return {}
    try:
        cells = read_json(path)["cells"]
        if not isinstance(cells, dict):
            raise TypeError
        return cells
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--tuned {path}: not a tuned.json of launch.py tune") from None


def write(path, cell, entry):
    """Write one cell's entry into tuned.json, keeping the other cells and the schemes of this one it does not
    name."""
    cells = read(path)
    schemes = {**cells.get(cell, {}).get("schemes", {}), **entry["schemes"]}
    cells[cell] = {**entry, "schemes": schemes}
    write_json(path, {"cells": cells}, indent=1)


def reuse(path, source, cell, command):
    """Give `cell` the values chosen in the file's cell `source` (a neighbour's), marked as reused from it; its
    table."""
    cells = read(path)
    if source not in cells:
        raise UsageError(f"--values-of {source}: {path} holds {', '.join(sorted(cells)) or 'no cell'}")
    network, dataset, profile, link, split = cell.split("/")
    entry = {**cells[source], "commands": [command], "wall_seconds": 0, "reused_from": source, "network": network,
             "dataset": dataset, "profile": profile, "link": link, "split": split}
    cells[cell] = entry
    write_json(path, {"cells": cells}, indent=1)
    return markdown(cell, entry)


def scheme_of(mode, esync_policy):
    """The scheme of tune that a launcher mode runs: esync under a policy other than the default is esync-<policy>."""
    if mode == modes.ESYNC and esync_policy != config.default("esync_policy"):
        return esync_variants.PREFIX + esync_policy
    return mode


def flags_for(path, cell, modes, esync_policy, collective=None):
    """{mode: its tuned flags} for the modes of a run in `cell`, each at the values searched over `collective` where
    the file has them (its scheme's name @collective), else at its scheme's; UsageError where the file has no such
    cell."""
    schemes = cell_schemes(path, cell)
    found = {}
    for mode in modes:
        scheme = scheme_of(mode, esync_policy)
        scheme = f"{scheme}@{collective}" if f"{scheme}@{collective}" in schemes else scheme
        if scheme in schemes:
            found[mode] = flags_of(schemes[scheme])
    return found


def scheme_flags(path, cell, scheme):
    """The tuned flags of one scheme of `cell`, () where it was not searched: for the runs whose own cell is not the
    one searched (fast-only trains on the fastest devices of the cell's profile)."""
    schemes = cell_schemes(path, cell)
    return flags_of(schemes[scheme]) if scheme in schemes else ()


def cell_schemes(path, cell):
    cells = read(path)
    if not cells:
        raise UsageError(f"--tuned {path}: no such file of launch.py tune")
    if cell not in cells:
        raise UsageError(f"--tuned {path} was tuned for {', '.join(sorted(cells))}, not for this run's cell {cell}")
    return cells[cell]["schemes"]


def flags_of(found):
    return tuple(f"{flag}={value}" for flag, value in found["flags"].items())


# ----------------------------------------------------------------------------------------------
# Its table

PROTOCOL = "seeds-v1"  # several seeds a trial, a sampler of each study's own, misses scored, a robust choice
PRE_PROTOCOL = "taken before the search's protocol (one seed a trial, every study drawing the same values)"


def values_text(found):
    """The chosen flags as 'flag value, ...', a value at its range's edge marked."""
    return ", ".join((f"{flag} {value:.3g}" if isinstance(value, (int, float)) else f"{flag} {value}")
                     + (" (at its range's edge)" if name in found.get("at_edge", []) else "")
                     for (flag, value), name in zip(found["flags"].items(), found["values"])) or "–"


def seeds_text(results, best=False):
    """A trial's seeds as '4.1, 5.2, diverged, missed' (with `best`: '4.1 s, missed at 0.761')."""
    def text(r):
        if r.get("diverged"):
            return "diverged"
        if r.get("time") is not None:
            return f"{r['time']:.1f}" + (" s" if best else "")
        return f"missed at {r['best']:.3f}" if best else "missed"

    return ", ".join(text(r) for r in results) or "–"


def largest_rate_text(found):
    largest, chosen = found.get("largest_robust_rate"), found["flags"].get(found.get("rate_flag"))
    if largest is None:
        return "none"
    below = f" ({chosen / largest:.2g} of it)" if isinstance(chosen, (int, float)) and found.get("robust") else ""
    return f"{largest:.3g}{below}"


def markdown(cell, entry):
    """The table of one cell's searches: per scheme its trials, the chosen values and their seeds' times."""
    from analysis.tables import markdown_table

    cell = shown(cell)
    if entry.get("reused_from"):
        cell = f"{cell}: not searched; the values of {shown(entry['reused_from'])}"
    if entry.get("protocol") != PROTOCOL:
        rows = [[scheme, values_text(found), f"{found['complete']} / {found['pruned']} / {found['failed']}"]
                for scheme, found in entry["schemes"].items()]
        return (f"### {cell}: {PRE_PROTOCOL}\n\n"
                + markdown_table(["scheme", "best values", "trials complete / pruned / failed"], rows) + "\n")
    rows = []
    for scheme, found in entry["schemes"].items():
        chosen = (values_text(found) if found.get("robust") else
                  f"no stable values found (the best trial, {values_text(found)}, missed on a seed)")
        if found.get("widenings"):
            chosen += f"; searched again over {found['widenings'][-1]['ranges']}"
        rows.append([scheme, f"{found['complete']} / {found['pruned']} / {found['failed']}", chosen,
                     seeds_text(found.get("chosen_results", [])), largest_rate_text(found),
                     f"{found.get('diverged_runs', 0)} of {found.get('seed_runs', 0)}"])
    seeds = ", ".join(map(str, entry["trial_seeds"]))
    return (f"### {cell}: each scheme's chosen values (target {entry['target']:g} on {entry['holdout']} held-out "
            f"training samples, {entry['max_time']:g} s a run, each trial on seeds {seeds})\n\n"
            + markdown_table(["scheme", "trials complete / pruned / failed", "chosen values",
                              f"their seeds' times to {entry['target']:g} (s)",
                              "largest rate that reached it on every seed", "runs diverged"], rows) + "\n")


def reused_markdown(cells):
    """The cells that took a neighbour's values (`launch.py tune --values-of`), one row each."""
    from analysis.tables import markdown_table

    rows = [[shown(cell), shown(entry["reused_from"]), ", ".join(entry["schemes"])] for cell, entry in cells.items()]
    return markdown_table(["cell, not searched", "takes the values chosen in", "schemes"], rows) + "\n"


def shown(cell):
    """A cell's key as the tables write it: a profile of many devices as runs of equal factors ("48x1,16x117")."""
    parts = cell.split("/")
    return "/".join(parts[:2] + [compact(parts[2])] + parts[3:]) if len(parts) == 5 else cell


def draw(folder, cell, target, studies):
    """One figure per scheme of `studies` ([(scheme, its Optuna study, its search space)]): each complete trial's
    objective against each hyperparameter, and each pruned one's last seed's score (hollow); their paths."""
    import optuna

    from analysis.figures import plt, save_figure
    from training.options import Range

    os.makedirs(folder, exist_ok=True)
    written = []
    for scheme, study, space in studies:
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
                       label="pruned (its last seed's score)")
            ax.set_xscale("log" if rng.log else "linear")
            if isinstance(rng, Range):
                ax.set_xlim(rng.low, rng.high)
            ax.set_xlabel(flag)
            ax.set_ylabel(f"median seconds to {target:g} (penalised)")
        axes[0][0].legend(fontsize="small")
        fig.suptitle(f"{scheme}: {cell}")
        written += save_figure(fig, folder, scheme, pdf=False)
    return written

