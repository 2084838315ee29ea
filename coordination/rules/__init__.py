"""The coordination rules the state server answers by, one module each, registered by name (a job's `policy`).
Adding a rule is one module that defines NAME and RULE (a rules.base.Rule) and one entry in MODULES. A rule kept
outside the project is a module named in ESYNC_RULE_MODULES (import paths, comma-separated), set for every process
of the job: the state server answers by it and ESync's workers take it as an --esync-policy."""
import importlib
import os
import sys

from coordination.rules import adaptive, apply, backup, nbsync, nonblocking, plan

MODULES = (apply, plan, nonblocking, adaptive, nbsync, backup)
EXTRA_MODULES_VARIABLE = "ESYNC_RULE_MODULES"


def extra_modules():
    """The modules ESYNC_RULE_MODULES names; one that cannot be imported ends the process in one line, before it
    joins any job."""
    names = [name.strip() for name in os.environ.get(EXTRA_MODULES_VARIABLE, "").split(",") if name.strip()]
    try:
        return tuple(importlib.import_module(name) for name in names)
    except ImportError as err:
        sys.exit(f"{EXTRA_MODULES_VARIABLE}: {err}")


def registry(modules):
    """{name: rule} of the rule modules, refusing a name two of them define."""
    rules = {}
    for module in modules:
        if module.NAME in rules:
            sys.exit(f"{EXTRA_MODULES_VARIABLE}: two coordination rules are named {module.NAME!r} "
                     f"({module.__name__} and another)")
        rules[module.NAME] = module.RULE
    return rules


RULES = registry((*MODULES, *extra_modules()))
ESYNC_POLICIES = tuple(name for name, rule in RULES.items() if rule.esync)
