"""What a scheme is given: the options it declares, built from the command line, and no more."""
import dataclasses

import pytest

from training import config
from training import modes


@pytest.mark.parametrize("mode", modes.names())
def test_every_scheme_takes_its_options_from_the_command_line(mode):
    scheme = modes.scheme_class(mode)
    args = config.parse_args(["-m", mode, "--momentum", "0.5", "-b", "32"])

    options = scheme.Options.from_args(args)

    assert (options.momentum, options.batch_size) == (0.5, 32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch_size = 64


def test_coordinated_schemes_know_the_state_server_and_nothing_of_zeno():
    esync = modes.scheme_class("esync").Options.from_args(config.parse_args(["-m", "esync", "-port", "1234"]))

    assert esync.state_server_port == 1234 and esync.esync_policy == "adaptive"
    assert not hasattr(esync, "rho") and not hasattr(esync, "validation_size")


@pytest.mark.parametrize("devices", [1, 2])
def test_packed_statistics_round_trip_into_every_devices_batchnorm_statistics(devices):
    import mxnet as mx
    import numpy as np

    from training.model import Model
    from training.schemes.base import PackedStatistics

    model = Model("resnet20", [mx.cpu(i) for i in range(devices)], (32, 32, 3))
    for i, p in enumerate(model.aux):  # a distinct value in every statistic
        p.set_data(mx.nd.arange(p.data().size).reshape(p.shape) + 1000 * i)
    stats = PackedStatistics(model)
    before = np.concatenate([p.data().asnumpy().ravel() for p in model.aux])

    stats.gather()
    assert np.array_equal(stats.buffer.asnumpy(), before)
    stats.scatter(0.5)
    after = [[data.asnumpy().ravel() for data in p.list_data()] for p in model.aux]
    assert all(len(copies) == devices for copies in after)
    assert np.array_equal(np.concatenate([copies[-1] for copies in after]), before * 0.5)
    assert all(np.array_equal(copies[0], copies[-1]) for copies in after)
