"""--hosts netns: hosts as network namespaces joined by rate-limited links (root only).

Every test names its namespaces with a prefix of its own and removes whatever carries that prefix when it ends,
pass or fail; the launcher's processes are killed by PID (tests/test_launch.py's `launcher`). Sockets are bound
only inside the test's namespaces and on 127.0.0.1.
"""
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from launcher import hosts, netns
from launcher.cluster import ROOT, is_running
from training import runlog
from training.clocks.network import parse_rate
from tests.test_launch import (LAUNCH_PY, LENET, kill_once_training, launcher, launcher_env, pid_of, read_output,
                               recorded_pids, still_running, training_started, wait_for)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"),
                                reason="network namespaces need root and iproute2")

LIMIT = "100mbit"
LIMIT_BYTES_PER_S = 100e6 / 8
# A 2 s sampling window may also see one full token bucket (64 kB at 100 Mbit/s) and a few ms of timing jitter.
WINDOW_TOLERANCE = 1.03
STARTUP_TIMEOUT = 120.0


@pytest.fixture
def prefix():
    """A namespace prefix of this test alone; nothing named with it survives the test."""
    name = f"esynctest-{secrets.token_hex(3)}-"
    try:
        yield name
    finally:
        netns.remove_namespaces(name)


def leftovers(prefix):
    """Namespaces, and links of this namespace, that carry `prefix`."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return netns.namespaces(prefix) + [line for line in links.splitlines() if prefix.rstrip("-") in line]


def netns_args(prefix, subnet="10.213.91.0/24"):
    return ["--hosts", "netns", "--bandwidth", LIMIT, "--netns-prefix", prefix, "--netns-subnet", subnet]


def network_report(logs, mode):
    with open(os.path.join(logs, "lenet", mode, "processes", "network.json")) as f:
        return json.load(f)


# ----------------------------------------------------------------------------------------------
# The network itself


def test_rates_read_like_tc():
    assert parse_rate("1gbit") == 10 ** 9
    assert parse_rate("100mbit") == 10 ** 8
    with pytest.raises(ValueError):
        parse_rate("100MB")


def bulk_transfer(receiver, sender, seconds):
    """Bytes per second one TCP stream carries from `sender`'s namespace to `receiver`'s address."""
    listening = threading.Event()
    received = {}

    def receive():
        with socket.create_server((receiver.address, 0)) as server:
            received["port"] = server.getsockname()[1]
            listening.set()
            conn, _ = server.accept()
            total, started = 0, time.monotonic()
            while chunk := conn.recv(1 << 20):
                total += len(chunk)
            received["rate"] = total / (time.monotonic() - started)

    def send():
        listening.wait(10)
        with socket.create_connection((receiver.address, received["port"])) as conn:
            chunk, started = b"x" * (1 << 20), time.monotonic()
            while time.monotonic() - started < seconds:
                conn.sendall(chunk)

    receiving = threading.Thread(target=hosts.call_in_namespace, args=(receiver.namespace, receive))
    receiving.start()
    hosts.call_in_namespace(sender.namespace, send)
    receiving.join(30)
    return received["rate"]


@pytest.mark.slow
def test_a_link_carries_at_most_its_rate_both_ways(prefix):
    with netns.VirtualNetwork(prefix, "10.213.92.0/24") as network:
        ps = network.add_host("ps", parse_rate("50mbit"))
        worker = network.add_host("w0", parse_rate("1gbit"))

        upload = bulk_transfer(ps, worker, seconds=2)    # shaped on the ps link's bridge side
        download = bulk_transfer(worker, ps, seconds=2)  # shaped on the ps host's eth0

    for rate in (upload, download):
        assert 0.7 * 50e6 / 8 < rate < 1.05 * 50e6 / 8
    assert leftovers(prefix) == []


def test_a_process_started_in_a_namespace_keeps_its_pid_and_dies_with_its_group(prefix, processes):
    with netns.VirtualNetwork(prefix, "10.213.93.0/24") as network:
        host = network.add_host("w0", parse_rate("1gbit"))
        proc = processes.start_python("sleeper", ["-c", "import time; time.sleep(60)"],
                                      command_prefix=host.command_prefix)
        wait_for(lambda: "python" in open(f"/proc/{proc.pid}/cmdline").read(), 10, "python exec'd in place")

        processes.stop()

        assert not is_running(proc.pid)


def test_clean_removes_what_a_killed_run_left(prefix):
    subprocess.run(["ip", "netns", "add", f"{prefix}ps"], check=True)

    result = subprocess.run([sys.executable, LAUNCH_PY, "clean-netns", prefix], capture_output=True, text=True,
                            timeout=30)

    assert result.returncode == 0 and f"{prefix}ps" in result.stdout
    assert netns.namespaces(prefix) == []


# ----------------------------------------------------------------------------------------------
# Jobs across namespaces


@pytest.mark.long  # two jobs across namespaces, timed against the link limit
@pytest.mark.slow
def test_esync_and_sync_train_across_namespaces_within_the_link_limit_each_server_carrying_half(tmp_path, prefix):
    logs = str(tmp_path / "logs")
    # A number of iterations, not of seconds: what the job learns in it does not depend on how busy the machine is.
    # The paper's rule keeps ESync's rounds to a step or two on equal devices (the default's would last seconds).
    args = ["--modes", "esync,sync", "--esync-policy", "apply", "--devices", "cpu,cpu,cpu", "-s", "2", "--max-iters",
            "45", "--no-figures", *LENET, *netns_args(prefix)]

    with launcher(args, logs) as proc:
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    for mode in ("esync", "sync"):
        run = json.load(open(os.path.join(logs, "lenet", mode, f"{'ESync' if mode == 'esync' else 'Sync'}.json")))
        # learned: the best evaluation (the last one of 45 rounds can fall in a dip: ESync 0.672 best, 0.300 last)
        assert run["num_workers"] == 3 and run["best_accuracy"] > 0.3, mode
        assert run["accuracy_source"] == "evaluator", mode  # rank 0's snapshots, tested outside the namespaces
        links = network_report(logs, mode)["links"]
        carried = {name: links[name]["rx_bytes"] + links[name]["tx_bytes"] for name in ("ps", "ps1")}
        for name in carried:
            link = links[name]
            assert link["rx_bytes"] > 5e5 and link["tx_bytes"] > 5e5, (mode, name, link)  # the job crossed it
            for direction in ("rx", "tx"):
                assert link[f"{direction}_bytes_per_s"] <= LIMIT_BYTES_PER_S, (mode, name, link)
                assert link[f"peak_{direction}_bytes_per_s"] <= WINDOW_TOLERANCE * LIMIT_BYTES_PER_S, (mode, link)
            # Every layer but the biases is split evenly over both servers (esync's ps link also carries the
            # state server's requests).
            if mode == "sync":
                assert 0.45 <= carried[name] / sum(carried.values()) <= 0.55, carried
    with open(os.path.join(logs, "lenet", "esync", "processes", "state-server.log")) as f:
        assert "http://10.213.91.1:" in f.read()  # bound on the parameter-server host's address
    assert leftovers(prefix) == []
    assert still_running(recorded_pids(logs)) == []


@pytest.mark.slow
def test_mpi_ranks_cross_the_shaped_links_log_the_bytes_the_kernel_counts_and_train_under_their_quotas(tmp_path,
                                                                                                     prefix):
    """Butterfly over 3 ranks (one host each): rank 1 takes the folded rank's buffer and hands back the result, so it
    moves twice what ranks 0 and 2 do; each worker's link carries what its rank logged plus the headers. Each rank
    trains inside its worker's CPU quota, and so does each of Hogwild!'s processes in the next run."""
    from tests.test_cpu_quota import computing_in_each, devices_of, launcher_groups

    logs = str(tmp_path / "logs")
    # 4 s of training: the processes still compute in their groups when the test looks, whatever the machine's load
    args = ["--modes", "sync,hogwild", "--collective", "butterfly", "--slowdown", "1,1,4", "--max-time", "4",
            "--device-share", "0.5", *LENET, "--no-figures", *netns_args(prefix, "10.213.95.0/24")]
    with launcher(args, logs) as proc:
        inside = {}
        for mode in ("sync", "hogwild"):
            wait_for(lambda: training_started(logs, mode, 3), STARTUP_TIMEOUT, f"{mode}'s iteration logs")
            inside[mode] = list(computing_in_each(launcher_groups(proc)).values())
        proc.wait(timeout=300)
        output = read_output(proc)

    assert proc.returncode == 0, output
    links = network_report(logs, "sync")["links"]
    for folder in glob.glob(os.path.join(logs, "lenet", "sync", "*", "*-worker*")):
        records = runlog.DeviceLog(folder).ordered()
        link = links[f"w{runlog.read_meta(folder)['rank']}"]
        for field, counted in ((runlog.SENT_BYTES, link["tx_bytes"]), (runlog.RECEIVED_BYTES, link["rx_bytes"])):
            logged = sum(r[field] for r in records)
            assert logged <= counted <= 1.1 * logged, (folder, field, logged, counted)
    assert links["ps"]["rx_bytes"] + links["ps"]["tx_bytes"] < 1e5, links["ps"]  # no parameter server in the way
    for mode in ("sync", "hogwild"):
        # each worker's group holds its own process alone, while it computes
        assert len(inside[mode]) == 3 and all(len(pids) <= 1 for pids in inside[mode]), inside
        assert devices_of(logs, mode) == [("cpu-quota", 0.5, 1.0), ("cpu-quota", 0.5, 1.0), ("cpu-quota", 0.5, 4.0)]
    assert "sleep" not in output.split("devices:", 1)[1].splitlines()[0]
    assert launcher_groups(proc) == [] and leftovers(prefix) == []
    assert still_running(recorded_pids(logs)) == []


# ----------------------------------------------------------------------------------------------
# Failures, interrupts, and no privilege


@pytest.mark.slow
def test_an_interrupt_removes_every_namespace(tmp_path, prefix):
    logs = str(tmp_path / "logs")
    args = ["--modes", "esync", "--devices", "cpu,cpu", "--max-time", "120", *LENET, *netns_args(prefix)]
    with launcher(args, logs) as proc:
        wait_for(lambda: training_started(logs, "esync", 2), STARTUP_TIMEOUT, "iteration logs")
        assert netns.namespaces(prefix) != []

        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)

        assert proc.returncode == 130, read_output(proc)
        assert still_running(recorded_pids(logs)) == []
        assert leftovers(prefix) == []


@pytest.mark.slow
def test_a_failing_worker_removes_every_namespace(tmp_path, prefix):
    logs = str(tmp_path / "logs")
    args = ["--modes", "sync", "--devices", "cpu,cpu", "--max-time", "120", *LENET, *netns_args(prefix)]

    code, victim, output = kill_once_training(args, logs, "worker-1", STARTUP_TIMEOUT)

    assert code == 1, output
    assert f"worker-1 (worker, pid {victim}) exited with signal SIGKILL" in output
    assert still_running(recorded_pids(logs)) == []
    assert leftovers(prefix) == []


def test_without_ip_and_tc_it_refuses_in_one_line(tmp_path, prefix):
    env = dict(launcher_env(), PATH=str(tmp_path))  # a PATH where neither ip nor tc is found
    argv = [sys.executable, LAUNCH_PY, "--modes", "sync", "--devices", "cpu,cpu", "--max-time", "5", *LENET,
            "--logs", str(tmp_path / "logs"), *netns_args(prefix)]

    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--hosts netns needs ip and tc" in result.stderr, result.stderr


def test_without_root_it_refuses_in_one_line(tmp_path, prefix):
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, LAUNCH_PY,
            "--modes", "sync", "--devices", "cpu,cpu", "--max-time", "5", *LENET, "--logs", str(tmp_path / "logs"),
            *netns_args(prefix)]
    os.chmod(tmp_path, 0o777)

    result = subprocess.run(argv, cwd=ROOT, env=launcher_env(), capture_output=True, text=True, timeout=60)

    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "needs root" in result.stderr, result.stderr
    assert netns.namespaces(prefix) == []
