"""The links an experiment runs on, as the launcher's options give them: the workers' (--bandwidth, or --comm-ratio's
rate, measured before the first run: launcher/comm_ratio.py) and the parameter servers' (--ps-bandwidth: a rate, or
a multiple of the workers'), shaped in network namespaces (--hosts netns) or charged on the virtual clock
(training/clocks/network.py), and the line that names them in tables and figures.
"""
from launcher import backends, checks, netns, workers
from training.checks import UsageError
from training.clocks import network

DEFAULT_BANDWIDTH = "1gbit"
LOOPBACK_LINKS = "loopback (no link limit)"


def add_host_options(p, rates=True):
    """The hosts and their links; `rates` False where the command sets the rates itself (launch.py regimes)."""
    if rates:
        p.add_argument("--hosts", choices=("local", "netns"), default="local",
                       help="local: every process on 127.0.0.1 (default); netns: one network namespace per host "
                            "with rate-limited links (see below)")
        p.add_argument("--bandwidth", help=f"--hosts netns: each worker link's rate (default {DEFAULT_BANDWIDTH})")
        p.add_argument("--comm-ratio", type=float,
                       help="--hosts netns: instead of --bandwidth, the rate at which one transfer of the model over "
                            "a worker's link lasts this many steps of the fastest worker, both measured before the "
                            "runs (the ESync paper's cluster: about 12; see launcher/comm_ratio.py)")
    p.add_argument("--link-slowdown", help="--hosts netns or --clock virtual: each worker's link this many times "
                   "slower than the workers' rate, a comma list of factors >= 1 like --slowdown's (NxF: F for N "
                   "workers in a row) or one for all (default 1)")
    p.add_argument("--ps-bandwidth", help="--hosts netns or --clock virtual: each parameter-server link's rate, e.g. "
                   "100mbit, or a multiple of the workers' rate, e.g. 6x (default: the workers')")
    p.add_argument("--netns-prefix", help="--hosts netns: name prefix of the namespaces (default esync-<random>-)")
    p.add_argument("--netns-subnet", default=netns.DEFAULT_SUBNET,
                   help=f"--hosts netns: the hosts' addresses (default {netns.DEFAULT_SUBNET})")


def link_rates(ns, num_hosts):
    """(worker link, parameter-server link) in bits per second with --hosts netns, else (None, None); with
    --comm-ratio the workers' rate is None until measured, and so is the servers' unless --ps-bandwidth gives a rate
    rather than a multiple of the workers'."""
    checks.check_comm_ratio(ns)
    if ns.ps_bandwidth:
        try:
            network.parse_server_rate(ns.ps_bandwidth)
        except ValueError as error:
            raise UsageError(f"--ps-bandwidth: {error}") from None
        check_shaped(ns, f"--ps-bandwidth {ns.ps_bandwidth}", "servers'", relative=network.is_multiple(ns.ps_bandwidth))
    if ns.hosts == "local":
        unshaped = [f"{flag} {value}" for flag, value in (("--bandwidth", ns.bandwidth),
                                                          ("--netns-prefix", ns.netns_prefix)) if value]
        if unshaped:
            raise UsageError(f"{unshaped[0]} is for --hosts netns" + (
                "; on the virtual clock --comm-ratio sets the workers' links" if backends.of(ns).charges_time else
                ": on loopback the links carry what they can"))
        return None, None
    try:
        netns.parse_subnet(ns.netns_subnet, num_hosts)
        worker_rate = None if ns.comm_ratio is not None else network.parse_rate(bandwidth(ns))
    except ValueError as error:
        raise UsageError(f"--hosts netns: {error}") from None
    return worker_rate, network.server_bits(ns.ps_bandwidth, worker_rate)


def link_slowdowns(ns, num_workers):
    """Each worker's link slowdown, as given (text), where one is slower than the workers' rate; () where none is.
    UsageError (one line) where no link is shaped or charged."""
    if not ns.link_slowdown:
        return ()
    factors = workers.parse_slowdowns(ns.link_slowdown, num_workers, "--link-slowdown")
    if all(float(f) == 1 for f in factors):
        return ()
    check_shaped(ns, f"--link-slowdown {ns.link_slowdown}", "workers'", relative=True)
    return factors


def check_shaped(ns, given, whose, relative=False):
    """UsageError unless the links are shaped (--hosts netns) or charged (--clock virtual): on loopback in real time
    a rate given for them would be ignored, and so would a multiple of the workers' rate (`relative`) where the
    virtual clock's workers' links are free."""
    if not backends.of(ns).link_rates_apply:
        raise UsageError(f"{given}: the {whose} links are shaped with --hosts netns and charged with --clock virtual; "
                         "on loopback they carry what they can")
    if relative and ns.hosts == "local" and ns.comm_ratio is None:
        raise UsageError(f"{given} scales the workers' links, which are free on the virtual clock without "
                         "--comm-ratio: give --comm-ratio R")


def link_of(ns):
    """The links as tuned.json names a cell's: None on loopback, the ratio, or the rate."""
    return ns.comm_ratio if ns.comm_ratio is not None else bandwidth(ns) if ns.hosts == "netns" else None


def bandwidth(ns):
    """The workers' link rate as given, for messages; with --comm-ratio a placeholder until the rate is measured."""
    if ns.comm_ratio is not None:
        return "(set by --comm-ratio)"
    return ns.bandwidth or DEFAULT_BANDWIDTH


def describe(experiment):
    """One line naming the links `experiment` runs on, for tables and figures."""
    if experiment.tracker:
        return f"the hosts of dmlc_tracker's {experiment.tracker} launcher (links not shaped here)"
    cluster = experiment.cluster
    if experiment.backend.charges_time:
        text = (f"charged on a virtual clock: a transfer of the model lasts {cluster.comm_ratio:g} fast steps"
                if cluster.comm_ratio else f"{LOOPBACK_LINKS}, on a virtual clock")
        if cluster.num_servers != 1 or cluster.ps_link:
            servers_link = cluster.ps_link or "the workers' rate"
            text += f"; {cluster.num_servers} parameter server(s) on links of {servers_link}"
        return text + slower_links(cluster)
    if cluster.hosts == "local":
        return LOOPBACK_LINKS
    servers = f"{cluster.num_servers} parameter servers'" if cluster.num_servers != 1 else "parameter servers'"
    text = f"network namespaces, workers' links {cluster.bandwidth}, {servers} {cluster.ps_bandwidth}"
    if cluster.regime:
        text += (f" (--comm-ratio {cluster.comm_ratio:g}: a model transfer of {cluster.regime['model_bytes']} "
                 f"bytes over a worker link lasts {cluster.comm_ratio:g} x the fast step of "
                 f"{1e3 * cluster.regime['fast_step_seconds']:.2f} ms)")
    return text + slower_links(cluster)


def slower_links(cluster):
    if not cluster.link_slowdowns:
        return ""
    from analysis.tuned import compact

    return f"; each worker's link slower by {compact(','.join(cluster.link_slowdowns))}"
