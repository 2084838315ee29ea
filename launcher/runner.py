"""Running an experiment: each mode in turn (its state server, ps-lite job or dmlc_tracker, supervised to its stop
condition), on this machine's loopback or on hosts made of network namespaces, then the summaries and figures.
"""
import contextlib
import dataclasses
import glob
import logging
import os
import secrets
import shlex
import shutil
import sys
import time
from dataclasses import dataclass

from analysis import summary
from launcher import commands, comm_ratio, mpi, netns, workers
from launcher.cluster import (
    POLL_SECONDS,
    STATE_TOKEN_VARIABLE,
    JobFailed,
    ProcessGroup,
    describe_exit,
    start_ps_job,
    start_state_server,
)
from launcher.experiment import NETWORK_FILE, PROCESSES_FOLDER, SNAPSHOT_FOLDER
from launcher.hosts import LOOPBACK, Host, Placement
from launcher.results import summarize_and_draw
from launcher.supervision import (
    INTERRUPTS,
    PORT_RETRIES,
    Interrupted,
    Progress,
    port_taken,
    report_failure,
    supervise,
    wait_for_group_to_drain,
    write_pid_file,
)
from training import modes, runlog
from training.checkpoints import saved_steps
from training.devices import cpu_quota, threads
from training.transport import collectives
from coordination.client import JOB_SECRET_ENV
from training.faults.failures import EXIT_FAILURE, EXIT_INTERRUPTED
from training.evaluator import EVALUATOR_LOG
from training.files import write_json

log = logging.getLogger("launch")

PS_EXIT_GRACE = 10.0            # seconds scheduler and servers get to exit after the workers
DEVICE_GROUP_PREFIX = "launch"  # the workers' cgroups: esync/launch<launcher pid>-w<worker index>
IN_CGROUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "in-cgroup")
# The evaluator runs only on CPU time no worker wants: Linux's SCHED_IDLE, below even nice 19.
EVALUATOR_PRIORITY = ("chrt", "--idle", "0")


@dataclass(frozen=True)
class JobHosts:
    """Where the processes of every mode run, made when the experiment starts: the placement of the roles and,
    with --hosts netns, the network of namespaces it lies on."""
    placement: Placement
    network: netns.VirtualNetwork | None = None
    quotas: dict = dataclasses.field(default_factory=dict)  # device_groups(): the prefix of each worker's CPU quota


def run(experiment, measured=None):
    """The whole experiment; its exit code. SIGINT and SIGTERM stop every process it started (EXIT_INTERRUPTED, also
    where one came as the run ended). With --comm-ratio the links' rate is measured first (`measured`: the
    measurements of earlier runs, by comm_ratio.resolve)."""
    previous = INTERRUPTS.install()
    try:
        code = run_measured(experiment, measured)
    finally:
        interrupted = INTERRUPTS.restore(previous)
    return EXIT_INTERRUPTED if interrupted and code == 0 else code


