"""FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data", 2017), as
the ESync journal version compares against it: every worker runs a fixed number of local SGD steps
(--sync-interval, lr -ll), then all average their models synchronously. Every device does the same work per round,
so under heterogeneity a round lasts as long as the slowest device's steps, as in SSGD. Here every worker of the
job takes part in every round (no client sampling) and the average is unweighted (the shares are equal).
"""

from training.options import declaration, sync_interval
from training.schemes.base import FixedLocalSteps
from training.schemes.local_sgd import DeltaAveraging, LocalSGDOptions


@declaration
class FedAvgOptions(LocalSGDOptions):
    sync_interval: int = sync_interval()


class FedAvg(FixedLocalSteps, DeltaAveraging):
    name = "fedavg"
    description = "FedAvg, --sync-interval local steps, then the synchronous average of the models (dist_sync)"
    Options = FedAvgOptions
