"""The coordination rules the state server answers by, one module each, registered by name (a job's `policy`).
Adding a rule is one module that defines NAME and RULE (a rules.base.Rule) and one entry in MODULES. A rule kept
outside the project is a module named in ESYNC_RULE_MODULES (import paths, comma-separated), set for every process
of the job: the state server answers by it and ESync's workers take it as an --esync-policy."""
import sys

from coordination.rules import adaptive, apply, backup, nbsync, nonblocking, plan
from coordination import plugins

MODULES = (apply, plan, nonblocking, adaptive, nbsync, backup)
EXTRA_MODULES_VARIABLE = plugins.RULE_MODULES


def registry(modules):
    """{name: rule} of the rule modules, refusing a name two of them define."""
    rules = {}
    for module in modules:
        if module.NAME in rules:
            sys.exit(f"{EXTRA_MODULES_VARIABLE}: two coordination rules are named {module.NAME!r} "
                     f"({module.__name__} and another)")
        rules[module.NAME] = module.RULE
    return rules


RULES = registry((*MODULES, *plugins.named_modules(EXTRA_MODULES_VARIABLE, "RULE")))
ESYNC_POLICIES = tuple(name for name, rule in RULES.items() if rule.esync)
