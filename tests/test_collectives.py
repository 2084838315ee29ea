"""Synchronous aggregation over MPI (--collective ring, butterfly, binary-blocks) beside the parameter server.

Real jobs run under MPICH's mpiexec.gforker, which forks every rank on this machine in its own process group (one
group per job, stopped as a whole) and listens nowhere; the ranks talk over shared memory and, through libfabric's
tcp provider, loopback only.
"""
import os
import signal
import statistics
import time
import types

import mxnet as mx
import numpy as np
import pytest

from analysis import summary
from coordination.records import PLANNED_SECONDS
from launcher import mpi
from launcher.cluster import ROOT, ProcessGroup, is_running, processes_in_group, start_state_server, tail
from tests.jobs import LENET_ARGS, finish, iter_records, meta, run_main, start_job, worker_folders
from training import config, modes, runlog
from training.faults import fault_injection
from training.faults.watchdog import EXIT_SYNC_TIMEOUT
from training.transport import collectives, traffic

MAIN = os.path.join(ROOT, "main.py")
TARGET = 0.8  # each sync job trains until rank 0's test accuracy (every 10 rounds) reaches it


# Unit tests: no MPI process.
def test_each_collective_forces_its_mpich_algorithm_and_nothing_else():
    assert collectives.NAMES == ("ps", "ring", "butterfly", "binary-blocks")
    expected = {"ring": "ring", "butterfly": "recursive_doubling", "binary-blocks": "reduce_scatter_allgather"}
    for name, algorithm in expected.items():
        assert collectives.mpi_environment(name) == {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": algorithm,
                                                     "MPIR_CVAR_DEVICE_COLLECTIVES": "none",
                                                     "MPIR_CVAR_BCAST_INTRA_ALGORITHM": "binomial"}
    assert not collectives.uses_mpi("ps") and all(collectives.uses_mpi(name) for name in expected)


def test_device_copies_are_summed_then_packed_flat_and_unpacked_into_every_copy():
    ctxs = [mx.cpu(0), mx.cpu(1)]
    weights = [mx.nd.array(np.arange(6).reshape(2, 3), ctx=ctx) for ctx in ctxs]
    bias = mx.nd.array([10.0])
    entries = [weights, bias]

    flat = collectives.pack([collectives.local_sum(entry) for entry in entries])
    assert flat.dtype == np.float32 and flat.tolist() == [0, 2, 4, 6, 8, 10, 10]

    collectives.unpack(flat * 3, entries)  # as if three workers had sent the same
    for copy in weights:
        assert copy.asnumpy().tolist() == [[0, 6, 12], [18, 24, 30]]
    assert bias.asnumpy().tolist() == [30]
    with pytest.raises(ValueError, match="7 packed values for entries of 6"):
        collectives.unpack(flat, [weights[0]])


class Request:
    """A nonblocking MPI request that completes at its `polls`-th Test()."""

    def __init__(self, polls):
        self.polls = polls

    def Test(self):
        self.polls -= 1
        return self.polls <= 0


def test_a_wait_polls_until_done_and_gives_up_at_its_deadline():
    request = Request(polls=5)
    collectives.wait_sleeping(request, timeout=5, on_timeout=pytest.fail)
    assert request.polls == 0

    expired = []
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        collectives.wait_sleeping(Request(polls=10 ** 9), timeout=0.05, on_timeout=lambda: expired.append(1))
    assert expired == [1] and 0.05 <= time.monotonic() - started < 1


def test_the_catalog_says_which_modes_aggregate_synchronously():
    assert modes.synchronous_names() == ("esync", "sync", "nbsync", "backup", "lb-bsp", "zeno", "fedavg", "diloco", "tifl",
                                         "feddrop")
    assert config.parse_args(["-m", "sync"]).collective == "ps"
    assert config.parse_args(["-m", "sync", "--collective", "butterfly"]).collective == "butterfly"


@pytest.mark.parametrize("mode", ["async", "local"])  # the servers apply each push; no cluster
def test_a_collective_with_a_mode_that_cannot_use_it_is_one_line_and_exit_2(mode):
    result = run_main(["-m", mode, *LENET_ARGS, "--collective", "ring"], timeout=30)

    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "--collective ring sums the updates of a synchronous mode" in result.stderr
    assert f"-m {mode} has no such aggregation: use --collective ps" in result.stderr


def test_a_collective_beside_a_ps_lite_role_is_refused_in_one_line():
    result = run_main(["-m", "sync", *LENET_ARGS, "--collective", "ring"], {"DMLC_ROLE": "worker"}, timeout=30)

    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "without ps-lite (no scheduler or servers): unset DMLC_ROLE" in result.stderr


