"""A command's wall time, for the commands that run many runs (`launch.py regimes`, `paper`): timing.json in its log
folder holds the last command that ran runs and the wall seconds of every command that ran them (--resume adds its
own), so that a result says what it cost."""
import os
import shlex

from training.files import read_json, write_json

FILE_NAME = "timing.json"  # {"command": the last that ran runs, "wall_seconds": all of theirs}


def record(log_dir, program, argv, seconds, resumed):
    """Write `program argv` as the command and its `seconds`, added to the earlier commands' where `resumed`."""
    path = os.path.join(log_dir, FILE_NAME)
    earlier = read(log_dir) if resumed else {}
    write_json(path, {"command": f"python launch.py {program} {shlex.join(argv)}".rstrip(),
                      "wall_seconds": round(earlier.get("wall_seconds", 0) + seconds)}, indent=1)


def read(log_dir):
    """{"command", "wall_seconds"} of the folder's commands; {} where none recorded them (or the file is not one)."""
    try:
        found = read_json(os.path.join(log_dir, FILE_NAME))
    except (FileNotFoundError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def describe(seconds):
    """'40 s' or '12 minutes'."""
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.0f} minutes"


def run_by(command, seconds):
    """A result's closing lines: the command that ran its runs, after the wall time of all that did where known."""
    took = f" ({describe(seconds)})" if seconds else ""
    return [f"Run by{took}:", "", f"    {command}", ""]
