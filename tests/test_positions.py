"""One worker a position: workers that claim the same --worker-index end with one line naming the ranks, before
anything trains, on the parameter server (dist_sync and dist_async) alike."""
import pytest

from tests.jobs import LENET_ARGS, start_job
from training.faults.failures import EXIT_FAILURE

pytestmark = [pytest.mark.slow, pytest.mark.beside_others]  # nothing timed: the job ends at its setup


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_workers_claiming_one_position_end_with_one_line_naming_both_ranks(processes, tmp_path, mode):
    workers = start_job(processes, mode, LENET_ARGS + ["-e", "0", "--max-iters", "5", "--sync-timeout", "20",
                                                      "--worker-index", "1"], log_dir=str(tmp_path / "logs"),
                        ps_args=["--sync-timeout", "20"])

    assert processes.wait(workers, 60), "the workers did not end"
    for worker in workers:
        errors = [line for line in open(worker.output).read().splitlines() if "ERROR" in line]
        assert worker.poll() == EXIT_FAILURE and len(errors) == 1, open(worker.output).read()[-2000:]
        assert "position 1 (--worker-index) is claimed by the workers of ranks 0, 1" in errors[0]
    assert not list((tmp_path / "logs").glob("node/*/iter-*.txt"))