def test_a_worker_started_without_mpiexec_is_alone_and_refused_in_one_line():
    result = run_main(["-m", "sync", *LENET_ARGS, "--collective", "binary-blocks"], timeout=30)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "this process is alone in its MPI job; start the workers together with mpiexec -n N" in result.stderr


# Real MPI jobs.

def start_mpi_job(group, name, log_dir, blocks, fault=None):
    """mpiexec.gforker and its ranks, in a process group of their own; `blocks` lists (ranks, main.py arguments),
    `fault` is an ESYNC_INJECT_FAULT plan."""
    blocks = [(ranks, [MAIN, "-ld", log_dir, "--node-name", "node", *args]) for ranks, args in blocks]
    env = dict(mpi.LOOPBACK_ENV, **({fault_injection.ENV: fault} if fault else {}))
    return group.start(name, [mpi.GFORKER, *mpi.mpmd(blocks)], env=env)


def rank_pids(log_dir, ranks, timeout=60):
    """{rank: pid} once every rank has written its log folder's description."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        folders = worker_folders(log_dir)
        if len(folders) == ranks:
            try:
                return {meta(f)["rank"]: meta(f)["pid"] for f in folders}
            except (OSError, ValueError, KeyError):
                pass  # a folder made before its description, or a description being written
        time.sleep(0.2)
    raise AssertionError(f"{ranks} ranks did not start within {timeout} s")


def wait_for_round(folder, round_number, timeout=60):
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(folder, f"iter-{round_number}.txt")):
        assert time.monotonic() < deadline, f"no round {round_number} in {folder} within {timeout} s"
        time.sleep(0.1)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_ranks(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_identical_digests_every_round(folders, rounds):
    runs = [iter_records(f) for f in folders]
    assert [len(r) for r in runs] == [rounds] * len(folders)
    for n in range(rounds):
        assert len({run[n]["weights_digest"] for run in runs}) == 1, f"weights differ after round {n + 1}"


# collective: ranks. Ring's 3 are not a power of two; butterfly's 4 tell its log2(N) M from the others' 2(N-1)/N M.
SYNC_JOBS = {"ring": 3, "butterfly": 4, "binary-blocks": 2}


def run_to_the_end(group, jobs, timeout):
    finished = group.wait(jobs, timeout)
    outputs = "\n".join(f"--- {job.name} (exit {job.poll()})\n{tail(job.output, 40)}" for job in jobs)
    assert finished and all(job.poll() == 0 for job in jobs), outputs


@pytest.fixture(scope="module")
def sync_jobs(tmp_path_factory):
    """The three sync jobs, run at once: {collective: log folder of its mode}. Each runs rounds until a count or a
    target accuracy, which come out the same however busy the machine is: their tests run beside the timed ones."""
    tmp_path = tmp_path_factory.mktemp("mpi-sync")
    group = ProcessGroup(str(tmp_path / "processes"))
    try:
        jobs, log_dirs = [], {}
        for collective, ranks in SYNC_JOBS.items():
            log_dirs[collective] = str(tmp_path / collective / "lenet" / "sync")
            args = ["-m", "sync", "--collective", collective, *LENET_ARGS, "--target-accuracy", str(TARGET),
                    "-e", "10", "--max-iters", "1000", "--digest-weights", "--sync-timeout", "60"]
            jobs.append(start_mpi_job(group, collective, log_dirs[collective], [(ranks, args)]))
        run_to_the_end(group, jobs, 180)
        yield log_dirs
    finally:
        group.stop()


@pytest.fixture(scope="module")
def speed_jobs(tmp_path_factory):
    """One esync job (2 ranks, one 4x slower, with its state server) beside one of SSGD with a backup worker (3 ranks,
    one 4x slower, a state server of its own), whose rounds follow the ranks' speeds: {name: its mode's folder}."""
    tmp_path = tmp_path_factory.mktemp("mpi-speeds")
    group = ProcessGroup(str(tmp_path / "processes"))
    try:
        log_dirs = {"esync": str(tmp_path / "esync" / "lenet" / "esync"),
                    "backup": str(tmp_path / "backup" / "lenet" / "backup")}
        esync = ["-m", "esync", "--esync-policy", "adaptive", "--overlap", "--scaffold", "--collective", "ring",
                 *LENET_ARGS, "-port", str(start_state_server(group)), "--max-time", "3", "-e", "0",
                 "--digest-weights", "--sync-timeout", "60"]
        backup = ["-m", "backup", "--collective", "ring", *LENET_ARGS, "-port",
                  str(start_state_server(group, name="backup-state-server")), "--max-iters", "80", "-e", "0",
                  "--sync-timeout", "60"]
        run_to_the_end(group, [start_mpi_job(group, "esync", log_dirs["esync"],
                                             [(1, esync), (1, esync + ["--slowdown", "4"])]),
                               start_mpi_job(group, "backup", log_dirs["backup"],
                                             [(2, backup), (1, backup + ["--slowdown", "4"])])], 120)
        yield log_dirs
    finally:
        group.stop()


@pytest.mark.slow
@pytest.mark.beside_others
@pytest.mark.parametrize("collective", SYNC_JOBS)
def test_sync_over_each_collective_keeps_every_rank_identical_and_learns(sync_jobs, collective):
    log_dir = sync_jobs[collective]
    folders = worker_folders(log_dir)
    rounds = len(iter_records(folders[0]))

    assert sorted(meta(f)["rank"] for f in folders) == list(range(SYNC_JOBS[collective]))
    assert all(meta(f)["num_workers"] == SYNC_JOBS[collective] for f in folders)
    assert_identical_digests_every_round(folders, rounds)
    run = summary.summarize_mode(os.path.dirname(log_dir), "sync")
    assert sum(len(devices) for devices in run["devices"].values()) == SYNC_JOBS[collective]
    assert run["best_accuracy"] >= TARGET


@pytest.mark.slow
@pytest.mark.beside_others
def test_sync_over_the_parameter_server_with_its_round_queued_during_backward_computes_the_summed_update(
        sync_jobs, processes, tmp_path):
    """Over the ps-lite servers SSGD queues each gradient's pushpull and its weight's update while the backward pass
    runs; over MPI it sums after the step and updates with the Trainer. Two workers' sums are exact either way, so
    the weights agree bit for bit, round after round."""
    mpi_runs = [iter_records(f) for f in worker_folders(sync_jobs["binary-blocks"])]
    rounds = min(20, len(mpi_runs[0]))
    log_dir = str(tmp_path / "logs")
    args = [*LENET_ARGS, "-e", "10", "--max-iters", str(rounds), "--digest-weights", "--sync-timeout", "60"]
    finish(processes, start_job(processes, "sync", args, log_dir=log_dir), 120)
    ps_runs = [iter_records(f) for f in worker_folders(log_dir)]
    for n in range(rounds):
        digests = {run[n]["weights_digest"] for run in ps_runs + mpi_runs}
        assert len(digests) == 1, f"weights differ after round {n + 1}"


@pytest.mark.slow
@pytest.mark.beside_others
@pytest.mark.parametrize("collective", SYNC_JOBS)
def test_each_rank_logs_the_bytes_its_collective_moves(sync_jobs, collective):
    """Every round sums the parameters and the stop vote in one float32 buffer; the first round also broadcasts rank
    0's parameters. The bytes logged are MPICH's pattern for the rank (training/transport/traffic.py), and each rank's are the
    textbook's figure up to a block's rounding (the ring on any number of ranks, the others on a power of two)."""
    folders = worker_folders(sync_jobs[collective])
    ranks = SYNC_JOBS[collective]
    params = meta(folders[0])["num_params"]
    for folder in folders:
        rank = meta(folder)["rank"]
        records = iter_records(folder)
        sent, received = traffic.allreduce_bytes(collective, rank, ranks, params + 1)
        bcast_sent, bcast_received = traffic.bcast_bytes(rank, ranks, params)
        assert (records[0][runlog.SENT_BYTES], records[0][runlog.RECEIVED_BYTES]) == (sent + bcast_sent,
                                                                                    received + bcast_received)
        assert all((r[runlog.SENT_BYTES], r[runlog.RECEIVED_BYTES]) == (sent, received) for r in records[1:])
        block = 4 * -(-(params + 1) // ranks)
        assert abs(sent - traffic.textbook(collective, ranks, 4 * (params + 1))) <= block


@pytest.mark.slow
def test_overlapped_adaptive_esync_over_ring_does_the_planned_steps_with_one_global_model(speed_jobs):
    """ESync's adaptive policy with --overlap over MPI: the allreduce runs on a thread while the next round's local
    steps do; every rank steps through the round's planned time (the fast one several times the slow one's steps),
    the global model is the same on both ranks every round, and the final weights too. SCAFFOLD's variates travel
    in the same buffer."""
    folders = worker_folders(speed_jobs["esync"])
    slowdowns = {meta(f)["rank"]: meta(f)["slowdown"] for f in folders}
    runs = {meta(f)["rank"]: iter_records(f) for f in folders}

    assert slowdowns == {0: 1.0, 1: 4.0}
    rounds = len(runs[0])
    assert rounds >= 5 and len(runs[1]) == rounds
    assert_identical_digests_every_round(folders, rounds)
    for rank, records in runs.items():
        assert runlog.local_steps(records[0]) == 1 and all(PLANNED_SECONDS in r for r in records[3:])
        assert all(r[runlog.AVERAGE_IN_FLIGHT] > 0 for r in records[1:])
    assert statistics.mean(runlog.local_steps(r) for r in runs[0][3:]) > \
        2 * statistics.mean(runlog.local_steps(r) for r in runs[1][3:])
    finals = {open(os.path.join(f, runlog.FINAL_MODEL_FILE), "rb").read() for f in folders}
    assert len(finals) == 1
    summary.summarize_mode(os.path.dirname(speed_jobs["esync"]), "esync")


@pytest.mark.slow
def test_backup_workers_over_ring_drop_the_slow_ranks_gradients_and_end_identical(speed_jobs):
    """SSGD with a backup worker over MPI: every rank adds its gradient or zeros to each step's allreduce, from a
    thread of its own; the 4x slower rank's gradients are mostly dropped, and the ranks end with the same weights."""
    folders = {meta(f)["rank"]: f for f in worker_folders(speed_jobs["backup"])}
    runs = {rank: iter_records(folder) for rank, folder in folders.items()}

    assert sorted(runs) == [0, 1, 2] and meta(folders[2])["slowdown"] == 4.0
    dropped = {rank: statistics.mean(r.get(runlog.DROPPED, False) for r in records) for rank, records in runs.items()}
    assert dropped[2] > 0.5 > max(dropped[0], dropped[1])
    finals = {open(os.path.join(f, runlog.FINAL_MODEL_FILE), "rb").read() for f in folders.values()}
    assert len(finals) == 1


