"""The peer monitor's view of this process's own TCP sockets, on real sockets on 127.0.0.1."""
import socket

import pytest

from training.peers import LISTEN, PeerMonitor, outgoing_connections, own_socket_fds, tcp_sockets


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
        outgoing = outgoing_connections(tcp_sockets(own_socket_fds()))
    finally:
        client.close()
        accepted.close()

    assert listener.getsockname() in outgoing


def test_an_accepted_connection_is_not_outgoing(listener):
    client, accepted = connect(listener)
    client_end = client.getsockname()
    try:
        outgoing = outgoing_connections(tcp_sockets(own_socket_fds()))
    finally:
        client.close()
        accepted.close()

    assert client_end not in outgoing


def test_a_listening_socket_is_listed_with_its_port(listener):
    sockets = tcp_sockets(own_socket_fds())

    assert (LISTEN, listener.getsockname(), None) in sockets


def test_descriptors_that_are_not_tcp_sockets_are_skipped():
    left, right = socket.socketpair()
    with left, right:
        assert tcp_sockets([left.fileno(), right.fileno()]) == []


def test_a_connection_closed_by_its_peer_is_no_longer_outgoing(listener):
    client, accepted = connect(listener)
    accepted.close()
    try:
        outgoing = outgoing_connections(tcp_sockets(own_socket_fds()))
    finally:
        client.close()

    assert listener.getsockname() not in outgoing


def test_an_ipv6_connection_is_seen():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    with socket.socket(socket.AF_INET6) as server:
        try:
            server.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback")
        server.listen()
        address = server.getsockname()[:2]
        with socket.create_connection(address):
            accepted, _ = server.accept()
            outgoing = outgoing_connections(tcp_sockets(own_socket_fds()))
            accepted.close()

    assert address in outgoing


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
