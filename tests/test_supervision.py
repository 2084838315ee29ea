"""How long the launcher lets a job's workers stop once one of its processes has exited 0 (FINISH_GRACE), and a job
run before it is stopped as hung (--wall-limit): on slow links, where one step can last minutes, each two of the
job's mean global iterations more. A job whose port was taken before its process bound it starts again."""
import dataclasses
import os
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


# ----------------------------------------------------------------------------------------------
# A port taken between its choice and its bind


BIND_FAILED = ("22:02:17 failure ERROR scheduler failed: MXNetLibraryError: MXNetError: Check failed: "
               "my_node_.port != -1 (-1 vs. -1) : bind failed")


def failed_start(folder, line):
    output = os.path.join(folder, "processes", "scheduler.log")
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output, "w") as f:
        f.write(line + "\n")
    return JobFailed(SimpleNamespace(name="scheduler", role="scheduler", pid=1, output=output), "exited with code 1")


def starts_until(monkeypatch, tmp_path, outcomes):
    """train_mode with each start's outcome given: the failure to raise (a port taken or another) or None."""
    from launcher import runner

    calls = []

    def run_job(experiment, mode, label, log_dir, hosts, restarts, final, port_retry=False):
        calls.append({"final": final, "port_retry": port_retry})
        failure = outcomes[len(calls) - 1]
        return (0, None) if failure is None else (1, failure)

    monkeypatch.setattr(runner, "run_job", run_job)
    return runner.train_mode(Job(), "sync", "sync 1/1", str(tmp_path / "sync"), None), calls


@dataclasses.dataclass(frozen=True)
class Job:
    max_restarts: int = 0
    resuming: bool = False


def test_a_job_whose_port_was_taken_before_its_bind_starts_again_on_new_ports(monkeypatch, tmp_path, capsys):
    taken = failed_start(str(tmp_path / "sync"), BIND_FAILED)

    code, calls = starts_until(monkeypatch, tmp_path, [taken, None])

    assert code == 0 and len(calls) == 2 and calls[0]["port_retry"]
    assert "could not bind the port chosen for it" in capsys.readouterr().out
    assert os.listdir(tmp_path / "sync" / "processes" / "attempt-port-1") == ["scheduler.log"]  # its output kept


def test_ports_taken_again_and_again_end_the_run_and_other_failures_are_not_retried(monkeypatch, tmp_path):
    taken = [failed_start(str(tmp_path / f"start-{n}"), BIND_FAILED) for n in range(3)]
    other = failed_start(str(tmp_path / "other"), "22:02:17 failure ERROR worker failed: out of memory")

    code, calls = starts_until(monkeypatch, tmp_path, taken)
    assert code == 1 and len(calls) == 3 and not calls[-1]["port_retry"]  # the third start's failure is reported

    code, calls = starts_until(monkeypatch, tmp_path, [other])
    assert code == 1 and len(calls) == 1


def test_a_run_hands_back_the_interrupt_handlers_it_took_and_says_whether_a_signal_came_meanwhile():
    import signal

    before = signal.getsignal(signal.SIGINT)
    previous = supervision.INTERRUPTS.install()
    assert signal.getsignal(signal.SIGINT) != before
    assert supervision.INTERRUPTS.restore(previous) is False and signal.getsignal(signal.SIGINT) is before

    previous = supervision.INTERRUPTS.install()
    os.kill(os.getpid(), signal.SIGINT)  # noted, not raised: the launcher acts on it where that is safe
    assert supervision.INTERRUPTS.restore(previous) is True and signal.getsignal(signal.SIGINT) is before
    assert supervision.INTERRUPTS.install() and supervision.INTERRUPTS.received is None  # a new run starts afresh
    supervision.INTERRUPTS.restore(previous)
