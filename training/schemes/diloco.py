"""DiLoCo (Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models", 2023), composed
from local SGD's parts: every worker runs H inner steps (--sync-interval) of an inner Adam (the paper's AdamW without
its weight decay; lr -ll), then the average of the workers' deltas is applied to the global model by the paper's
outer optimizer, Nesterov's momentum 0.9 at outer learning rate 0.7 (averaging/outer.py). A round lasts as
long as the slowest device's H steps, as FedAvg's.
"""

from training.options import declaration, fixed, sync_interval
from training.schemes.base import FixedLocalSteps
from training.schemes.local_sgd import DeltaAveraging, LocalSGDOptions

INNER_OPTIMIZER, OUTER_OPTIMIZER, OUTER_MOMENTUM, OUTER_LR = "adam", "nag", 0.9, 0.7  # the paper's


@declaration
class DiLoCoOptions(LocalSGDOptions):
    sync_interval: int = sync_interval()
    local_optimizer: str = fixed(INNER_OPTIMIZER)
    outer_optimizer: str = fixed(OUTER_OPTIMIZER)
    server_momentum: float = fixed(OUTER_MOMENTUM)
    global_lr: float = fixed(OUTER_LR)
    drift_correction: bool = fixed(False)


class DiLoCo(FixedLocalSteps, DeltaAveraging):
    name = "diloco"
    description = ("DiLoCo, --sync-interval inner Adam steps, then the average delta applied by an outer Nesterov "
                   "momentum (dist_sync)")
    Options = DiLoCoOptions