FAULT_TIMEOUT = 3  # --sync-timeout of the jobs that lose a rank


def watch_the_stopped_job(job, log_dir, pids):
    """Rank 1 stopped as its 5th round started: rank 0's CPU over 1.5 s of its wait, and when it ended."""
    wait_for_round(worker_folders(log_dir)[0], 4)
    time.sleep(0.2)  # rank 0 reaches the aggregation of round 5 and waits there
    before = cpu_seconds(pids[0])
    time.sleep(1.5)
    waiting_cpu = cpu_seconds(pids[0]) - before
    deadline = time.monotonic() + FAULT_TIMEOUT + 10
    while is_running(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivor_ended = not is_running(pids[0])
    os.kill(pids[1], signal.SIGKILL)
    return {"waiting_cpu": waiting_cpu, "survivor_ended": survivor_ended}


@pytest.fixture(scope="module")
def faulty_jobs(tmp_path_factory):
    """Two 2-rank jobs run at once, in each of which rank 1 fails as its 5th round starts (outside any transfer;
    rank 0 then waits in the aggregation): in "killed" it kills itself, in "stopped" it stops (SIGSTOP), alive but
    silent. {name: (the mpiexec process, {rank: pid}, the log folder, what was measured)}."""
    tmp_path = tmp_path_factory.mktemp("faults")
    group = ProcessGroup(str(tmp_path / "processes"))
    started, pids, segments = {}, {}, mpi.shared_memory_segments()
    try:
        for name, collective, kind in (("killed", "ring", "kill"), ("stopped", "butterfly", "stop")):
            log_dir = str(tmp_path / name)
            args = ["-m", "sync", "--collective", collective, *LENET_ARGS, "-e", "0",
                    "--sync-timeout", str(FAULT_TIMEOUT)]
            job = start_mpi_job(group, name, log_dir, [(2, args)], fault=f"worker:training:{kind}:after=5:rank=1")
            started[name] = (job, log_dir)
        for name, (_, log_dir) in started.items():
            pids[name] = rank_pids(log_dir, 2)
        job, log_dir = started["stopped"]
        measured = {"stopped": watch_the_stopped_job(job, log_dir, pids["stopped"]), "killed": {}}
        group.wait([job for job, _ in started.values()], 60)
        yield {name: (job, pids[name], log_dir, measured[name]) for name, (job, log_dir) in started.items()}
    finally:
        group.stop()
        for ranks in pids.values():
            stop_ranks(ranks.values())
        mpi.remove_orphaned_segments(segments)  # what the ranks killed before MPI_Finalize left in /dev/shm


def logged_at(output, text):
    """Seconds since midnight of the first log line holding `text` (lines start with HH:MM:SS)."""
    line = next(line for line in output.splitlines() if text in line)
    hours, minutes, seconds = (int(part) for part in line.split()[0].split(":"))
    return 3600 * hours + 60 * minutes + seconds


@pytest.mark.slow
def test_a_killed_rank_ends_the_job_and_leaves_nothing(faulty_jobs):
    job, pids, log_dir, _ = faulty_jobs["killed"]
    output = tail(job.output, 30)

    assert job.poll() is not None and job.poll() != 0, output
    assert logged_at(output, "interrupted") - logged_at(output, "injecting a fault") <= FAULT_TIMEOUT + 10, output
    assert not any(is_running(pid) for pid in pids.values())
    assert processes_in_group(job.pid) == []  # and rank 0 logged the rounds it ran with rank 1: 4 before the fault
    assert [r["num_iters"] for r in iter_records(worker_folders(log_dir)[0])] == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_rank_that_stops_answering_ends_the_others_at_the_timeout_without_spinning(faulty_jobs):
    """Rank 0 waits sleeping, then ends with one line naming the collective and the round, exit 3."""
    job, pids, _, measured = faulty_jobs["stopped"]
    output = tail(job.output, 30)

    assert measured["waiting_cpu"] < 0.2, f"rank 0 used {measured['waiting_cpu']:.2f} s of CPU in a 1.5 s wait"
    assert measured["survivor_ended"], output
    assert (f"no answer for {FAULT_TIMEOUT} s during the aggregation of global iteration 5 over MPI (butterfly "
            "allreduce)") in output, output
    assert job.poll() == EXIT_SYNC_TIMEOUT, output
    assert not any(is_running(pid) for pid in pids.values())


def test_a_failed_mpi_operation_is_an_error_that_names_it_and_keeps_mpis_own():
    class MPIError(Exception):  # mpi4py's MPI.Exception: its text is only "See the MPI_ERROR field ..."
        def Get_error_class(self):
            return 15

    transport = collectives.MpiAllreduce.__new__(collectives.MpiAllreduce)
    transport.MPI = types.SimpleNamespace(Exception=MPIError)

    def allreduce():
        raise MPIError("See the MPI_ERROR field in MPI_Status for the error code")

    with pytest.raises(collectives.CollectiveFailed) as failed:
        transport.reported(allreduce, "ring allreduce")
    assert str(failed.value) == ("the ring allreduce over MPI failed: a rank has ended or its link broke "
                                 "(MPI error class 15)")
    assert isinstance(failed.value.__cause__, MPIError)
    assert transport.reported(lambda: None, "barrier") is None


def test_only_the_segments_a_job_left_and_no_process_maps_are_removed():
    import mmap

    def segment(tag):
        path = os.path.join(mpi.SHARED_MEMORY, f"{mpi.SEGMENT_PREFIX}test_{os.getpid()}_{tag}")
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
        return path

    earlier = segment("earlier")
    before = mpi.shared_memory_segments()
    orphan, in_use = segment("orphan"), segment("in-use")
    with open(in_use, "r+b") as f, mmap.mmap(f.fileno(), 4096):
        removed = mpi.remove_orphaned_segments(before)
        try:
            assert removed == {os.path.basename(orphan)}
            assert not os.path.exists(orphan) and os.path.exists(in_use) and os.path.exists(earlier)
        finally:
            for path in (earlier, in_use, orphan):
                if os.path.exists(path):
                    os.unlink(path)


@pytest.mark.slow
def test_a_rank_sent_sigquit_says_it_was_interrupted_and_the_job_fails(processes, tmp_path):
    log_dir = str(tmp_path / "logs")
    job = start_mpi_job(processes, "quit", log_dir, [(2, ["-m", "sync", "--collective", "ring", *LENET_ARGS,
                                                          "-e", "0", "--sync-timeout", "60"])])
    pids = rank_pids(log_dir, 2)
    wait_for_round(worker_folders(log_dir)[0], 2)

    os.kill(pids[0], signal.SIGQUIT)

    assert processes.wait([job], 60)
    output = tail(job.output, 30)
    assert job.poll() not in (None, 0), output
    # Rank 0 ends on the SIGQUIT. Rank 1 ends on the SIGINT mpiexec sends it once rank 0 has ended, or before that
    # if its allreduce finds rank 0 gone, with one line that says so. Neither dies of a signal.
    rank_1_failed = "worker failed: the ring allreduce over MPI failed: a rank has ended or its link broke"
    assert output.count("main WARNING interrupted") + output.count(rank_1_failed) == 2, output
    assert "main WARNING interrupted" in output and "signaled" not in output, output
    assert not any(is_running(pid) for pid in pids.values())
