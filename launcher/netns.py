"""Separate hosts on one machine: Linux network namespaces joined by rate-limited links.

Each host is a network namespace with one interface, eth0, and its own address. A veth pair joins it to a bridge
that lives in a namespace of its own, so the machine's own namespace is never touched, and a token bucket filter
(tc tbf) shapes both directions of every link: the egress of eth0 (what the host sends) and the egress of the
bridge-side end (what it receives). Every namespace of a network carries the same name prefix; deleting the
namespaces removes the veths and the bridge with them.

    python launch.py clean-netns [PREFIX]   # remove namespaces a killed run left behind (default prefix: esync-)

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the `ip` and `tc` commands of iproute2.
"""
import ipaddress
import json
import logging
import secrets
import shutil
import subprocess
import sys
import threading
import time

from launcher.hosts import Host, Placement

log = logging.getLogger("netns")

DEFAULT_PREFIX = "esync-"
DEFAULT_SUBNET = "10.213.0.0/24"
HOST_INTERFACE = "eth0"
BRIDGE = "br0"
# tbf's bucket: 4 ms of traffic at the link's rate, and never less than a large GSO packet.
BURST_SECONDS = 0.004
MIN_BURST_BYTES = 64 * 1024
QUEUE_LATENCY = "100ms"
RATE_SLACK = 1.02           # the kernel's byte counters include the 14-byte Ethernet header tbf may not count
MIN_CARRIED_BYTES = 32 * 1024  # a worker link of a cluster job carries at least this much each way
DIRECTIONS = {"rx": "received", "tx": "sent"}


class NetnsUnavailable(Exception):
    """This machine or user cannot build namespaces: no root, or no ip/tc."""


class NetnsError(Exception):
    """An ip or tc command failed."""


def parse_subnet(text, num_hosts):
    """The network of `text` (10.213.0.0/24), if it has an address for each of `num_hosts` hosts."""
    subnet = ipaddress.ip_network(text.strip())
    if subnet.num_addresses - 2 < num_hosts:
        raise ValueError(f"subnet {text} has no room for {num_hosts} hosts")
    return subnet


def unique_prefix():
    return f"{DEFAULT_PREFIX}{secrets.token_hex(3)}-"


def run(*argv):
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {result.stderr.strip() or f'exit {result.returncode}'}")
    return result.stdout


