"""Ends a scheduler, server or worker whose ps-lite peer has died.

ps-lite never notices a dead node: a server or the scheduler waits in its loop (run inside `import mxnet`) and at
the final barrier forever. But every node keeps one TCP connection open to each node of another role (ZMQ connects
out to the peer's bound port), so a peer that dies leaves a connection that is gone for good. The monitor reads this
process's own sockets from /proc every second, remembers the remote end of each outgoing connection, and when one
has had no established connection for the grace period it logs the address and ends the process.
"""
import logging
import os
import socket
import sys
import threading
import time

from training.watchdog import EXIT_SYNC_TIMEOUT

log = logging.getLogger("peers")

TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
TCP_ESTABLISHED = "01"
TCP_LISTEN = "0A"
POLL_SECONDS = 1.0
MAX_GRACE = 10.0


def own_socket_inodes():
    """Inodes of this process's sockets, from the /proc/self/fd links 'socket:[N]'."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    return inodes


def tcp_sockets(inodes, tables=TCP_TABLES):
    """[(state, (local ip, port), (remote ip, port))] of the TCP sockets among `inodes`."""
    found = []
    for table in tables:
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue  # no IPv6 on this machine
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and int(fields[9]) in inodes:
                found.append((fields[3], _endpoint(fields[1]), _endpoint(fields[2])))
    return found


def outgoing_connections(sockets):
    """Remote ends of the established connections this process opened (its local port is not one it listens on)."""
    listening = {local[1] for state, local, _ in sockets if state == TCP_LISTEN}
    return {remote for state, local, remote in sockets if state == TCP_ESTABLISHED and local[1] not in listening}


def _endpoint(text):
    """'0100007F:1F90' -> ('127.0.0.1', 8080); IPv6 addresses are four little-endian 32-bit words."""
    address, port = text.split(":")
    raw = bytes.fromhex(address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    ip = socket.inet_ntop(family, words)
    if ip.startswith("::ffff:") and "." in ip:
        ip = ip[len("::ffff:"):]
    return ip, int(port, 16)


class PeerMonitor:
    """Watches the outgoing connections of this process; a peer gone for `grace` seconds ends the process.

    `ignore` holds remote endpoints that are not ps-lite peers (the ESync state server, which may restart);
    `names` gives a readable name to known endpoints (the scheduler)."""

    def __init__(self, grace, ignore=(), names=None, poll=POLL_SECONDS):
        self.grace = grace
        self.ignore = set(ignore)
        self.names = dict(names or {})
        self.poll = poll
        self.last_seen = {}
        self._stopped = threading.Event()

    def start(self):
        threading.Thread(target=self._watch, name="peer-monitor", daemon=True).start()
        return self

    def stop(self):
        """A node that left the cluster on purpose: its peers going away is no longer a fault."""
        self._stopped.set()

    def lost_peers(self, now):
        """Record the peers connected now; return those gone for longer than the grace period."""
        for peer in outgoing_connections(tcp_sockets(own_socket_inodes())) - self.ignore:
            self.last_seen[peer] = now
        return [peer for peer, seen in self.last_seen.items() if now - seen > self.grace]

    def describe(self, peer):
        address = f"{peer[0]}:{peer[1]}"
        return f"{self.names[peer]} at {address}" if peer in self.names else address

    def _watch(self):
        while not self._stopped.wait(self.poll):
            lost = self.lost_peers(time.monotonic())
            if lost and not self._stopped.is_set():
                log.error("no connection to %s (a process of this job) for %.0f s: it has probably died; exiting",
                          ", ".join(self.describe(peer) for peer in lost), self.grace)
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
