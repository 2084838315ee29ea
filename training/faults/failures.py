"""How a process of a job ends when something in it raises: one line naming what failed, then exit at once.

A process that has joined a ps-lite job must not unwind normally after an error: the kvstore's destructor waits at
a barrier for every other node, and on rank 0 that barrier can also release the other workers' pulls before the
servers were initialised. So a failing process writes its one line (and its traceback to a file, when it can),
and leaves with os._exit; its peers notice the closed connections and end within --sync-timeout (training/faults/peers.py,
training/faults/watchdog.py).
"""
import logging
import os
import signal
import sys
import tempfile
import threading
import traceback

log = logging.getLogger("failure")

class JobSetupError(RuntimeError):
    """The processes of a job do not fit together (found once they have joined the cluster)."""


EXIT_FAILURE = 1
EXIT_USAGE = 2          # bad input, reported in one line before anything starts
EXIT_INTERRUPTED = 130
# This file is training/faults/failures.py: three folders up is the repository.
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# a fault's place is its caller, not the injector
INJECTION_MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_injection.py")


def one_line(err):
    """`Type: message (file:line in function)`, the message cut to its meaningful line."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    # MXNet's messages start with its C++ traceback and end with the check that failed.
    message = lines[-1] if lines else ""
    kind = type(err).__name__
    if message.startswith(kind + ": "):
        message = message[len(kind) + 2:]
    where = _innermost_project_frame(err.__traceback__)
    return f"{kind}: {message}" + (f" ({where})" if where else "")


def _innermost_project_frame(tb):
    frames = [frame for frame in traceback.extract_tb(tb)
              if frame.filename.startswith(PROJECT_ROOT) and frame.filename != INJECTION_MODULE
              and not _installed(frame.filename)]
    if not frames:
        return ""
    frame = frames[-1]
    return f"{os.path.relpath(frame.filename, PROJECT_ROOT)}:{frame.lineno} in {frame.name}"


def _installed(path):
    """A library's file, though under the project's folder: the README's environment is .venv in the clone."""
    return path.startswith(os.path.join(sys.prefix, "")) or f"{os.sep}site-packages{os.sep}" in path


def save_traceback(err, folder, role):
    """The whole traceback in <folder>/traceback-<role>-<pid>.txt (the system's temporary folder when `folder` does
    not exist: a scheduler or server has no log folder of its own); None when it cannot be written."""
    if not os.path.isdir(folder):
        folder = tempfile.gettempdir()
    path = os.path.join(folder, f"traceback-{role.split()[0]}-{os.getpid()}.txt")
    try:
        with open(path, "w") as f:
            f.write("".join(traceback.format_exception(err)))
    except OSError:
        return None
    return path


def report(err, role, traceback_folder=None, expected=()):
    """Log the one line of a failure. `expected` errors carry a message meant for the user and no location."""
    if isinstance(err, expected):
        log.error("%s failed: %s", role, err)
        return
    path = save_traceback(err, traceback_folder, role) if traceback_folder else None
    log.error("%s failed: %s%s", role, one_line(err), f" (traceback in {path})" if path else "")


INTERRUPT_GRACE = 1.0  # seconds an interrupted cluster process's KeyboardInterrupt has to end it


def end_on_interrupts(logger):
    """A cluster process ends on an interrupt even where Python drops it or cannot run its handler. Python runs a
    signal's handler in the main thread between two bytecodes: a KeyboardInterrupt raised while a destructor runs
    (MXNet's arrays free themselves in one) is printed and swallowed, and a main thread blocked in a C call (an MPI
    receive from a rank that is gone, a kvstore pull) never gets to the handler at all; the rank would go on, its
    peers' aggregation waiting for it. So the signals also reach a thread of their own through Python's wakeup file
    descriptor: on SIGINT, the main thread gets its KeyboardInterrupt as usual, and if the process still runs
    INTERRUPT_GRACE s later it logs "interrupted" and ends with exit 130; SIGQUIT, which mpiexec.gforker sends a rank
    its SIGINT has not ended, does so at once."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGQUIT, lambda signum, frame: None)  # ended by the watching thread
    threading.Thread(target=_watch_interrupts, args=(read_end, logger), name="interrupts", daemon=True).start()


def _watch_interrupts(read_end, logger):
    fallback = threading.Timer(INTERRUPT_GRACE, end_interrupted, args=(logger,))
    fallback.daemon = True
    while True:
        for signum in os.read(read_end, 64):
            if signum == signal.SIGQUIT:
                end_interrupted(logger)
            elif signum == signal.SIGINT and not fallback.is_alive():
                fallback.start()


_ending = threading.Lock()


def end_interrupted(logger):
    """Says "interrupted" once and ends, whichever of the main thread's KeyboardInterrupt and the watching thread's
    signal gets here first (a SIGINT and mpiexec's SIGQUIT after it can reach both); the later one waits for the
    exit."""
    if not _ending.acquire(blocking=False):
        threading.Event().wait()
    logger.warning("interrupted")
    end_now(EXIT_INTERRUPTED)


_before_ending = []
ENDING_WAIT = 5.0  # seconds each callback of before_ending() may take


def before_ending(callback):
    """Have end_now() call `callback(seconds)` before the process leaves: what must still reach disk (round logs
    queued for their writer's thread). The callback gets at most that many seconds; it returns a function that
    takes it off again."""
    _before_ending.append(callback)
    return lambda: _before_ending.remove(callback) if callback in _before_ending else None


def end_now(code):
    """Leave without unwinding: no destructor of MXNet's may wait at a barrier for peers that are gone."""
    for callback in list(_before_ending):
        try:
            callback(ENDING_WAIT)
        except Exception as err:  # leaving goes on: the one line says what could not be saved
            log.error("while ending: %s", one_line(err))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail_on_thread_errors(role, traceback_folder=None):
    """An exception that escapes any thread ends the process too (a dead helper thread would leave the main
    thread waiting for it)."""
    def hook(hook_args):
        if issubclass(hook_args.exc_type, SystemExit):
            return
        report(hook_args.exc_value, f"{role} (thread {hook_args.thread.name})", traceback_folder)
        end_now(EXIT_FAILURE)

    threading.excepthook = hook
