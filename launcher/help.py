"""What the launcher's --help says after its options: devices, trackers, hosts, the clock, accuracy, exit codes."""
from launcher import workers
from launcher.dmlc import TASK_INDEX_VARIABLES, TRACKERS_WITH_TASK_INDEX
from training import runlog

EPILOG = f"""
devices: one --devices entry per worker: cpu (-c 1), cpuN (N CPU contexts, -c N), gpuK (-g K), gpu0+gpu1
  (one worker splitting each batch over GPUs 0 and 1, -g 0,1). Without --devices, one cpu worker per --slowdown
  factor.

--tracker LAUNCHER: instead of starting the processes itself, the launcher runs MXNet's dmlc_tracker (the copy
  shipped with mxnet 1.9.1) as `python launch.py submit DMLC-OPTIONS -- COMMAND`, printed before it starts, with
  fixes for Python 3.11 (Thread.isAlive), for the local launcher ignoring --host-ip, and a free scheduler port.
  The tracker starts the same COMMAND for every task: `python launch.py task --devices D --slowdown F -- ARGS`.
  For a worker it picks entry i of --devices and --slowdown, where i is the worker's task index from
  {', '.join(TASK_INDEX_VARIABLES)} (set by the {', '.join(TRACKERS_WITH_TASK_INDEX)} launchers, workers
  numbered 0..N-1), then runs main.py with that device; for the scheduler and servers it runs main.py alone.
  The ssh and kubernetes launchers give no task index, so they need identical --devices entries (and one
  --slowdown); the shipped sge launcher cannot start a ps-lite job and is refused. The task index is the
  worker's position (--worker-index), which its meta.json records with its device, slowdown and rank.
  Remote hosts need this repository and the data at the same paths, and --host-ip must be an address of this
  machine they can reach (it runs the scheduler and, for the modes that use one, the state server). All output of
  the job goes to processes/tracker.log; progress and summaries read the logs that land on this machine.

--hosts netns: every host of the job is a Linux network namespace of its own (root only), joined to the
  others by a bridge through a veth link shaped with tc tbf to --bandwidth (workers) and --ps-bandwidth (the
  parameter-server hosts) in each direction: host `ps` runs the scheduler, the state server and server 0, `psN`
  server N, `wK` worker K. Processes run under `ip netns exec` with the addresses of their hosts. Each mode's
  {runlog.PROCESSES_FOLDER}/{runlog.NETWORK_FILE} holds the bytes each link carried; a mode whose workers' links carried no
  traffic, or more than their rate, fails. --comm-ratio R states the links as a regime instead of a rate: before
  the first mode the launcher times the fastest worker's step alone and reads the model's size, and sets every
  worker link (and the servers', unless --ps-bandwidth) to the rate at which one transfer of the model lasts R
  steps. The namespaces are removed at the end, also on failure and Ctrl-C; after a killed launcher,
  `python launch.py clean-netns` removes what it left.

devices: a worker is a device of fixed capacity, a cgroup of its own whose CPU quota is --device-share cores divided
  by its --slowdown (default share: what fits the cores with {workers.RESERVED_CORES:g} to spare for the scheduler, the
  servers, the state server and the evaluator, at most 1; printed), as a shaped link has a rate; the standalone
  baseline runs on a fast device's quota. Where no quota can be given (not root, no cgroup CPU controller), where
  no quota reaches the workers (--tracker starts them) or with --sleeping-slowdown, a slow worker sleeps after each
  step instead, and the launcher says so. The MPI ranks of --collective and Hogwild!'s processes take their
  workers' quotas too.

accuracy: no worker evaluates inside its training loop. Every --snapshot-seconds of training time, and when
  training stops, worker 0 copies the model (ESync's after an aggregation, an asynchronous scheme's as it holds it)
  and a thread writes the copy to <mode>/{runlog.SNAPSHOT_FOLDER}/; the evaluator process, started with each mode at the
  lowest CPU priority, tests every snapshot on the whole test set and logs it with the training time it was taken
  at (<mode>/evaluator.jsonl). The table, the summaries and the figures take their accuracy from that log.
  --snapshot-seconds 0 tests the final model only, in rank 0 after training (throughput runs). With a remote
  --tracker the snapshots land on rank 0's host: rank 0 starts the evaluator there itself (main.py
  --evaluator-beside), and the launcher says so.

--clock virtual: a mode's whole job runs in one process, its workers one at a time in the order of their virtual
  times, each step charged --step-seconds x its device's --slowdown (x a log-normal jitter with --step-jitter) and
  each sum over the links charged as --comm-ratio R says (free without it); rank 0 evaluates in its loop every
  --snapshot-seconds of virtual time, at no virtual cost. The same command gives the same logs whatever else the
  machine runs. The state server's rules and the kvstore's servers answer in-process; backup, esync's nonblocking
  policy and hogwild are refused, each in one line. regimes, paper and tune take --clock virtual too, and --jobs N
  to run N of their runs at once (docs/virtual-clock.md).

exit codes: 0 done, 1 a process failed or the wall limit was reached, 2 bad input, 130 interrupted.
"""
