"""The peer monitor's view of this process's own TCP sockets, on real sockets on 127.0.0.1."""
import socket

import pytest

from training.peers import PeerMonitor, _endpoint, outgoing_connections, own_socket_inodes, tcp_sockets


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server
    server.close()


def connect(listener):
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    return client, accepted


def test_an_outgoing_connection_is_seen_with_its_remote_end(listener):
    client, accepted = connect(listener)
    try:
        outgoing = outgoing_connections(tcp_sockets(own_socket_inodes()))
    finally:
        client.close()
        accepted.close()

    assert listener.getsockname() in outgoing


def test_an_accepted_connection_is_not_outgoing(listener):
    client, accepted = connect(listener)
    client_end = client.getsockname()
    try:
        outgoing = outgoing_connections(tcp_sockets(own_socket_inodes()))
    finally:
        client.close()
        accepted.close()

    assert client_end not in outgoing


def test_a_listening_socket_is_listed_with_its_port(listener):
    sockets = tcp_sockets(own_socket_inodes())

    assert ("0A", listener.getsockname(), ("0.0.0.0", 0)) in sockets


def test_sockets_of_other_processes_are_not_listed(listener):
    assert tcp_sockets(set()) == []


@pytest.mark.parametrize("text, endpoint", [
    ("0100007F:1F90", ("127.0.0.1", 8080)),
    ("00000000000000000000000001000000:0050", ("::1", 80)),
    ("0000000000000000FFFF00000100007F:2712", ("127.0.0.1", 10002)),
])
def test_proc_net_tcp_addresses_are_decoded(text, endpoint):
    assert _endpoint(text) == endpoint


def test_a_peer_gone_for_longer_than_the_grace_period_is_lost(listener):
    client, accepted = connect(listener)
    monitor = PeerMonitor(grace=5.0)
    assert monitor.lost_peers(now=100.0) == []

    client.close()
    accepted.close()

    assert monitor.lost_peers(now=104.0) == []
    assert monitor.lost_peers(now=106.0) == [listener.getsockname()]


def test_an_ignored_endpoint_is_never_lost(listener):
    client, accepted = connect(listener)
    monitor = PeerMonitor(grace=5.0, ignore=[listener.getsockname()])
    monitor.lost_peers(now=100.0)
    client.close()
    accepted.close()

    assert monitor.lost_peers(now=200.0) == []


def test_a_known_peer_is_described_by_name():
    monitor = PeerMonitor(grace=5.0, names={("127.0.0.1", 9091): "the scheduler"})

    assert monitor.describe(("127.0.0.1", 9091)) == "the scheduler at 127.0.0.1:9091"
    assert monitor.describe(("127.0.0.1", 9092)) == "127.0.0.1:9092"
