"""The coordination rules the state server answers by, one module each, registered by name (a job's `policy`).
Adding a rule is one module that defines NAME and RULE (a rules.base.Rule) and one entry in MODULES."""
from coordination.rules import adaptive, apply, backup, nbsync, nonblocking, plan

MODULES = (apply, plan, nonblocking, adaptive, nbsync, backup)
RULES = {module.NAME: module.RULE for module in MODULES}
ESYNC_POLICIES = tuple(name for name, rule in RULES.items() if rule.esync)
