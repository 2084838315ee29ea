"""How a job runs (launcher/backends.py), chosen once from its options, and what the launcher asks of it."""
from types import SimpleNamespace

import pytest

from launcher import backends, experiment
from training import runlog
from training.checks import UsageError


def options(clock=runlog.REAL_CLOCK, hosts="local", tracker=None):
    return SimpleNamespace(clock=clock, hosts=hosts, tracker=tracker)


@pytest.mark.parametrize("given, kind, charged, state_server_in_job, evaluator_here, parallel", [
    (options(), backends.Processes, False, False, True, False),
    (options(hosts="netns"), backends.Namespaces, False, False, True, False),
    (options(tracker="ssh"), backends.TrackerHosts, False, False, False, False),
    (options(tracker="local"), backends.TrackerHosts, False, False, True, False),
    (options(clock=runlog.VIRTUAL_CLOCK), backends.VirtualClock, True, True, False, True),
])
def test_one_backend_a_run_answers_for_its_clock_and_hosts(given, kind, charged, state_server_in_job, evaluator_here,
                                                           parallel):
    backend = backends.of(given)

    assert type(backend) is kind and backend.charges_time == charged and backend.evaluates_in_loop == charged
    assert (backend.state_server_in_job, backend.evaluator_here, backend.parallel_runs) == (
        state_server_in_job, evaluator_here, parallel)
    assert backend.link_rates_apply == (kind in (backends.Namespaces, backends.VirtualClock))


def test_an_experiment_asks_its_backend_and_each_backend_refuses_what_it_does_not_take():
    virtual = experiment.parse(["--modes", "sync", "-n", "lenet", "--dataset", "mnist-5k", "--slowdown", "1,2",
                                "--max-time", "2", "--clock", "virtual", "--step-seconds", "0.01"])
    real = experiment.parse(["--modes", "sync", "-n", "lenet", "--dataset", "mnist-5k", "--slowdown", "1,2",
                             "--max-time", "2"])

    assert type(virtual.backend) is backends.VirtualClock and not virtual.evaluator_runs
    assert type(real.backend) is backends.Processes and real.evaluator_runs
    with pytest.raises(UsageError, match="charged on a virtual clock: give --clock virtual"):
        experiment.parse(["--modes", "sync", "--slowdown", "1,2", "--max-time", "2", "--step-jitter", "0.1"])
    for flag in (["--hosts", "netns"], ["--sleeping-slowdown"], ["--device-share", "0.5"]):
        with pytest.raises(UsageError, match=f"--clock virtual runs the whole job in one process.*{flag[0]}"):
            experiment.parse(["--modes", "sync", "--slowdown", "1,2", "--max-time", "2", "--clock", "virtual",
                              "--step-seconds", "0.01", *flag])
