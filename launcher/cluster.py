"""Start and stop the processes of a job on this machine: state server, scheduler, servers, workers.

Used by the launcher, the benchmark and the tests. Every process gets its own output file, is stopped by its PID
(its whole process group), and a ProcessGroup used as a context manager leaves nothing behind, also on errors.
"""
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from launcher.hosts import LOCAL_HOST, LOOPBACK, Placement, on_host
from training.devices import threads
from coordination.client import TOKEN_ENV as STATE_TOKEN_VARIABLE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANAGE_PY = os.path.join(ROOT, "SimpleStateServer", "manage.py")
STATE_SERVER_STARTUP = 30.0  # seconds for Django to answer
POLL_SECONDS = 0.2
# ps-lite binds a node to $PORT when it is set: an inherited PORT would put every node on the scheduler's port.
INHERITED_VARS_TO_DROP = ("PORT", "DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER",
                          "DMLC_NUM_WORKER", "DMLC_NODE_HOST", "DMLC_INTERFACE")


class JobFailed(Exception):
    """A process of the job failed; `proc` is the one to blame (None when no single one is)."""

    def __init__(self, proc, reason):
        super().__init__(reason)
        self.proc = proc
        self.reason = reason


_handed_out = set()  # (host, port) pairs free_port returned in this process
PORTS_BELOW_EPHEMERAL = 12000
FIRST_UNPRIVILEGED = 1024


def free_port(host=LOOPBACK):
    """A port nothing listens on now, and one this process has not handed out before: the kernel may offer a port
    again as soon as the probe closes it, and two jobs started in a row would then both take it before either's
    scheduler binds it. Drawn below the kernel's ephemeral range, where ps-lite's servers and workers, MPI and every
    other program that binds port 0 take theirs: a job's scheduler port chosen there was once taken by another job's
    server before the scheduler bound it, and each job's nodes then reached the other's."""
    low, high = chosen_ports()
    while True:
        port = random.randrange(low, high) if high > low else 0
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            port = s.getsockname()[1]
        if (host, port) not in _handed_out:
            _handed_out.add((host, port))
            return port


def chosen_ports():
    """[low, high): the ports free_port draws from, the PORTS_BELOW_EPHEMERAL below the kernel's ephemeral range
    (Linux's /proc/sys/net/ipv4/ip_local_port_range); (0, 0), the kernel's choice, where that range starts too low."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0, 0
    low = max(FIRST_UNPRIVILEGED, ephemeral - PORTS_BELOW_EPHEMERAL)
    return (low, ephemeral) if ephemeral - low >= PORTS_BELOW_EPHEMERAL // 2 else (0, 0)


def dmlc_env(role, root_port, num_servers, num_workers, host=LOOPBACK, interface="lo", root_uri=None):
    """The environment of one ps-lite process; `host` is its own address, `root_uri` the scheduler's."""
    return {
        "DMLC_ROLE": role, "DMLC_PS_ROOT_URI": root_uri or host, "DMLC_PS_ROOT_PORT": str(root_port),
        "DMLC_NUM_SERVER": str(num_servers), "DMLC_NUM_WORKER": str(num_workers),
        "DMLC_NODE_HOST": host, "DMLC_INTERFACE": interface,
        **threads.ONE_THREAD,
    }


def start_ps_job(group, ps_argv, workers_argv, num_servers=1, after_each_start=None, placement=None, envs=None,
                 worker_prefixes=None):
    """Scheduler, servers and one worker per argv list of a ps-lite job; returns the workers.

    `ps_argv` is the scheduler's and servers' command line; `after_each_start()` runs after every process starts
    (to record its PID, or to stop starting more). Every role runs on loopback unless `placement` puts it on
    another host. `envs` adds variables to some processes' environments, by process name ("scheduler",
    "server-0", "worker-1", ...); `worker_prefixes[w]` goes before worker w's command (its CPU quota's group)."""
    placement = placement or Placement()
    # A free port of this namespace; a host namespace of our own has nothing else listening.
    root_port = free_port()
    prefixes = worker_prefixes or {}
    starts = [("scheduler", ps_argv, "scheduler", placement.scheduler, [])]
    starts += [(f"server-{s}", ps_argv, "server", placement.server(s), []) for s in range(num_servers)]
    starts += [(f"worker-{w}", argv, "worker", placement.worker(w), list(prefixes.get(w, ())))
               for w, argv in enumerate(workers_argv)]
    workers = []
    for name, argv, role, host, prefix in starts:
        env = dmlc_env(role, root_port, num_servers, len(workers_argv), host.address, host.interface,
                       root_uri=placement.scheduler.address)
        env.update((envs or {}).get(name, {}))
        proc = group.start_python(name, argv, env, role=role, command_prefix=prefix + list(host.command_prefix),
                                  host=host.name)
        if role == "worker":
            workers.append(proc)
        if after_each_start:
            after_each_start()
    return workers


