"""ESync's configurations as the benchmark and the regime map name them: `esync-<variant>`, a variant being a
policy (--esync-policy), `overlap` (--overlap), or both joined by `-`: esync-apply (the paper's rule), esync-overlap (the
default policy with --overlap), esync-plan-overlap."""
from training import config
from training.schemes import esync

PREFIX = "esync-"
OVERLAP = "overlap"


def parse(variant):
    """(policy, overlap) of a variant; ValueError naming what is wrong."""
    parts = variant.split("-")
    overlap = parts[-1] == OVERLAP
    if overlap:
        parts = parts[:-1]
    policy = "-".join(parts) if parts else config.default("esync_policy")
    if policy not in esync.POLICIES:
        raise ValueError(f"ESync has no policy {policy!r} (policies: {', '.join(esync.POLICIES)}; "
                         f"add -{OVERLAP} for --overlap)")
    return policy, overlap


def flags(variant):
    """(the launcher's flags, the workers' flags) that run a variant."""
    policy, overlap = parse(variant)
    return ["--esync-policy", policy], (["--overlap"] if overlap else [])


def describe(variant):
    """'adaptive, overlap' for the tables."""
    policy, overlap = parse(variant)
    return policy + (f", {OVERLAP}" if overlap else "")
