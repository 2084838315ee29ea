"""How long the launcher lets a job's workers stop once one of its processes has exited 0 (FINISH_GRACE), and a job
run before it is stopped as hung (--wall-limit): on slow links, where one step can last minutes, each two of the
job's mean global iterations more."""
from types import SimpleNamespace

import pytest

from launcher import supervision
from launcher.cluster import JobFailed, ProcessGroup

STOPS_AT_ONCE = ["-c", "print('finished: at once')"]
STOPS_AFTER_3_S = ["-c", "import time; time.sleep(3); print('finished: one long step later')"]


def progress(rounds, seconds):
    """What the launcher's progress reader reports of the job: global iterations and training time so far."""
    return SimpleNamespace(reader=SimpleNamespace(update=lambda: SimpleNamespace(rounds=rounds, training_time=seconds)),
                           tick=lambda: None)


@pytest.fixture
def one_second_grace(monkeypatch):
    monkeypatch.setattr(supervision, "FINISH_GRACE", 1.0)


def test_a_worker_one_long_step_from_its_stop_is_waited_for(tmp_path, one_second_grace):
    with ProcessGroup(str(tmp_path)) as group:
        workers = [group.start_python("worker-0", STOPS_AT_ONCE, role="worker"),
                   group.start_python("worker-1", STOPS_AFTER_3_S, role="worker")]
        supervision.supervise(group, workers, progress(rounds=2, seconds=4.0), wall_limit=60)  # grace 1 + 2 x 2 s

        assert [w.poll() for w in workers] == [0, 0]


def test_without_a_logged_iteration_the_grace_alone_is_waited_for(tmp_path, one_second_grace):
    with ProcessGroup(str(tmp_path)) as group:
        workers = [group.start_python("worker-0", STOPS_AT_ONCE, role="worker"),
                   group.start_python("worker-1", STOPS_AFTER_3_S, role="worker")]
        with pytest.raises(JobFailed, match="but worker-1 still ran 1 s later"):
            supervision.supervise(group, workers, progress(rounds=0, seconds=0.0), wall_limit=60)


def test_a_job_whose_rounds_are_long_runs_two_of_them_beyond_the_wall_limit(tmp_path):
    with ProcessGroup(str(tmp_path)) as group:
        workers = [group.start_python("worker-0", STOPS_AFTER_3_S, role="worker")]
        supervision.supervise(group, workers, progress(rounds=2, seconds=4.0), wall_limit=1)  # 1 s + 2 x 2 s

        assert workers[0].poll() == 0


def test_without_a_logged_iteration_the_wall_limit_alone_holds(tmp_path):
    with ProcessGroup(str(tmp_path)) as group:
        workers = [group.start_python("worker-0", STOPS_AFTER_3_S, role="worker")]
        with pytest.raises(JobFailed, match=r"still ran after --wall-limit 1 s$"):
            supervision.supervise(group, workers, progress(rounds=0, seconds=0.0), wall_limit=1)
