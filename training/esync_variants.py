"""ESync's configurations as the benchmark, `launch.py paper` and the regime map name them (`esync-<name>`): named
compositions of a policy (--esync-policy), the overlapped aggregation (--overlap) and the drift correction
(--drift-correction), declared here once: `apply` (the paper's rule), `overlap` (the default policy with --overlap),
`plan-overlap`, `apply-drift` (the paper's rule with the drift correction for non-i.i.d. data), every policy with
`-overlap` and `-drift` after it; `default` is whatever `--modes esync` runs with no other flag, spelled out (so a
command line that names it changes when the default does)."""
from dataclasses import dataclass

from training import config
from training.schemes import esync

PREFIX = "esync-"
DEFAULT = "default"
OVERLAP = "overlap"
DRIFT = "drift"
DRIFT_CORRECTION = ["--drift-correction"]  # the workers' preset (training/schemes/local_sgd.py)


@dataclass(frozen=True)
class Composition:
    policy: str
    overlap: bool = False
    drift: bool = False
    default: bool = False  # what --modes esync runs with no other flag

    def launcher_options(self):
        """The launcher's options that run it (launcher/experiment.py options())."""
        return {"esync_policy": self.policy}

    def worker_flags(self):
        """What every worker's command line adds to run it."""
        return (["--overlap"] if self.overlap else []) + (DRIFT_CORRECTION if self.drift else [])

    def describe(self):
        """'adaptive, overlap' for the tables; the default's with 'the default' after it."""
        return ", ".join([self.policy] + [OVERLAP] * self.overlap + ["drift correction"] * self.drift
                         + ["the default"] * self.default)


def declared():
    """{name: Composition}: every policy with and without the overlap and the drift correction (the default
    policy's also without its name), and the default."""
    default_policy = config.default("esync_policy")
    named = {DEFAULT: Composition(default_policy, default=True)}
    for policy in esync.POLICIES:
        for overlap in (False, True):
            for drift in (False, True):
                suffix = [OVERLAP] * overlap + [DRIFT] * drift
                named["-".join([policy] + suffix)] = Composition(policy, overlap, drift)
                if policy == default_policy and suffix:
                    named["-".join(suffix)] = Composition(policy, overlap, drift)
    return named


COMPOSITIONS = declared()


def composition(name):
    """The Composition named `name`; ValueError naming the ones there are."""
    try:
        return COMPOSITIONS[name]
    except KeyError:
        raise ValueError(f"ESync has no configuration {name!r} (policies: {', '.join(esync.POLICIES)}; add "
                         f"-{OVERLAP} for --overlap, -{DRIFT} for the drift correction, or name {DEFAULT})") from None


def describe(name):
    return composition(name).describe()