def run_measured(experiment, measured):
    try:
        return run_experiment(comm_ratio.resolve(experiment, measured))
    except comm_ratio.MeasurementFailed as error:
        print(f"launch.py: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except Interrupted as signal_name:
        print(f"launch.py: stopped by {signal_name}; every process it started has been stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except netns.NetnsError as error:
        print(f"launch.py: could not build the hosts of --hosts netns: {error}", file=sys.stderr)
        return EXIT_FAILURE


def run_in_turn(labelled, prog, kept=(), finished=None):
    """Run [(label, experiment)] one after another, each announced by its label; 0, or the first failing run's exit
    code after one line naming it (the runs before it keep their logs). `kept`: the indexes of runs an earlier
    command finished (--resume), announced and skipped; `finished(index)` is called after each run that ends well."""
    measured = {}
    for index, (label, experiment) in enumerate(labelled):
        if index in kept:
            print(f"[{prog} {index + 1}/{len(labelled)}] {label}: done before, kept", flush=True)
            continue
        print(f"[{prog} {index + 1}/{len(labelled)}] {label}", flush=True)
        code = run(experiment, measured)
        if code:
            what = "was interrupted" if code == EXIT_INTERRUPTED else f"failed (exit {code})"
            print(f"launch.py {prog}: stopped: {label} {what}; the runs before it kept their logs", file=sys.stderr)
            return code
        if finished is not None:
            finished(index)
    return 0


def run_experiment(experiment):
    print(f"devices: {experiment.cluster.devices_described}", flush=True)
    with hosts_of_the_job(experiment) as hosts, device_groups(experiment) as quotas:
        hosts = dataclasses.replace(hosts, quotas=quotas)
        for position, mode in enumerate(experiment.modes):
            code = run_mode(experiment, mode, position, hosts)
            if code:
                return code
    INTERRUPTS.check()
    code = summarize_and_draw(experiment)
    INTERRUPTS.check()
    return code


@contextlib.contextmanager
def device_groups(experiment):
    """With CPU quotas, {worker index: the prefix that starts it in its cgroup} for every worker and validator, and
    "standalone" for the standalone baseline's (the fastest worker's device); the groups, and those MPI's ranks make
    themselves under this run's tag on loopback, are removed on the way out, whatever happens. {} without."""
    if not experiment.cluster.device_share:
        yield {}
        return
    tag = f"{DEVICE_GROUP_PREFIX}{os.getpid()}"
    os.environ[cpu_quota.TAG_VARIABLE] = tag
    found = cpu_quota.controller()
    cpu_quota.remove_orphans(DEVICE_GROUP_PREFIX, found)
    try:
        factors = list(experiment.cluster.slowdowns) + ["1"] * experiment.validator_hosts
        prefixes = {index: (IN_CGROUP, found.create(f"{tag}-w{index}", experiment.cluster.device_share / float(factor)))
                    for index, factor in enumerate(factors)}
        prefixes["standalone"] = prefixes[experiment.cluster.fastest_worker]
        yield prefixes
    finally:
        os.environ.pop(cpu_quota.TAG_VARIABLE, None)
        cpu_quota.remove_groups(tag, found, keep_alive=False)


@contextlib.contextmanager
def hosts_of_the_job(experiment):
    """The JobHosts of the experiment; with --hosts netns the namespaces and links of every host, removed on the
    way out whatever happens."""
    cluster = experiment.cluster
    if cluster.hosts == "local":
        yield JobHosts(Placement(scheduler=Host("local", experiment.host_ip, "lo")))
        return
    network = netns.VirtualNetwork(cluster.netns_prefix, cluster.netns_subnet)
    try:
        network.create()
        placement = netns.build_cluster(network, cluster, experiment.num_workers + experiment.validator_hosts)
        print(f"hosts: namespaces {cluster.netns_prefix}*, parameter servers at "
              f"{', '.join(h.address for h in placement.servers)} ({cluster.ps_bandwidth}), "
              f"workers {', '.join(h.address for h in placement.workers)} ({cluster.bandwidth})", flush=True)
        INTERRUPTS.check()
        yield JobHosts(placement, network)
    finally:
        network.teardown()


def run_mode(experiment, mode, position, hosts):
    """Train one mode to its stop condition; 0, or EXIT_FAILURE after reporting what failed."""
    label = f"{mode} {position + 1}/{len(experiment.modes)}"
    log_dir = experiment.mode_folder(mode)
    os.makedirs(log_dir, exist_ok=True)
    clear_earlier_run(log_dir, summary.summary_file_name(os.path.basename(log_dir)))
    segments = mpi.shared_memory_segments()
    try:
        return train_mode(experiment, mode, label, log_dir, hosts)
    finally:
        mpi.remove_orphaned_segments(segments)


def train_mode(experiment, mode, label, log_dir, hosts):
    """run_mode's job, every process of it stopped on the way out; with --max-restarts started again from its newest
    checkpoint after a failure, up to that many times."""
    restarts, port_retries = [], 0
    while True:
        final = len(restarts) >= experiment.max_restarts
        job = dataclasses.replace(experiment, resuming=bool(restarts))
        code, failure = run_job(job, mode, label, log_dir, hosts, restarts, final, port_retries < PORT_RETRIES)
        if failure is not None and port_retries < PORT_RETRIES and port_taken(failure):
            port_retries += 1
            keep_outputs(os.path.join(log_dir, PROCESSES_FOLDER), f"port-{port_retries}")
            print(f"[{label}] {failure.proc.name} could not bind the port chosen for it (another program took it): "
                  f"starting the job again on new ports ({port_retries} of {PORT_RETRIES})", flush=True)
            if not restarts:  # what the start left, as a job started again from its start
                clear_earlier_run(log_dir, summary.summary_file_name(os.path.basename(log_dir)), processes=False)
            continue
        if failure is None or final:
            return code
        restarts.append(restart_record(experiment, mode, failure))
        keep_outputs(os.path.join(log_dir, PROCESSES_FOLDER), len(restarts))
        print(f"[{label}] {failure.proc.name if failure.proc else 'the job'} {failure.reason}: restart "
              f"{len(restarts)} of {experiment.max_restarts}, "
              f"from global step {restarts[-1]['resumed_from_step']}", flush=True)
        if not restarts[-1]["resumed_from_step"]:  # no checkpoint yet: the job starts over
            clear_earlier_run(log_dir, summary.summary_file_name(os.path.basename(log_dir)), processes=False)


def restart_record(experiment, mode, failure):
    """What a restart notes: the process that failed, how, and the step the job goes on from (0: from the start)."""
    steps = saved_steps(commands.checkpoint_folder(experiment, mode))
    return {"process": failure.proc.name if failure.proc else None, "reason": failure.reason,
            "resumed_from_step": steps[-1] if steps else 0, "at": time.time()}


def keep_outputs(folder, restart):
    """The failed attempt's process outputs, moved to <processes>/attempt-<restart>/ before the next one writes
    (`restart`: its number, or port-<n> for a start whose port was taken)."""
    kept = os.path.join(folder, f"attempt-{restart}")
    os.makedirs(kept, exist_ok=True)
    for path in glob.glob(os.path.join(folder, "*.log")):
        shutil.move(path, kept)


def run_job(experiment, mode, label, log_dir, hosts, restarts, final, port_retry=False):
    """One start of the mode's job: (its exit code, its JobFailed or None); a failure is reported when `final`,
    unless it is a port taken before its process bound it and `port_retry` allows another start."""
    # A fresh token per job: the state server answers its own workers only (a shared network's other users' not).
    token = {STATE_TOKEN_VARIABLE: secrets.token_urlsafe(24), JOB_SECRET_ENV: secrets.token_urlsafe(24)}
    with ProcessGroup(os.path.join(log_dir, PROCESSES_FOLDER), token) as group:
        print(f"[{label}] {describe_workers(experiment, mode)}, "
              f"{describe_aggregation(experiment, mode)}; logs in {log_dir}, process outputs and PIDs in {group.out_dir}",
              flush=True)
        meter = netns.LinkMeter(hosts.network) if hosts.network else None
        try:
            backend = experiment.backend
            state_server = (None if backend.state_server_in_job else
                            start_mode_state_server(group, hosts.placement.scheduler, mode))
            evaluator = start_evaluator(experiment, mode, group, label)
            start = start_virtual if backend.charges_time else start_tracker if experiment.tracker else start_processes
            finishers = start(experiment, mode, group, log_dir, state_server, hosts, label)
            progress = Progress(label, log_dir, experiment.progress_every,
                                experiment.snapshot_folder(mode) if evaluator else None, backend.charges_time)
            supervise(group, finishers, progress, experiment.wall_limit)
            print(progress.finished_line(), flush=True)
            if evaluator:
                finish_evaluation(evaluator, progress, experiment.wall_limit)
        except JobFailed as failure:
            if final and not (port_retry and port_taken(failure)):
                report_failure(label, failure, group)
            return EXIT_FAILURE, failure
        finally:
            if meter:
                meter.stop()
        record = {"links_described": experiment.describe_links(),
                  "devices_described": experiment.cluster.devices_described, "restarts": restarts}
        if meter:
            code = report_links(experiment, mode, label, meter, group.out_dir, record)
        else:
            write_json(os.path.join(group.out_dir, NETWORK_FILE), record)
            code = 0
        let_parameter_servers_exit(experiment, group, finishers)
    return code, None


def start_mode_state_server(group, host, mode):
    """(address, port) of the mode's state server, started on `host`; None in the modes without one."""
    if not modes.MODES[mode].state_server:
        return None
    port = start_state_server(group, host, after_start=lambda: write_pid_file(group, mode),
                              while_waiting=INTERRUPTS.check)
    return host.address, port


def start_evaluator(experiment, mode, group, label):
    """The evaluator process of the mode's snapshots, on this machine at the lowest CPU priority; None when the
    experiment has none (--snapshot-seconds 0, or a remote --tracker: then rank 0 starts it on its own host)."""
    if not experiment.evaluator_runs:
        if experiment.snapshot_seconds and experiment.tracker:
            print(f"[{label}] --tracker {experiment.tracker}: the snapshots stay on rank 0's host, so rank 0 starts "
                  f"the evaluator there (main.py --evaluator-beside); its log lands in rank 0's "
                  f"{experiment.mode_folder(mode)}", flush=True)
        return None
    proc = group.start_python("evaluator", commands.evaluator_argv(experiment, mode), threads.ONE_THREAD,
                              role="evaluator", command_prefix=EVALUATOR_PRIORITY)
    write_pid_file(group, mode)
    return proc


def finish_evaluation(evaluator, progress, timeout):
    """Wait for the evaluator to test the snapshots left once training ended; JobFailed if it fails or hangs."""
    deadline = time.monotonic() + timeout
    while evaluator.poll() is None:
        INTERRUPTS.check()
        if time.monotonic() > deadline:
            raise JobFailed(evaluator, f"had not evaluated every snapshot {timeout:g} s after training ended")
        progress.tick(progress.evaluation_line)
        time.sleep(POLL_SECONDS)
    if evaluator.poll() != 0:
        raise JobFailed(evaluator, f"exited with {describe_exit(evaluator.poll())}")


def start_processes(experiment, mode, group, log_dir, state_server, hosts, label):
    """Scheduler, servers and workers of one mode (or its workers under mpiexec); returns what ends with the
    workers: the workers, or mpiexec."""
    def record_and_check():
        write_pid_file(group, mode)
        INTERRUPTS.check()

    if not modes.MODES[mode].cluster:
        quota = hosts.quotas.get("standalone", ()) if mode != modes.HOGWILD else hogwild_groups(experiment, hosts)
        return [start_standalone(experiment, mode, group, log_dir, hosts.placement.worker(0), record_and_check,
                                 quota)]
    workers_argv = commands.workers_argv(experiment, mode, log_dir, state_server)
    if collectives.uses_mpi(experiment.cluster.collective):
        job = mpi.start_job(group, workers_argv, hosts.placement, quotas=hosts.quotas)
        record_and_check()
        return [job]
    return start_ps_job(group, commands.ps_argv(experiment, mode), workers_argv, experiment.cluster.num_servers,
                        record_and_check, hosts.placement, worker_prefixes=hosts.quotas)


VIRTUAL_JOB_FILE = "virtual-job.json"


def start_virtual(experiment, mode, group, log_dir, state_server, hosts, label):
    """The mode's whole job on a virtual clock, in one process (training/clocks/job.py): the workers' command lines
    as they would be started, the devices' and links' model beside them in the processes folder."""
    argvs = (commands.workers_argv(experiment, mode, log_dir) if modes.MODES[mode].cluster
             else [commands.standalone_argv(experiment, mode, log_dir)])
    path = os.path.join(group.out_dir, VIRTUAL_JOB_FILE)
    write_json(path, {"workers": [argv[1:] for argv in argvs], "seed": experiment.seed,
                      **experiment.charges.job_file(), **experiment.cluster.charged_links()}, indent=1)
    proc = group.start_python("virtual-job", ["-m", "training.clocks.job", path], threads.ONE_THREAD,
                              role="worker", host="localhost")
    write_pid_file(group, mode)
    return [proc]


def hogwild_groups(experiment, hosts):
    """The prefix that hands Hogwild!'s coordinator its workers' CPU quotas, one per rank; () without quotas."""
    if not hosts.quotas:
        return ()
    return workers.with_groups({rank: hosts.quotas[rank][1] for rank in range(experiment.num_workers)})


def start_standalone(experiment, mode, group, log_dir, host, after_start, quota=()):
    """The one process of a mode without a cluster; one compute thread, as each worker of the cluster modes; `quota`,
    the prefix that starts it under the fastest worker's CPU quota."""
    proc = group.start_python("standalone", commands.standalone_argv(experiment, mode, log_dir),
                              threads.ONE_THREAD, role="worker", command_prefix=[*quota, *host.command_prefix],
                              host=host.name)
    after_start()
    return proc


def start_tracker(experiment, mode, group, log_dir, state_server, hosts, label):
    """dmlc_tracker's submission, which starts the scheduler, servers and workers; returns it."""
    argv = commands.tracker_argv(experiment, mode, log_dir, state_server)
    print(f"[{label}] dmlc_tracker command: {shlex.join([sys.executable] + argv)}", flush=True)
    # A job on loopback alone (the local launcher's, or another's with --host-ip 127.0.0.1): every ps-lite node on
    # lo, where ps-lite would look for another interface.
    on_loopback = experiment.tracker == "local" or experiment.host_ip == LOOPBACK
    env = {"DMLC_NODE_HOST": experiment.host_ip, "DMLC_INTERFACE": "lo"} if on_loopback else {}
    tracker = group.start_python("tracker", argv, env, role="tracker")
    write_pid_file(group, mode)
    return [tracker]


def clear_earlier_run(mode_dir, summary_name, processes=True):
    """A mode folder holds one run: an earlier run's iteration logs would mix into this run's summary. Without
    `processes`, the process outputs stay (a job started again from its start keeps its failed attempt's)."""
    patterns = ["*/*/iter-*.txt", "*/*/meta.json", "*/*/model-final.params", summary_name, EVALUATOR_LOG]
    stale = [path for pattern in patterns for path in glob.glob(os.path.join(mode_dir, pattern))]
    folders = [SNAPSHOT_FOLDER, runlog.CHECKPOINTS_FOLDER]
    if processes:
        stale += [path for path in glob.glob(os.path.join(mode_dir, PROCESSES_FOLDER, "*")) if os.path.isfile(path)]
        folders += glob.glob(os.path.join(mode_dir, PROCESSES_FOLDER, "attempt-*"))
    for path in stale:
        os.unlink(path)
    for folder in (os.path.join(mode_dir, name) for name in folders):
        if os.path.isdir(folder):
            stale.append(folder)
            shutil.rmtree(folder)
    for folder in glob.glob(os.path.join(mode_dir, "*", "*")) + glob.glob(os.path.join(mode_dir, "*")):
        if os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)
    if stale:
        log.info("removed %d files of an earlier run from %s", len(stale), mode_dir)


def describe_aggregation(experiment, mode):
    if not modes.MODES[mode].cluster:
        return "no cluster"
    if collectives.uses_mpi(experiment.cluster.collective):
        return f"no servers: MPI's {experiment.cluster.collective} allreduce"
    return f"{experiment.cluster.num_servers} server(s)"


def describe_workers(experiment, mode):
    if not modes.MODES[mode].cluster:
        return f"1 worker ({describe_device(experiment, experiment.cluster.fastest_worker)})"
    described = ", ".join(describe_device(experiment, w) for w in range(experiment.num_workers))
    return f"{experiment.num_workers} workers ({described})"


def describe_device(experiment, index):
    device, factor = experiment.cluster.devices[index], experiment.cluster.slowdowns[index]
    return device if float(factor) == 1 else f"{device} x{factor}"


def report_links(experiment, mode, label, meter, out_dir, record):
    """The bytes each link carried during the mode, into processes/network.json with `record` and one line (the parameter
    servers' links, or over MPI the workers'); 0, or EXIT_FAILURE after one line when a cluster mode's worker link
    carried no traffic or a link carried more than its rate: then the run did not measure the links it names."""
    report = {**meter.report(), "links_described": experiment.describe_links(),
              "devices_described": experiment.cluster.devices_described, "regime": experiment.cluster.regime, **record}
    problems = netns.link_problems(report, worker_links=modes.MODES[mode].cluster)
    report["problems"] = problems
    write_json(os.path.join(out_dir, NETWORK_FILE), report)
    over_mpi = collectives.uses_mpi(experiment.cluster.collective)
    kind, prefix = ("worker", "w") if over_mpi else ("parameter-server", "ps")
    names = [name for name in report["links"] if name.startswith(prefix)]
    print(f"[{label}] {kind} links over {report['seconds']:.1f} s: {netns.describe_links(report, names)}",
          flush=True)
    if problems:
        print(f"launch.py: {label}: the links do not show the run they name: {'; '.join(problems)} "
              f"(see {os.path.join(out_dir, NETWORK_FILE)})", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def let_parameter_servers_exit(experiment, group, finishers):
    """Scheduler and servers exit by themselves once the workers are done; what is left is stopped."""
    if experiment.tracker:
        drained = wait_for_group_to_drain(finishers[0].pid, PS_EXIT_GRACE)
    else:
        drained = group.wait([p for p in group.procs if p.role in ("scheduler", "server")], PS_EXIT_GRACE)
    if not drained:
        log.warning("scheduler or servers still ran %g s after the workers; stopping them", PS_EXIT_GRACE)
