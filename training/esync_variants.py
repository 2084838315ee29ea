"""ESync's configurations as the benchmark and the regime map name them: `esync-<variant>`, a variant being a
policy (--esync-policy), `overlap` (--overlap), `drift` (DRIFT_CORRECTION), or several joined by `-` in that order:
esync-apply (the paper's rule), esync-overlap (the default policy with --overlap), esync-plan-overlap,
esync-apply-drift (the paper's rule with the drift correction for non-i.i.d. data); esync-default is whatever
`--modes esync` runs with no other flag, spelled out (so a command line that names it changes when the default
does)."""
from training import config
from training.schemes import esync

PREFIX = "esync-"
DEFAULT = "default"
OVERLAP = "overlap"
DRIFT = "drift"
DRIFT_CORRECTION = ["--drift-correction"]  # the workers' preset (training/schemes/local_sgd.py)


def parse(variant):
    """(policy, overlap, drift) of a variant; ValueError naming what is wrong."""
    if variant == DEFAULT:
        return config.default("esync_policy"), False, False
    parts = variant.split("-")
    drift = parts[-1] == DRIFT
    if drift:
        parts = parts[:-1]
    overlap = bool(parts) and parts[-1] == OVERLAP
    if overlap:
        parts = parts[:-1]
    policy = "-".join(parts) if parts else config.default("esync_policy")
    if policy not in esync.POLICIES:
        raise ValueError(f"ESync has no policy {policy!r} (policies: {', '.join(esync.POLICIES)}; "
                         f"add -{OVERLAP} for --overlap, -{DRIFT} for the drift correction)")
    return policy, overlap, drift


def flags(variant):
    """(the launcher's flags, the workers' flags) that run a variant."""
    policy, overlap, drift = parse(variant)
    return ["--esync-policy", policy], (["--overlap"] if overlap else []) + (DRIFT_CORRECTION if drift else [])


def describe(variant):
    """'adaptive, overlap' for the tables; the default's with 'the default' after it."""
    policy, overlap, drift = parse(variant)
    return ", ".join([policy] + [OVERLAP] * overlap + ["drift correction"] * drift
                     + ["the default"] * (variant == DEFAULT))
