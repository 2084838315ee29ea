"""Single-device (or single-machine, several devices) SGD: the standalone baseline of the paper's figures."""
from training.schemes.base import Scheme


class Local(Scheme):
    name = "local"
    aggregates = False
    updates_locally = True

    def setup(self):
        self.trainer = self.local_trainer(self.options.learning_rate)

    def local_step(self):
        self.model.reduce_gradients()
        self.trainer.update(1)
