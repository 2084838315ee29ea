"""Ends a scheduler, server or worker whose ps-lite peer has died, or whose job never forms.

ps-lite never notices a dead node: a server or the scheduler waits in its loop (run inside `import mxnet`) and at
the final barrier forever. But every node keeps one TCP connection open to each node of another role (ZMQ connects
out to the peer's bound port), so a peer that dies leaves a connection that is gone for good (ZMQ's reconnection
attempts are refused). The monitor looks at this process's own sockets every second, remembers the remote end of
each outgoing connection, and when one has had no established connection for the grace period it logs the address
and ends the process.
"""
import logging
import os
import socket
import sys
import threading
import time

from training.faults.watchdog import EXIT_SYNC_TIMEOUT

log = logging.getLogger("peers")

LISTEN, ESTABLISHED, OTHER = "listen", "established", "other"
TCP_ESTABLISHED = 1  # tcpi_state, the first byte of struct tcp_info
POLL_SECONDS = 1.0
MAX_GRACE = 10.0


def own_socket_fds():
    """This process's socket descriptors, from the /proc/self/fd links 'socket:[N]'."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:["):
                fds.append(int(fd))
        except OSError:
            continue  # closed meanwhile
    return fds


def tcp_sockets(fds):
    """[(state, (local ip, port), (remote ip, port) or None)] of the TCP sockets among `fds`.

    Each socket is looked at through a duplicate of its descriptor, so the sockets of MXNet's threads are only
    read, never changed. (Reading /proc/net/tcp instead costs several milliseconds per poll: the kernel walks its
    whole connection table.)"""
    found = []
    for fd in fds:
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                    found.append(_describe(sock))
        except OSError:
            continue  # closed meanwhile, or not a socket any more
    return found


def _describe(sock):
    local = sock.getsockname()[:2]
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return LISTEN, local, None
    if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != TCP_ESTABLISHED:
        return OTHER, local, None
    return ESTABLISHED, local, _unmapped(sock.getpeername()[:2])


def _unmapped(endpoint):
    ip, port = endpoint
    return (ip[len("::ffff:"):], port) if ip.startswith("::ffff:") and "." in ip else endpoint


def outgoing_connections(sockets):
    """Remote ends of the established connections this process opened to other processes: its local port is not
    one it listens on, and the remote end is not one of its own sockets (ps-lite also connects a node to itself)."""
    listening = {local[1] for state, local, _ in sockets if state == LISTEN}
    own_ends = {local for state, local, _ in sockets if state == ESTABLISHED}
    return {remote for state, local, remote in sockets
            if state == ESTABLISHED and local[1] not in listening and remote not in own_ends}


class PeerMonitor:
    """Watches the outgoing connections of this process; a peer gone for `grace` seconds ends the process.

    `ignore` holds remote endpoints that are not ps-lite peers (the ESync state server, which may restart);
    `names` gives a readable name to known endpoints (the scheduler). With `expected_peers`, fewer peers than that
    within `join_timeout` seconds also ends the process: one died before it connected, and the job cannot form."""

    def __init__(self, grace, ignore=(), names=None, expected_peers=None, join_timeout=None, poll=POLL_SECONDS):
        self.grace = grace
        self.ignore = set(ignore)
        self.names = dict(names or {})
        self.expected_peers = expected_peers
        self.join_timeout = join_timeout
        self.poll = poll
        self.last_seen = {}
        self._started = time.monotonic()
        self._stopped = threading.Event()

    def start(self):
        threading.Thread(target=self._watch, name="peer-monitor", daemon=True).start()
        return self

    def stop(self):
        """A node that left the cluster on purpose: its peers going away is no longer a fault."""
        self._stopped.set()

    def lost_peers(self, now):
        """Record the peers connected now; return those gone for longer than the grace period."""
        for peer in outgoing_connections(tcp_sockets(own_socket_fds())) - self.ignore:
            self.last_seen[peer] = now
        return [peer for peer, seen in self.last_seen.items() if now - seen > self.grace]

    def missing_peers(self, now):
        """How many expected peers never connected once the join timeout has passed, else 0."""
        if self.expected_peers is None or now - self._started <= self.join_timeout:
            return 0
        return max(0, self.expected_peers - len(self.last_seen))

    def describe(self, peer):
        address = f"{peer[0]}:{peer[1]}"
        return f"{self.names[peer]} at {address}" if peer in self.names else address

    def _watch(self):
        while not self._stopped.wait(self.poll):
            lost = self.lost_peers(time.monotonic())
            if lost and not self._stopped.is_set():
                log.error("no connection to %s (a process of this job) for %.0f s: it has probably died; exiting",
                          ", ".join(self.describe(peer) for peer in lost), self.grace)
                self._exit()
            missing = self.missing_peers(time.monotonic())
            if missing and not self._stopped.is_set():
                log.error("%d of the %d other processes of this job never connected in %.0f s (is every scheduler, "
                          "server and worker started?); exiting", missing, self.expected_peers, self.join_timeout)
                self._exit()

    @staticmethod
    def _exit():
        sys.stderr.flush()
        os._exit(EXIT_SYNC_TIMEOUT)


def grace_for(sync_timeout):
    return min(sync_timeout, MAX_GRACE)


def resolve(host, port):
    """(ip, port) endpoints a host name stands for; empty when it does not resolve."""
    try:
        return {(info[4][0], port) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except OSError:
        return set()
