"""What a study keeps of its commands in results/<name>/, beside its declaration: a map's plan, results, table and
wall time; a search's values (tuned.json, tuned.md) and trials (studies.db), copied while it runs and put back into a
log folder that lacks them, so that a search goes on from its kept trials on any machine (launch.py study,
registry.py)."""
import contextlib
import os
import shutil
import sqlite3

from analysis import timing, tuned
from launcher.studies import search
from training.checks import UsageError
from training.files import atomic_write, write_text

RESULTS = "results"
KEPT = ("regimes-plan.json", "regimes.json", "regimes.md", timing.FILE_NAME)  # what a map's study keeps
SEARCH_STORE = search.STORE_FILE  # a search's trials (launch.py tune's default store, in its log folder)
SEARCH_KEPT = ("tuned.json", "tuned.md", SEARCH_STORE)  # what a search's study keeps
KEEP_EVERY = 600.0  # seconds between copies of a running search's trials into the study's folder


def map_folder(argv):
    """The -ld of a map's command line."""
    for flag in ("-ld", "--log-dir", "--logs"):
        if flag in argv[:-1]:
            return argv[argv.index(flag) + 1]
    raise UsageError(f"launch.py {' '.join(argv)}: a study's map names its log folder (-ld logs/<folder>)")


def kept_in(name, argv, maps, root):
    """The folder a map's results are kept in: the study's, or a folder in it named as the map's logs where the study
    runs several maps."""
    folder = os.path.join(root, RESULTS, name)
    return os.path.join(folder, os.path.basename(map_folder(argv).rstrip("/"))) if maps > 1 else folder


def copy_whole(source, target):
    """Copy a file so that `target` is never half-written: its old content, or all of the new; a search's store as
    SQLite's backup makes it, whole even while the search writes to it."""
    if os.path.basename(source) != SEARCH_STORE:
        atomic_write(target, lambda partial: shutil.copyfile(source, partial))
        return

    def backup(partial):
        with contextlib.closing(sqlite3.connect(source)) as store, contextlib.closing(sqlite3.connect(partial)) as copy:
            store.backup(copy)

    atomic_write(target, backup)


def keep_store(name, argv, root):
    """Copy the trials a search has run so far into the study's folder (while it runs: a machine lost mid-search
    loses at most KEEP_EVERY seconds of it)."""
    source = os.path.join(root, map_folder(argv), SEARCH_STORE)
    if os.path.isfile(source):
        copy_whole(source, os.path.join(root, RESULTS, name, SEARCH_STORE))


def stored_trials(path):
    """The trials an Optuna SQLite store at `path` holds (0 where there is none); UsageError where it is no store."""
    if not os.path.isfile(path):
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as store:
            return store.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    except sqlite3.DatabaseError as error:
        raise UsageError(f"{path}: not a search's store of trials ({error})") from None


def restore_search(name, argv, root):
    """Put what the study kept of its search back into the search's log folder where that lacks it, so that the search
    goes on where it stopped; UsageError (one line) where the kept search's trials are lost, or where the log folder's
    store holds fewer trials than the kept one (it would not go on from the kept trials)."""
    kept, logs = os.path.join(root, RESULTS, name), os.path.join(root, map_folder(argv))
    kept_store, store = os.path.join(kept, SEARCH_STORE), os.path.join(logs, SEARCH_STORE)
    if tuned.read(os.path.join(kept, SEARCH_KEPT[0])) and not os.path.isfile(kept_store) \
            and not os.path.isfile(store):
        raise UsageError(f"results/{name}/{SEARCH_KEPT[0]} holds a search whose trials ({SEARCH_STORE}) are in "
                         f"neither results/{name}/ nor {map_folder(argv)}/: it cannot go on where it stopped; remove "
                         f"its {' and '.join(SEARCH_KEPT[:2])} to search again from the start")
    if os.path.isfile(store) and stored_trials(store) < stored_trials(kept_store):
        raise UsageError(f"{os.path.relpath(store, root)} holds {stored_trials(store)} trials, results/{name}/"
                         f"{SEARCH_STORE} {stored_trials(kept_store)}: move {map_folder(argv)}/ away to go on "
                         "from the kept ones")
    os.makedirs(logs, exist_ok=True)
    for file_name in SEARCH_KEPT:
        if os.path.isfile(os.path.join(kept, file_name)) and not os.path.isfile(os.path.join(logs, file_name)):
            copy_whole(os.path.join(kept, file_name), os.path.join(logs, file_name))


def kept_files(argv):
    """What a command of the study leaves to keep: a map's plan, results, table and wall time; a search's values."""
    return {"regimes": KEPT, "tune": SEARCH_KEPT}.get(argv[0], ())


def keep(name, argv, maps, root):
    """Copy what a map or a search wrote into the study's folder (a map's into a folder of its own where the study
    runs several)."""
    source = os.path.join(root, map_folder(argv))
    target = kept_in(name, argv, maps, root) if argv[0] == "regimes" else os.path.join(root, RESULTS, name)
    os.makedirs(target, exist_ok=True)
    kept = kept_files(argv)
    for file_name in kept:
        if os.path.isfile(os.path.join(source, file_name)):
            copy_whole(os.path.join(source, file_name), os.path.join(target, file_name))
    print(f"[study {name}] kept {', '.join(kept)} of {map_folder(argv)} in {os.path.relpath(target, root)}",
          flush=True)
    mark_readme(target, os.path.relpath(target, os.path.join(root, RESULTS)))


README_BLOCKS = {"regimes.json": ("verdict", "repeats"), "tuned.json": ("search",)}  # what a study's README shows


def mark_readme(folder, study):
    """The study's README.md with a generated block (analysis/doc_tables.py) for each result it holds: `launch.py docs`
    fills them."""
    path = os.path.join(folder, "README.md")
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else (
        f"# {study}\n\nGenerated from the results here by `python launch.py docs`.\n")
    wanted = [kind for file_name, kinds in README_BLOCKS.items() if os.path.isfile(os.path.join(folder, file_name))
              for kind in kinds]
    missing = [kind for kind in wanted if f"<!-- generated: {kind} {study} -->" not in text]
    if missing:
        write_text(path, text.rstrip("\n") + "\n" + "".join(
            f"\n<!-- generated: {kind} {study} -->\n<!-- end generated -->\n" for kind in missing))
