"""Files written so that a process killed at any moment leaves either the old file or the new one, never half."""
import json
import os
import tempfile


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


def write_json(path, obj):
    """Atomic against a killed process (no fsync: iteration logs are written every round)."""
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, separators=(",", ":"))
    atomic_write(path, write)
