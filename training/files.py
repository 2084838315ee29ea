"""Files written so that a process killed at any moment leaves either the old file or the new one, never half."""
import json
import os
import tempfile


def cache_folder():
    """The folder of this user's caches of the project (MXNet's compiled operators, the mode table)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "esync-mxnet")


def atomic_write(path, write):
    """Call write(tmp_path), then move the finished file into place."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path, obj, indent=None):
    """Atomic against a killed process (no fsync: round logs are written every round); compact unless indented."""
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=indent, separators=None if indent else (",", ":"))
    atomic_write(path, write)


def write_text(path, text):
    """Atomic against a killed process, as write_json."""
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)


def read_json(path):
    """The parsed file; FileNotFoundError, or ValueError when it is not JSON."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


class UnwritableFolder(Exception):
    """A folder this process must write to cannot be created or written; the message names it and why."""


def check_writable(folder, flag):
    """Create `folder` when needed and write a file in it, so that a folder nobody can write fails now, in one
    line, and not after the process has joined a job."""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise UnwritableFolder(f"{flag}: cannot create or write {folder} ({err.strerror or err})") from None
