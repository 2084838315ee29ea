"""Single-device (or single-machine, several devices) SGD: the standalone baseline of the paper's figures, and
ZenoPS's "validation only" baseline, SGD on the validator's data alone."""

from training.options import Options, declaration, local_optimizer, validation_size
from training.schemes.base import LocallyUpdating


@declaration
class LocalOptions(Options):
    local_optimizer: str = local_optimizer()


class Local(LocallyUpdating):
    name = "local"
    description = "standalone, one device and no cluster: the baseline of the figures"
    aggregates = False
    Options = LocalOptions

    def setup(self):
        self.trainer = self.local_trainer(self.options.learning_rate, self.options.local_optimizer)


@declaration
class ValidationOnlyOptions(LocalOptions):
    validation_size: int = validation_size()


class ValidationOnly(Local):
    """SGD on the --validation-size samples a Zeno validator holds out of the training set (the same seeded draw),
    alone: what the trusted data would give without the workers (ZenoPS's Figure 7)."""
    name = "validation-only"
    description = ("ZenoPS's baseline: SGD on the --validation-size samples a validator holds out, alone, no "
                   "cluster")
    Options = ValidationOnlyOptions

    def training_share(self, labels):
        from training.schemes.zeno import split_validation

        return split_validation(len(labels), self.options.validation_size, self.options.seed)[0]
