"""What every mode's scheme declares, read without importing every scheme module: its description, whether it runs
a ps-lite job, aggregates synchronously, talks to the state server or needs a validator, and the flags its Options
declare. Every process builds its command line from this (training/config.py) and the launcher plans its runs by it;
importing the catalog's scheme modules for it costs each process about 0.05 s of CPU (their classes and the
dataclasses of their options), where a training process then runs one scheme.

So the table is kept in a file beside MXNet's operator cache, with the size and modification time of every module of
the project that was loaded when it was made: a changed module makes it again. A catalog with a scheme outside
training/schemes/, a process whose environment names modes or rules kept outside the project (ESYNC_MODE_MODULES,
ESYNC_RULE_MODULES: ESync's policies are a flag's choices), or a declaration that does not pickle, is read from the
scheme modules in each process.
"""
import logging
import os
import pickle
import sys
import zlib
from dataclasses import dataclass

from training.files import atomic_write, cache_folder

log = logging.getLogger("mode-table")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Flag:
    """A flag field of an Options class, as the command line reads it: dataclasses.Field's name, default and
    metadata."""
    name: str
    default: object
    metadata: dict


@dataclass(frozen=True)
class Declarations:
    description: str
    cluster: bool        # runs a ps-lite job (False: one process trains alone)
    synchronous: bool    # each round ends in one aggregation of every worker, over any --collective
    state_server: bool   # its workers talk to the state server
    validator: bool      # one more worker, started with --validator, scores the others' updates
    flags: tuple         # its Options' flags (options.flag_fields), as Flag


def declared(mode):
    """The Declarations of a modes.Mode, from its scheme class."""
    from training.options import CoordinatedOptions, flag_fields

    scheme = mode.scheme_class
    return Declarations(scheme.description, scheme.kvstore is not None, scheme.kvstore == "dist_sync",
                        issubclass(scheme.Options, CoordinatedOptions), scheme.validator,
                        tuple(Flag(f.name, f.default, dict(f.metadata)) for f in flag_fields(scheme.Options)))


def table(catalog, stored):
    """{mode name: Declarations} of `catalog` (modes.Mode, in order): from the stored file where it is current, else
    from the scheme modules (and stored, where `stored`)."""
    if not stored:
        return {mode.name: declared(mode) for mode in catalog}
    path, key = table_path(), catalog_key(catalog)
    found = read(path, key)
    if found is not None:
        return found
    made = {mode.name: declared(mode) for mode in catalog}
    write(path, key, made)
    return made


def table_path():
    """A file per checkout of the project, beside MXNet's operator cache."""
    return os.path.join(cache_folder(), f"modes-{sys.implementation.cache_tag}-{zlib.crc32(ROOT.encode()):08x}.pickle")


def catalog_key(catalog):
    return [(mode.name, mode.scheme) for mode in catalog]


def read(path, key):
    """The stored table, or None where there is none, it is of another catalog, or a module it was made from has
    changed since."""
    try:
        with open(path, "rb") as f:
            stored_key, sources = pickle.load(f)
            if stored_key != key or any(file_state(source) != state for source, state in sources):
                return None
            return pickle.load(f)
    except Exception as err:  # an unreadable file, or one of classes since changed: made again
        log.debug("cannot read the mode table %s: %s", path, err)
        return None


def write(path, key, made):
    def dump(temporary):
        with open(temporary, "wb") as f:
            pickle.dump((key, [(source, file_state(source)) for source in project_sources()]), f)
            pickle.dump(made, f)

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, dump)
    except (OSError, pickle.PicklingError, AttributeError, TypeError) as err:  # unpicklable: read each time
        log.debug("cannot store the mode table %s: %s", path, err)


def project_sources():
    """The files of the project's modules loaded now (those the table was made from among them), outside the
    interpreter's environment."""
    found = set()
    for module in list(sys.modules.values()):
        # from the module's namespace: an attribute of a module training/lazy.py registered would load it
        source = object.__getattribute__(module, "__dict__").get("__file__") or ""
        if source.startswith(ROOT + os.sep) and source.endswith(".py") and not source.startswith(sys.prefix + os.sep):
            found.add(source)
    return sorted(found)


def file_state(path):
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns
