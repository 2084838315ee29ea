"""Client of the state server (SimpleStateServer/) that coordinates ESync and NBSSGD rounds.

A worker calls `apply` after every local step, so each call reuses one keep-alive
connection (Nagle off) and sends a short form body. The standard library's http.client
does the HTTP: a round trip costs the worker about 0.15 ms of CPU, a quarter of what a
requests.Session spends on the same call. Connection failures and 5xx answers are retried
with bounded exponential backoff for up to `retry_for` seconds, long enough to ride out
a server restart; a 4xx answer is a bug in the caller and raises at once.

    client = StateClient("10.0.0.1", 10010)
    client.init(num_workers=4)              # once per job, from one process
    while not client.apply(rank, k, c, te):  # after each local step
        ...
    client.reset(rank, t, te)               # after the aggregation
"""

import http.client
import json
import logging
import os
import select
import socket
import time
from urllib.parse import urlencode

from coordination import protocol
from coordination.protocol import JOB_ENV, StateServerError, StateServerUnavailable

logger = logging.getLogger(__name__)

TOKEN_ENV = "ESYNC_STATE_TOKEN"
JOB_SECRET_ENV = "ESYNC_JOB_SECRET"  # that job's own secret: its first /init/ fixes it, its other requests carry it
TOKEN_HEADER = "X-ESync-Token"
FIRST_RETRY_DELAY = 0.05
MAX_RETRY_DELAY = 2.0
NOT_INITIALISED = 409
FORM = "application/x-www-form-urlencoded"
NO_JOB = "it has no job (restarted?)"
CUT_SHORT = "an answer cut short (the server stopped while answering?)"
_TEXT_ECHO_LIMIT = 200


