"""The file `launch.py tune` writes (tuned.json) and what a run takes from it (`--tuned FILE`).

tuned.json holds, per cell (network, data set, profile, links, split: cell_key), per scheme, the best values its
search found: their flags, the trials run and pruned, the best objective and the spread of the few best trials. A
run started with --tuned FILE gives each of its modes the flags of its scheme in the run's own cell; a file that has
no entry for the cell is refused in one line.
"""
import os

from training import config, esync_variants, modes
from training.checks import UsageError
from training.files import read_json, write_json

LOOPBACK = "loopback"


def cell_key(network, dataset, profile, link, non_iid):
    """'lenet/fashion-mnist/1,1,4/loopback/iid': the cell a search ran in; `link` is loopback or the links' ratio."""
    profile = ",".join(f"{float(factor):g}" for factor in profile.split(","))
    return "/".join([network, dataset, profile, link_name(link), "niid" if non_iid else "iid"])


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


def scheme_of(mode, esync_policy):
    """The scheme of tune that a launcher mode runs: esync under a policy other than the default is esync-<policy>."""
    if mode == modes.ESYNC and esync_policy != config.default("esync_policy"):
        return esync_variants.PREFIX + esync_policy
    return mode


def flags_for(path, cell, modes, esync_policy):
    """{mode: its tuned flags} for the modes of a run in `cell`; UsageError where the file has no such cell."""
    schemes = cell_schemes(path, cell)
    return {mode: flags_of(schemes[scheme_of(mode, esync_policy)])
            for mode in modes if scheme_of(mode, esync_policy) in schemes}


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
