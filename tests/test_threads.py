"""How many OpenMP threads main.py gives a process that the environment leaves to it (OMP_NUM_THREADS)."""
import pytest

from training.devices.threads import compute_threads


def job(root, workers=3, **more):
    return {"DMLC_PS_ROOT_URI": root, "DMLC_NUM_WORKER": str(workers), **more}


@pytest.mark.parametrize("role", ["scheduler", "server"])
def test_the_scheduler_and_servers_take_one_thread_beside_the_workers_and_mxnets_default_on_a_host_of_their_own(role):
    assert compute_threads(role, job("127.0.0.1"), cores=2)[0] == 1
    assert compute_threads(role, job("10.1.1.34", DMLC_NODE_HOST="127.0.0.1"), cores=2)[0] == 1
    assert compute_threads(role, job("10.1.1.34"), cores=32) == (None, None)


@pytest.mark.parametrize("env, cores, threads", [
    (job("127.0.0.1", workers=3), 2, 1),
    (job("127.0.0.1", workers=2), 8, 4),
    (job("localhost", workers=1), 2, 2),
    (job("10.1.1.34", workers=3, DMLC_NODE_HOST="127.0.0.1"), 2, 1),
])
def test_a_worker_of_a_job_on_loopback_takes_its_share_of_the_cores(env, cores, threads):
    assert compute_threads("worker", env, cores)[0] == threads


def test_a_worker_of_a_job_across_machines_keeps_mxnets_default():
    assert compute_threads("worker", job("10.1.1.34"), cores=2) == (None, None)


@pytest.mark.parametrize("role", ["scheduler", "server", "worker"])
def test_omp_num_threads_in_the_environment_wins(role):
    assert compute_threads(role, job("127.0.0.1", OMP_NUM_THREADS="2"), cores=2) == (None, None)


def test_a_process_outside_a_ps_lite_job_keeps_mxnets_default():
    assert compute_threads(None, {}, cores=2) == (None, None)