class StateClient:
    def __init__(self, host, port, token=None, timeout=10.0, retry_for=300.0, on_not_initialised=None, job=None):
        """`job`: the id of the job every request is of (default $ESYNC_JOB_ID, else the server's default job).
        `on_not_initialised`:
        without it a 409 (no job) raises StateServerError. With it, a 409 is retried like an unavailable server,
        calling the hook before each retry: a restarted server lost its job, and the hook sets it up again
        (init_again_if_lost). A 409 that is a conflict (a rank the job does not have) always raises."""
        self.address = _address(host, port)
        self.host, self.port = host.strip("[]"), port
        self.timeout = timeout
        self.retry_for = retry_for
        self.on_not_initialised = on_not_initialised
        self.job = job if job is not None else os.environ.get(JOB_ENV) or None
        self._connection = None
        self._headers = {"Accept": "application/json"}
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        if token:
            self._headers[TOKEN_HEADER] = token
        if os.environ.get(JOB_SECRET_ENV):
            self._headers[protocol.JOB_SECRET_HEADER] = os.environ[JOB_SECRET_ENV]

    def init(self, num_workers, epsilon=None, policy="apply", resumed=False, **sizing):
        """Sets up a job; `resumed`: the running job, set up again after the server restarted and lost it.
        `sizing`: the adaptive policy's share, max_slowest_steps and overlap (the server's defaults where absent)."""
        return self._send(protocol.INIT, num_workers=num_workers, policy=policy, epsilon=epsilon,
                          resumed=resumed or None, **sizing)

    def init_again_if_lost(self, num_workers, epsilon=None, policy="apply", **sizing):
        """After a restart the server has no job: send /init/ again unless another worker already has (a second
        /init/ would wipe what the workers reported since). True when this call sent it."""
        if self.state().get("num_workers") is not None:
            return False
        logger.warning("the state server at %s lost the job (restarted?): sending /init/ again", self.address)
        self.init(num_workers, epsilon, policy, resumed=True, **sizing)
        return True

    def apply(self, rank, k, c, te, retry_for=None):
        """Reports a finished local step; True when the worker should stop and aggregate."""
        answer = self._send(protocol.APPLY, retry_for, r=rank, k=k, c=c, te=te)
        return bool(answer["ready"])

    def reset(self, rank, t, te):
        """Starts the worker's next round after it reached global iteration t."""
        self._send(protocol.RESET, r=rank, t=t, te=te)

    def plan(self, rank, c):
        """Number of local steps to do this round (the one-request-per-round policy)."""
        return int(self.plan_round(rank, c)["k"])

    def plan_round(self, rank, c, a=None):
        """This round's plan: {"k": local steps, "slowest_steps", "aggregation" (the seconds the round is sized
        to), "reason"}; `a`: this worker's aggregation time (the adaptive policy)."""
        return self._send(protocol.PLAN, r=rank, c=c, a=a)

    def arrive(self, rank, t):
        """NBSSGD: at a mini-batch boundary of round t, ready to aggregate; the round's status."""
        return self._send(protocol.ARRIVE, r=rank, t=t)

    def watch(self, rank, t, arrived, wait, still_wanted=None):
        """NBSSGD: round t's status once it is finished (gathered, when `arrived`) or after `wait` s; None when
        `still_wanted()` turns false while the request is being retried (the worker has moved past round t, and a
        restarted server must not hear of that round again)."""
        return self._send(protocol.WATCH, still_wanted=still_wanted, r=rank, t=t, arrived=arrived, wait=wait)

    def state(self):
        return self._send(protocol.STATE)

    def wait_until_up(self, timeout):
        """Returns once the server answers at all; raises StateServerUnavailable after
        `timeout` seconds without an answer."""
        try:
            self._send(protocol.STATE, timeout)
        except StateServerError:
            pass  # any HTTP answer, even a refusal, means the server is up

    def close(self):
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _send(self, endpoint, retry_for=None, still_wanted=None, **values):
        """A request to a protocol endpoint (coordination/protocol.py) with these field values, of this client's
        job."""
        fields = protocol.request(endpoint, **values, job=self.job)
        if endpoint.method == "GET":
            path = endpoint.path + (f"?{urlencode(fields)}" if fields else "")
            return self._call("GET", path, None, retry_for, still_wanted)
        return self._call(endpoint.method, endpoint.path, fields, retry_for, still_wanted)

    def _call(self, method, path, fields=None, retry_for=None, still_wanted=None):
        retry_for = self.retry_for if retry_for is None else retry_for
        deadline = time.monotonic() + retry_for
        delay = FIRST_RETRY_DELAY
        attempts = 0
        while True:
            attempts += 1
            failure, answer = self._attempt(method, path, fields)
            if failure is None:
                if attempts > 1:
                    logger.info("state server at %s answers again", self.address)
                return answer
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StateServerUnavailable(
                    f"state server at {self.address} did not answer {method} {path} "
                    f"within {retry_for:g} s ({attempts} attempts): {failure}")
            if attempts == 1:
                logger.warning("state server at %s: %s; retrying for up to %.1f s",
                               self.address, failure, remaining)
            if failure == NO_JOB:
                self.on_not_initialised()
            time.sleep(min(delay, remaining))
            delay = min(2 * delay, MAX_RETRY_DELAY)
            if still_wanted is not None and not still_wanted():
                return None

    def _attempt(self, method, path, fields):
        """One request: (None, answer) on success, (reason, None) when worth retrying."""
        body = urlencode(fields) if fields else None
        headers = self._headers if body is None else {**self._headers, "Content-Type": FORM}
        try:
            connection = self._open_connection()
            connection.request(method, path, body, headers)
            response = connection.getresponse()
            content = response.read()
        except http.client.IncompleteRead:
            self.close()
            return CUT_SHORT, None
        except (OSError, http.client.HTTPException) as error:
            self.close()
            return f"{type(error).__name__}: {error}", None
        if response.will_close:
            self.close()
        if response.status >= 500:  # the server's message where it gave one (503: no room for a new job)
            answer = _json_or_none(response.getheader("Content-Type", ""), content)
            said = answer.get("error") if isinstance(answer, dict) else None
            return f"HTTP {response.status}" + (f": {said}" if said else ""), None
        if response.status < 400 and not content:
            return CUT_SHORT, None
        if response.status == NOT_INITIALISED and self.on_not_initialised is not None and b'"conflict"' not in content:
            return NO_JOB, None
        return None, _decode(response.status, response.getheader("Content-Type", ""), content,
                             self.address + path)

    def _open_connection(self):
        """The keep-alive connection, or a new one when there is none or the server has closed it."""
        if self._connection is not None and _closed_by_peer(self._connection.sock):
            self.close()
        if self._connection is None:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            connection.connect()
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._connection = connection
        return self._connection


def _closed_by_peer(sock):
    """An idle keep-alive socket that is readable has been closed (or reset) by the server. (poll, not select:
    a worker's MXNet and ZMQ sockets may push descriptor numbers past select's limit of 1024.)"""
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _address(host, port):
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    return f"http://{host}:{port}"


def _decode(status, content_type, content, url):
    payload = _json_or_none(content_type, content)
    if status >= 400:
        error = payload.get("error") if isinstance(payload, dict) else None
        raise StateServerError(status, error or _short_text(content), url)
    if not isinstance(payload, dict):
        raise StateServerError(status, f"expected a JSON object, got {_short_text(content)}", url)
    return payload


def _json_or_none(content_type, content):
    if "json" not in content_type:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return None


def _short_text(content):
    text = content.decode("utf-8", "replace").strip()
    return repr(text[:_TEXT_ECHO_LIMIT]) if text else "an empty body"
