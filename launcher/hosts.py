"""Where a process of a job runs: this machine's loopback, or a network namespace standing for a host of its own."""
import ctypes
import os
import threading
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"
CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class Host:
    """A host of the job: its name, its address, its interface and, for a separate host, its namespace."""
    name: str
    address: str
    interface: str
    namespace: str = None

    @property
    def command_prefix(self):
        # `ip netns exec` execs the command: the PID it starts is the command's, and so is the process group.
        return ["ip", "netns", "exec", self.namespace] if self.namespace else []


LOCAL_HOST = Host("local", LOOPBACK, "lo")


@dataclass
class Placement:
    """The host of every role of a ps-lite job (and of the state server, on the scheduler's host)."""
    scheduler: Host = LOCAL_HOST
    servers: list = field(default_factory=list)
    workers: list = field(default_factory=list)

    def server(self, index):
        return self.servers[index] if index < len(self.servers) else self.scheduler

    def worker(self, index):
        return self.workers[index] if index < len(self.workers) else self.scheduler


def on_host(host, fn, *args):
    """fn(*args) with the network of `host`: in its namespace, or here when it has none."""
    return call_in_namespace(host.namespace, fn, *args) if host.namespace else fn(*args)


def call_in_namespace(namespace, fn, *args):
    """fn(*args) in a thread that has entered `namespace`: its sockets live there, the caller's stay put."""
    outcome = {}

    def target():
        try:
            enter_namespace(namespace)
            outcome["value"] = fn(*args)
        except BaseException as error:  # handed to the caller, who decides
            outcome["error"] = error

    thread = threading.Thread(target=target, name=f"in-{namespace}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def enter_namespace(namespace):
    """Move the calling thread (the network namespace is per thread) into `namespace`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace}")
    finally:
        os.close(fd)