def check_available(prefix):
    """NetnsUnavailable with a one-line reason unless namespaces, veths and tbf can be created here."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise NetnsUnavailable(f"--hosts netns needs {' and '.join(missing)} (iproute2)")
    probe = f"{prefix}probe"
    try:
        run("ip", "netns", "add", probe)
    except NetnsError as error:
        raise NetnsUnavailable(f"--hosts netns needs root to create network namespaces ({error})")
    try:
        run("ip", "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
        run("tc", "-n", probe, "qdisc", "add", "dev", "probe0", "root", "tbf", "rate", "1mbit",
            "burst", "64kb", "latency", QUEUE_LATENCY)
    except NetnsError as error:
        raise NetnsUnavailable(f"--hosts netns cannot shape links here ({error})")
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def namespaces(prefix=""):
    """Names of the network namespaces that start with `prefix`."""
    names = [line.split()[0] for line in run("ip", "netns", "list").splitlines() if line.strip()]
    return [name for name in names if name.startswith(prefix)]


def remove_namespaces(prefix):
    """Delete every namespace named with `prefix`, and with them their veths and bridges; returns their names."""
    removed = namespaces(prefix)
    for name in removed:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return removed


class VirtualNetwork:
    """Hosts on one bridge, each behind its own shaped link; `with VirtualNetwork(...)` tears it all down."""

    def __init__(self, prefix=None, subnet=DEFAULT_SUBNET):
        self.prefix = prefix or unique_prefix()
        self.subnet = ipaddress.ip_network(subnet)
        self.addresses = self.subnet.hosts()
        self.bridge_namespace = f"{self.prefix}bridge"
        self.hosts = []
        self.rates = {}  # host name -> bits per second of its link

    def create(self):
        stale = remove_namespaces(self.prefix)
        if stale:
            log.warning("removed namespaces of an earlier run with prefix %s: %s", self.prefix, ", ".join(stale))
        run("ip", "netns", "add", self.bridge_namespace)
        self._in_bridge("link", "add", BRIDGE, "type", "bridge")
        self._in_bridge("link", "set", BRIDGE, "up")
        return self

    def add_host(self, name, rate_bps):
        """A new namespace `<prefix><name>` on the bridge, its link shaped to `rate_bps` both ways."""
        namespace = f"{self.prefix}{name}"
        address = str(next(self.addresses))
        bridge_end = f"to-{name}"[:15]
        run("ip", "netns", "add", namespace)
        self._in_bridge("link", "add", bridge_end, "type", "veth", "peer", "name", HOST_INTERFACE, "netns", namespace)
        self._in_bridge("link", "set", bridge_end, "master", BRIDGE)
        self._in_bridge("link", "set", bridge_end, "up")
        run("ip", "-n", namespace, "link", "set", "lo", "up")
        run("ip", "-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", HOST_INTERFACE)
        run("ip", "-n", namespace, "link", "set", HOST_INTERFACE, "up")
        shape(namespace, HOST_INTERFACE, rate_bps)
        shape(self.bridge_namespace, bridge_end, rate_bps)
        host = Host(name, address, HOST_INTERFACE, namespace)
        self.hosts.append(host)
        self.rates[name] = rate_bps
        log.info("host %s: %s in namespace %s, link %s bit/s each way", name, address, namespace, f"{rate_bps:.3g}")
        return host

    def link_bytes(self):
        """{host name: {"rx": bytes received, "tx": bytes sent}} on each host's eth0, counted by the kernel."""
        return {host.name: interface_bytes(host.namespace, HOST_INTERFACE) for host in self.hosts}

    def teardown(self):
        removed = remove_namespaces(self.prefix)
        log.info("removed %d namespaces with prefix %s", len(removed), self.prefix)

    def _in_bridge(self, *argv):
        run("ip", "-n", self.bridge_namespace, *argv)

    def __enter__(self):
        try:
            return self.create()
        except BaseException:
            self.teardown()
            raise

    def __exit__(self, *exc):
        self.teardown()


def build_cluster(network, cluster, num_workers):
    """The hosts of `cluster` (launcher/experiment.Cluster): the parameter-server host `ps` (scheduler, state server,
    server 0), one more host per further server (`ps1`, ...) and one host per worker (`w0`, ...; num_workers with the
    validators), worker w's link `cluster.link_slowdowns[w]` times slower (none: 1); returns where each role runs."""
    servers = [network.add_host("ps" if s == 0 else f"ps{s}", cluster.ps_rate) for s in range(cluster.num_servers)]
    slower = cluster.link_slowdowns
    factors = [float(f) for f in slower] + [1.0] * (num_workers - len(slower))
    workers = [network.add_host(f"w{w}", int(cluster.worker_rate / factors[w])) for w in range(num_workers)]
    return Placement(scheduler=servers[0], servers=servers, workers=workers)


class LinkMeter:
    """Bytes each host's link carried since the meter was made: in total, and the busiest window of about
    `window` seconds (sampled by a background thread until stop() or report())."""

    def __init__(self, network, window=2.0):
        self.network = network
        self.window = window
        self.samples = [(time.monotonic(), network.link_bytes())]
        self.stopped = threading.Event()
        self.sampler = threading.Thread(target=self._sample, name="link-meter", daemon=True)
        self.sampler.start()

    def _sample(self):
        while not self.stopped.wait(self.window):
            try:
                self.samples.append((time.monotonic(), self.network.link_bytes()))
            except NetnsError:  # the network is being torn down
                return

    def stop(self):
        self.stopped.set()
        self.sampler.join()

    def report(self):
        self.stop()
        self.samples.append((time.monotonic(), self.network.link_bytes()))
        (started, before), (ended, after) = self.samples[0], self.samples[-1]
        seconds = ended - started
        links = {}
        for name in after:
            link = {"rate_bps": self.network.rates[name]}
            for direction in ("rx", "tx"):
                total = after[name][direction] - before[name][direction]
                link[f"{direction}_bytes"] = total
                link[f"{direction}_bytes_per_s"] = total / seconds
                link[f"peak_{direction}_bytes_per_s"] = self._peak(name, direction)
            links[name] = link
        return {"seconds": seconds, "window_seconds": self.window, "links": links}

    def _peak(self, name, direction):
        pairs = zip(self.samples, self.samples[1:])
        return max((b[1][name][direction] - a[1][name][direction]) / (b[0] - a[0]) for a, b in pairs)


