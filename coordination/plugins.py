"""Modules a user keeps outside the project and names in an environment variable (import paths, comma-separated):
coordination rules (ESYNC_RULE_MODULES, coordination/rules/) and modes (ESYNC_MODE_MODULES, training/modes.py)."""
import importlib
import os
import sys

RULE_MODULES = "ESYNC_RULE_MODULES"
MODE_MODULES = "ESYNC_MODE_MODULES"


def any_named():
    """Whether this process's environment names modules of either kind."""
    return any(os.environ.get(variable, "").strip() for variable in (RULE_MODULES, MODE_MODULES))


def named_modules(variable, attribute):
    """The modules `variable` names, each of which must define `attribute`; one that cannot be imported or lacks it
    ends the process in one line, before it joins any job."""
    modules = []
    for name in (part.strip() for part in os.environ.get(variable, "").split(",")):
        if not name:
            continue
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            sys.exit(f"{variable}: {err}")
        if not hasattr(module, attribute):
            sys.exit(f"{variable}: {name} defines no {attribute}")
        modules.append(module)
    return tuple(modules)
