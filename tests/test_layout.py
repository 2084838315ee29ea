"""The layout's rules: a mode or a policy is compared by name only in its own module and the catalog, no folder holds
more than 20 modules, no source file is longer than 450 lines, no module imports back from a module that imports it,
and every name read off a project module exists there (the benchmark, which the default run leaves out, once called
a function where it no longer was)."""
import ast
import itertools
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


def module_name(path):
    """The name a source file is imported by (SimpleStateServer/ is on the path of the state server's processes)."""
    parts = os.path.splitext(path)[0].split(os.sep)
    parts = parts[1:] if parts[0] == "SimpleStateServer" else parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source):
    """Every module name `source` imports, at its top or inside a function, importlib's of a literal name too."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant)):
            yield node.args[0].value


def import_graph(paths):
    names = {module_name(path): path for path in paths}
    return {name: {imported for imported in imported_names(open(os.path.join(ROOT, path), encoding="utf-8").read())
                   if imported in names and imported != name} for name, path in names.items()}


def circles(graph):
    return [(a, b) for a, b in itertools.combinations(sorted(graph), 2) if b in graph[a] and a in graph[b]]


def test_no_module_imports_back_from_a_module_that_imports_it():
    assert circles(import_graph(path for path in source_files() if not path.startswith("tests"))) == []


def test_the_check_sees_a_circle_through_an_import_inside_a_function():
    graph = {"a": set(imported_names("from b import f")),
             "b": set(imported_names("def g():\n    import importlib\n    importlib.import_module('a')"))}

    assert circles({name: imports & {"a", "b"} for name, imports in graph.items()}) == [("a", "b")]


def test_coordination_imports_nothing_from_training_and_only_the_django_entry_points_edit_the_path():
    graph = import_graph(path for path in source_files() if not path.startswith("tests"))
    upward = {name: sorted(i for i in imports if i.split(".")[0] == "training")
              for name, imports in graph.items() if name.split(".")[0] == "coordination"}
    entry_points = {os.path.join("SimpleStateServer", "manage.py"), os.path.join("SimpleStateServer", "statesite",
                                                                                   "wsgi.py")}
    editing = [path for path in source_files() if not path.startswith("tests") and path not in entry_points
               and re.search(r"sys\.path\.(insert|append)|sys\.path\s*=", open(os.path.join(ROOT, path)).read())]

    assert {name: imports for name, imports in upward.items() if imports} == {} and editing == []


PACKAGES = ("analysis", "bench", "coordination", "data", "launcher", "models", "training")


def imported_modules(tree):
    """{local name: project module} of the modules a file imports by a name of its own (`from launcher import
    checks`, `import training.config as config`), leaving out a name it also binds otherwise or imports twice."""
    import importlib

    names, counts = {}, {}
    for node in ast.walk(tree):
        for alias in getattr(node, "names", []) if isinstance(node, (ast.Import, ast.ImportFrom)) else []:
            local = alias.asname or alias.name.split(".")[0]
            counts[local] = counts.get(local, 0) + 1
            full = alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
            if isinstance(node, ast.ImportFrom) and (node.level or not node.module):
                continue
            if full.split(".")[0] in PACKAGES and (alias.asname or isinstance(node, ast.ImportFrom)):
                try:
                    names[local] = importlib.import_module(full)
                except ImportError:  # a function or a constant, not a module
                    pass
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}
    return {local: module for local, module in names.items() if local not in bound and counts[local] == 1}


def missing_attributes(source):
    """(line, module, name) of each `module.name` read in `source` that the imported project module lacks."""
    tree = ast.parse(source)
    modules = imported_modules(tree)
    return [(node.lineno, modules[node.value.id].__name__, node.attr) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name) and node.value.id in modules
            and not hasattr(modules[node.value.id], node.attr)]


def test_every_name_read_off_a_project_module_exists_there():
    found = {path: missing for path in source_files() if path.split(os.sep)[0] in PACKAGES + ("tests",)
             for missing in [missing_attributes(open(os.path.join(ROOT, path), encoding="utf-8").read())] if missing}

    assert found == {}


def test_the_check_sees_a_name_that_moved_and_not_a_local_that_shadows_a_module():
    moved = "from launcher import calibration\n\ndef f():\n    return calibration.apply_latencies(1, 2, 3)\n"
    shadowed = "from launcher import links\n\ndef f(links):\n    return links.append(1)\n"

    assert missing_attributes(moved) == [(4, "launcher.calibration", "apply_latencies")]
    assert missing_attributes(shadowed) == []
