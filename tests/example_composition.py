"""A local-SGD composition kept outside the project, named in ESYNC_MODE_MODULES (tests/test_rivals.py): FedAdam
(Reddi et al., "Adaptive Federated Optimization", 2021), FedAvg's rounds of --sync-interval local SGD steps with the
average delta applied by a server Adam, from the parts DiLoCo is made of."""
from dataclasses import dataclass

from training.modes import Mode
from training.options import fixed
from training.schemes.fedavg import FedAvg, FedAvgOptions

NAME = "fedadam"


@dataclass(frozen=True)
class FedAdamOptions(FedAvgOptions):
    local_optimizer: str = fixed("sgd")
    outer_optimizer: str = fixed("adam")


class FedAdam(FedAvg):
    name = NAME
    description = "FedAdam, --sync-interval local SGD steps, then a server Adam step along the average delta"
    Options = FedAdamOptions


MODE = Mode(NAME, "FedAdam", "FedAdam", "black", f"{__name__}:FedAdam")