def start_state_server(group, host=LOCAL_HOST, port=None, name="state-server", timeout=STATE_SERVER_STARTUP,
                       after_start=None, while_waiting=None):
    """ESync's Django state server on `host` (in its namespace, if it has one) and `port` (default: a free one);
    returns the port once it answers. JobFailed when it exits first or does not answer within `timeout` seconds.
    `after_start()` runs as soon as the process has started (to record it), `while_waiting()` at every poll (it
    may raise to stop waiting)."""
    port = port or on_host(host, free_port, host.address)
    # --skip-checks: Django's system checks, a development aid, were 0.13 s of the server's 0.30 s of CPU to start
    proc = group.start_python(name, [MANAGE_PY, "runserver", f"{host.address}:{port}", "--noreload", "--skip-checks"],
                              role="state", command_prefix=host.command_prefix, host=host.name)
    if after_start:
        after_start()
    deadline = time.monotonic() + timeout
    if on_host(host, wait_until_answering, proc, host.address, port, deadline, while_waiting or (lambda: None),
               group.env.get(STATE_TOKEN_VARIABLE)):
        return port
    raise JobFailed(proc, "exited before answering" if proc.poll() is not None else f"did not answer in {timeout:g} s")


def wait_until_answering(proc, address, port, deadline, while_waiting, token=None):
    """True once the server at address:port answers (to `token`); False when `proc` exits or the deadline passes
    first."""
    from coordination.client import StateClient, StateServerUnavailable

    # Connection attempts until it listens (the state client would log each refusal), then one request.
    while not accepts_connections(address, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        while_waiting()
        time.sleep(POLL_SECONDS)
    try:
        with StateClient(address, port, token=token) as client:
            client.wait_until_up(max(deadline - time.monotonic(), 0.0))
        return True
    except StateServerUnavailable:
        return False


def accepts_connections(address, port):
    try:
        with socket.create_connection((address, port), timeout=1.0):
            return True
    except OSError:
        return False


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    output: str
    role: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def pid(self):
        return self.popen.pid

    def poll(self):
        return self.popen.poll()


class ProcessGroup:
    """The processes of one job; `with ProcessGroup(...) as group:` stops them all on the way out."""

    def __init__(self, out_dir, env=None):
        """`env`: what every process of the job gets in its environment (the job's state-server token)."""
        self.out_dir = out_dir
        self.env = dict(env or {})
        os.makedirs(out_dir, exist_ok=True)
        self.procs = []

    def start(self, name, argv, env=None, role="", cwd=ROOT, **meta):
        full_env = {k: v for k, v in os.environ.items() if k not in INHERITED_VARS_TO_DROP}
        full_env.update(self.env)
        full_env.update(env or {})
        full_env["PYTHONUNBUFFERED"] = "1"
        taken = sum(1 for proc in self.procs if proc.name == name or proc.name.startswith(f"{name}."))
        name = f"{name}.{taken + 1}" if taken else name  # two jobs of one group keep their outputs apart
        output = os.path.join(self.out_dir, f"{name}.log")
        with open(output, "w") as out:
            popen = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        proc = Proc(name, popen, output, role, meta)
        self.procs.append(proc)
        return proc

    def start_python(self, name, args, env=None, role="", command_prefix=(), **meta):
        return self.start(name, list(command_prefix) + [sys.executable] + list(args), env, role, **meta)

    def failed(self):
        """The first process that exited with an error, or None."""
        for proc in self.procs:
            code = proc.poll()
            if code not in (None, 0):
                return proc
        return None

    def running(self, role=None):
        return [p for p in self.procs if p.poll() is None and (role is None or p.role == role)]

    def wait(self, procs, timeout):
        """Wait until every process in `procs` has exited; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(p.poll() is not None for p in procs):
                return True
            time.sleep(0.1)
        return False

    def wait_for_output(self, proc, text, timeout):
        """Wait until `text` appears in the process's output; False on timeout or when it exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in tail(proc.output, 50):
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def stop(self, grace=5.0):
        """SIGTERM every process group still alive, then SIGKILL what is left after `grace` seconds."""
        alive = [p for p in self.procs if p.poll() is None]
        for proc in alive:
            _signal_group(proc.pid, signal.SIGTERM)
        if not self.wait(alive, grace):
            for proc in alive:
                _signal_group(proc.pid, signal.SIGKILL)
            self.wait(alive, grace)
        for proc in self.procs:  # the group may hold children that outlived their leader
            _signal_group(proc.pid, signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tail(path, lines=5):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def processes_in_group(pgid):
    """PIDs of the live processes (zombies excluded) in process group `pgid`, read from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            state, group = _state_and_group(entry)
            if group == pgid and state != "Z":
                members.append(int(entry))
    return members


def is_running(pid):
    """True while `pid` exists and is not a zombie waiting to be reaped."""
    state, _ = _state_and_group(str(pid))
    return state is not None and state != "Z"


def _state_and_group(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None, None
    # The command name in parentheses may itself hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0], int(fields[2])


def describe_exit(code):
    """'code 1', or 'signal SIGKILL' for a process killed by a signal."""
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"
