"""The layout's rules: a mode or a policy is compared by name only in its own module and the catalog, no folder holds
more than 20 modules, no source file is longer than 450 lines."""
import os
import re

import pytest

from coordination.rules import RULES
from launcher.cluster import ROOT
from training import modes

NAMES = sorted(set(modes.names()) | set(RULES), key=len, reverse=True)
LITERAL = "|".join(re.escape(name) for name in NAMES)
# A name that holds a mode, scheme, policy or table row, compared with one of their names written out.
COMPARISON = re.compile(
    rf"\b\w*(mode|scheme|policy|row)\w*\s*(==|!=|\bin\b|\bnot in\b)\s*[\(\[{{]?[^#\n]*\"({LITERAL})\""
    rf"|\"({LITERAL})\"\s*(==|!=)\s*\w*(mode|scheme|policy|row)"
    rf"|\w*(mode|scheme|policy|row)\w*\.startswith\(\"({LITERAL})")
ALLOWED = {os.path.join("training", "modes.py")}  # the catalog; a rule module may name itself


def source_files():
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [s for s in subfolders if not s.startswith(".") and s not in ("__pycache__", "logs")]
        for name in names:
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(folder, name), ROOT)


def own_module(path):
    return path.startswith(os.path.join("coordination", "rules")) or path in ALLOWED


def test_no_mode_or_policy_is_compared_by_name_outside_its_module_and_the_catalog():
    found = [f"{path}:{number}: {line.strip()}" for path in source_files()
             if not path.startswith("tests") and not own_module(path)
             for number, line in enumerate(open(os.path.join(ROOT, path), encoding="utf-8"), start=1)
             if COMPARISON.search(line)]

    assert found == []


@pytest.mark.parametrize("line", ['if args.esync_policy != "adaptive":', 'return row == "esync" or x',
                                  'if mode in ("sync", "nbsync"):', 'mode.startswith("zeno")'])
def test_the_check_sees_a_comparison_by_name(line):
    assert COMPARISON.search(line)


def test_no_folder_holds_more_than_20_modules_and_no_source_file_more_than_450_lines():
    per_folder = {}
    for path in source_files():
        per_folder.setdefault(os.path.dirname(path), []).append(path)
    crowded = {folder: len(paths) for folder, paths in per_folder.items() if len(paths) > 20 and folder != "tests"}
    long = {path: n for path in source_files()
            if (n := sum(1 for _ in open(os.path.join(ROOT, path), encoding="utf-8"))) > 450}

    assert crowded == {} and long == {}
