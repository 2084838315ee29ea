"""The peer monitor's view of this process's own TCP sockets, on real sockets on loopback: peers are other
processes (a small listener process), as ps-lite's are."""
import os
import socket
import subprocess
import sys
import time

import pytest

from launcher.cluster import ROOT
from training.faults.peers import LISTEN, PeerMonitor, outgoing_connections, own_socket_fds, tcp_sockets

# Answers the commands on its stdin: "accept" one connection, "close" all it accepted.
PEER_PROCESS = """
import socket, sys
server = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)
server.bind((sys.argv[1], 0))
server.listen()
print(server.getsockname()[1], flush=True)
accepted = []
for command in sys.stdin:
    if command.strip() == "accept":
        accepted.append(server.accept()[0])
    else:
        for conn in accepted:
            conn.close()
    print("done", flush=True)
"""


class PeerProcess:
    def __init__(self, host):
        self.proc = subprocess.Popen([sys.executable, "-c", PEER_PROCESS, host], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.address = (host, int(self.proc.stdout.readline()))

    def connect(self):
        client = socket.create_connection(self.address)
        self._command("accept")
        return client

    def close_connections(self):
        self._command("close")
        deadline = time.monotonic() + 5
        while self.address in outgoing_now() and time.monotonic() < deadline:
            time.sleep(0.01)  # the FIN is on its way to this process's socket

    def _command(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def peer():
    process = PeerProcess("127.0.0.1")
    yield process
    process.stop()


def outgoing_now():
    return outgoing_connections(tcp_sockets(own_socket_fds()))


def test_a_connection_to_another_process_is_outgoing(peer):
    with peer.connect():
        assert peer.address in outgoing_now()


def test_a_connection_closed_by_the_peer_is_no_longer_outgoing(peer):
    with peer.connect():
        peer.close_connections()

        assert peer.address not in outgoing_now()


def test_a_connection_to_this_process_itself_is_not_a_peer():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            accepted, _ = server.accept()
            with accepted:
                outgoing = outgoing_now()

                assert server.getsockname() not in outgoing and client.getsockname() not in outgoing


def test_a_listening_socket_is_listed_with_its_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        assert (LISTEN, server.getsockname(), None) in tcp_sockets(own_socket_fds())


def test_descriptors_that_are_not_tcp_sockets_are_skipped():
    left, right = socket.socketpair()
    with left, right:
        assert tcp_sockets([left.fileno(), right.fileno()]) == []


def test_an_ipv6_connection_is_seen():
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    peer = PeerProcess("::1")
    try:
        with peer.connect():
            assert peer.address in outgoing_now()
    finally:
        peer.stop()


def test_a_peer_gone_for_longer_than_the_grace_period_is_lost(peer):
    monitor = PeerMonitor(grace=5.0)
    with peer.connect():
        assert monitor.lost_peers(now=100.0) == []
        peer.close_connections()

        assert monitor.lost_peers(now=104.0) == []
        assert monitor.lost_peers(now=106.0) == [peer.address]


def test_an_ignored_endpoint_is_never_lost(peer):
    monitor = PeerMonitor(grace=5.0, ignore=[peer.address])
    with peer.connect():
        monitor.lost_peers(now=100.0)
        peer.close_connections()

        assert monitor.lost_peers(now=200.0) == []


@pytest.mark.parametrize("mode, left_alone", [("esync", True), ("nbsync", True), ("sync", False), ("async", False)])
def test_workers_of_modes_with_a_state_server_leave_its_connection_alone(mode, left_alone):
    from training import config
    import main

    args = config.parse_args(["-m", mode, "-ip", "127.0.0.1", "-port", "10010"])

    assert main.state_server_endpoints(args) == ({("127.0.0.1", 10010)} if left_alone else set())


def test_peers_that_never_connected_count_only_after_the_join_timeout(peer):
    monitor = PeerMonitor(grace=5.0, expected_peers=2, join_timeout=30.0)
    with peer.connect():
        now = time.monotonic()
        monitor.lost_peers(now)

        assert monitor.missing_peers(now) == 0
        assert monitor.missing_peers(now + 31.0) == 1


def test_a_known_peer_is_described_by_name():
    monitor = PeerMonitor(grace=5.0, names={("127.0.0.1", 9091): "the scheduler"})

    assert monitor.describe(("127.0.0.1", 9091)) == "the scheduler at 127.0.0.1:9091"
    assert monitor.describe(("127.0.0.1", 9092)) == "127.0.0.1:9092"


def test_a_scheduler_and_server_whose_workers_never_come_exit_with_a_message(processes):
    from launcher.cluster import dmlc_env, free_port

    root_port = free_port()
    main = os.path.join(ROOT, "main.py")
    started = time.monotonic()
    ps = [processes.start_python(role, [main, "-m", "sync", "--sync-timeout", "3"],
                                 dmlc_env(role, root_port, num_servers=1, num_workers=1), role=role)
          for role in ("scheduler", "server")]

    assert processes.wait(ps, timeout=3 + 10)
    for proc in ps:
        assert proc.poll() == 3
        assert "never connected in 3 s" in open(proc.output).read()
    print(f"scheduler and server gave up {time.monotonic() - started:.1f} s after they started")
