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
