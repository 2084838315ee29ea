"""The mode table (training/mode_table.py): what every scheme declares, kept in a file, read back the same, made again
when a module changes; a process that reads it imports only the scheme it runs."""
import json
import os
import subprocess
import sys

from launcher.cluster import ROOT
from training import config, mode_table, modes

CATALOG = tuple(modes.MODES.values())


def isolated_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return mode_table.table_path()


def test_the_stored_table_reads_back_as_the_schemes_declare_it(monkeypatch, tmp_path):
    path = isolated_cache(monkeypatch, tmp_path)
    from_the_schemes = mode_table.table(CATALOG, stored=False)

    assert mode_table.table(CATALOG, stored=True) == from_the_schemes and os.path.isfile(path)
    assert mode_table.read(path, mode_table.catalog_key(CATALOG)) == from_the_schemes
    assert mode_table.read(path, mode_table.catalog_key(CATALOG[:-1])) is None  # another catalog's
    esync = from_the_schemes["esync"]
    assert esync.cluster and esync.synchronous and esync.state_server and not esync.validator
    assert from_the_schemes["zeno"].validator and not from_the_schemes["local"].cluster
    assert {flag.name for flag in esync.flags} >= {"esync_policy", "overlap", "local_lr"}


def test_a_changed_module_makes_the_table_again(monkeypatch, tmp_path):
    path = isolated_cache(monkeypatch, tmp_path)
    module = tmp_path / "declaring.py"
    module.write_text("X = 1\n")
    monkeypatch.setattr(mode_table, "project_sources", lambda: [str(module)])
    key = mode_table.catalog_key(CATALOG)
    mode_table.write(path, key, {"sync": "declared"})

    assert mode_table.read(path, key) == {"sync": "declared"}
    module.write_text("X = 22\n")
    assert mode_table.read(path, key) is None
    module.unlink()
    assert mode_table.read(path, key) is None


def test_a_table_that_does_not_pickle_is_not_stored_and_a_damaged_file_is_made_again(monkeypatch, tmp_path):
    path = isolated_cache(monkeypatch, tmp_path)
    key = mode_table.catalog_key(CATALOG)
    mode_table.write(path, key, {"sync": lambda text: text})

    assert not os.path.exists(path) and os.listdir(os.path.dirname(path)) == []
    with open(path, "wb") as f:
        f.write(b"not a pickle")
    assert mode_table.read(path, key) is None
    assert mode_table.table(CATALOG, stored=True) == mode_table.table(CATALOG, stored=False)


PARSE = """
import json, sys
from training import config
args = config.parse_args(["-m", "sync", "-n", "lenet", "--dataset", "mnist-5k", "-c", "1", "--max-iters", "5"])
print(json.dumps({"schemes": sorted(m for m in sys.modules if m.startswith("training.schemes.")),
                  "args": {k: repr(v) for k, v in vars(args).items()}}))
"""


def test_a_process_that_reads_the_table_imports_only_its_schemes_module_and_parses_the_same(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    first, second = (json.loads(subprocess.run([sys.executable, "-c", PARSE], cwd=ROOT, env=env, capture_output=True,
                                               text=True, timeout=60, check=True).stdout) for _ in range(2))

    assert len(first["schemes"]) > 15  # the first made the table from every scheme module
    assert second["schemes"] == ["training.schemes.base", "training.schemes.sync"]
    assert second["args"] == first["args"]


def test_the_parsers_flags_are_the_schemes_own_declarations():
    for name, flag in config.scheme_flags().items():
        readers = [mode for mode in flag.readers
                   if name in {f.name for f in mode_table.declared(modes.MODES[mode]).flags}]
        assert readers == flag.readers, name


def test_a_process_whose_environment_names_modules_kept_outside_reads_the_schemes_not_the_file(monkeypatch, tmp_path):
    path = isolated_cache(monkeypatch, tmp_path)
    monkeypatch.setenv("ESYNC_RULE_MODULES", "tests.example_rule")  # its policy is one more --esync-policy choice
    modes._declarations.cache_clear()
    try:
        assert modes.declarations() == mode_table.table(CATALOG, stored=False)
    finally:
        modes._declarations.cache_clear()

    assert not os.path.exists(path)