def describe_links(report, names):
    """'ps in 4.8 out 4.8 MB/s (busiest 2 s: 6.5, 6.5) of 12.5' for each host in `names`."""
    parts = []
    for name in names:
        link = report["links"][name]
        parts.append(f"{name} in {link['rx_bytes_per_s'] / 1e6:.2f} out {link['tx_bytes_per_s'] / 1e6:.2f} MB/s "
                     f"(busiest {report['window_seconds']:g} s: {link['peak_rx_bytes_per_s'] / 1e6:.2f}, "
                     f"{link['peak_tx_bytes_per_s'] / 1e6:.2f}) of {link['rate_bps'] / 8e6:.2f}")
    return "; ".join(parts)


def burst_bytes(rate_bps):
    return max(int(rate_bps / 8 * BURST_SECONDS), MIN_BURST_BYTES)


def link_problems(report, worker_links=True):
    """What makes a LinkMeter report unfit to stand for its links, one phrase each: a link that carried more than
    its rate allows over the report (the bucket and RATE_SLACK for the Ethernet headers the counters include), and
    with `worker_links` a worker link (`w<K>`) that carried less than MIN_CARRIED_BYTES either way: the job's
    traffic took another path."""
    problems = []
    for name, link in report["links"].items():
        allowed = RATE_SLACK * link["rate_bps"] / 8 * report["seconds"] + burst_bytes(link["rate_bps"])
        for direction in ("rx", "tx"):
            if link[f"{direction}_bytes"] > allowed:
                problems.append(f"{name} {DIRECTIONS[direction]} {link[f'{direction}_bytes']} bytes in "
                                f"{report['seconds']:.1f} s, more than its {link['rate_bps']:.3g} bit/s allow")
        if worker_links and name.startswith("w") and min(link["rx_bytes"], link["tx_bytes"]) < MIN_CARRIED_BYTES:
            problems.append(f"{name} carried {link['rx_bytes']} bytes in and {link['tx_bytes']} out, less than "
                            f"{MIN_CARRIED_BYTES}")
    return problems


def shape(namespace, interface, rate_bps):
    """A token bucket filter on the egress of `interface`: it sends at most `rate_bps`."""
    burst = burst_bytes(rate_bps)
    run("tc", "-n", namespace, "qdisc", "add", "dev", interface, "root", "tbf", "rate", f"{rate_bps}bit",
        "burst", str(burst), "latency", QUEUE_LATENCY)


def interface_bytes(namespace, interface):
    stats = json.loads(run("ip", "-j", "-s", "-n", namespace, "link", "show", "dev", interface))[0]["stats64"]
    return {"rx": stats["rx"]["bytes"], "tx": stats["tx"]["bytes"]}


def clean_command(argv):
    """`launch.py clean-netns [PREFIX]`: remove the namespaces named with PREFIX (default esync-)."""
    usage = (f"usage: launch.py clean-netns [PREFIX]   (removes the network namespaces named PREFIX..., "
             f"default {DEFAULT_PREFIX})")
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if len(argv) > 1 or argv[0:1] and argv[0].startswith("-"):
        print(f"launch.py clean-netns: error: {' '.join(argv)}: give one PREFIX or none ({usage})", file=sys.stderr)
        return 2
    for name in remove_namespaces(argv[0] if argv else DEFAULT_PREFIX):
        print(f"removed namespace {name}")
    return 0
