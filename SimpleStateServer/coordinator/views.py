"""HTTP endpoints of the state server (ESync and NBSSGD), each reading the fields coordination/protocol.py declares
for it. Every answer is compact JSON."""

import functools
import json
import logging

from django.core.exceptions import SuspiciousOperation
from django.http.multipartparser import MultiPartParserError

from coordination import protocol
from coordination.records import FieldError, Settings
from coordination.rules import RULES
from coordinator.fields import read
from coordinator.responses import error_response, json_response
from coordination.state import Coordinator, JobConflict, JobForbidden, NotInitialised, ServerFull

logger = logging.getLogger(__name__)

COORDINATOR = Coordinator()


def endpoint(declared):
    """Turns `view(fields) -> dict` into a Django view of the protocol's endpoint `declared`: checks the method,
    reads the form or JSON body into the declared fields, and maps field problems to 400, a missing job to 409, a
    request without its job's secret (the X-ESync-Job-Secret header its first /init/ carried) to 403 and a new job
    where every kept job is live to 503."""
    method = declared.method

    def decorate(view):
        @functools.wraps(view)
        def django_view(request):
            if request.method != method:
                response = error_response(request, 405, f"{request.path} accepts {method} only")
                response["Allow"] = method
                return response
            try:
                fields = read(declared, _request_data(request))
                secret = request.headers.get(protocol.JOB_SECRET_HEADER)
                if declared is protocol.INIT:
                    return json_response(view(fields, secret))
                COORDINATOR.admit(fields.get("job"), secret)
                return json_response(view(fields))
            except JobForbidden as error:
                return error_response(request, 403, str(error))
            except ServerFull as error:
                return error_response(request, 503, str(error))
            except FieldError as error:
                return error_response(request, 400, str(error), field=error.field_name)
            except NotInitialised as error:
                return error_response(request, 409, str(error))
            except JobConflict as error:  # not to be answered by setting a job up again
                return error_response(request, 409, str(error), conflict=1)

        return django_view

    return decorate


def _request_data(request):
    if request.method != "POST":
        return request.GET
    try:
        if request.content_type == "application/json":
            return _json_object(request.body)
        return request.POST
    # Too large, too many fields, or a broken multipart body.
    except (SuspiciousOperation, MultiPartParserError) as error:
        raise FieldError("body", f"was rejected: {error}") from None


def _json_object(body):
    try:
        data = json.loads(body)
    except ValueError:
        raise FieldError("body", "is not valid JSON") from None
    if not isinstance(data, dict):
        raise FieldError("body", "must be a JSON object")
    return data


@endpoint(protocol.INIT)
def init(fields, secret=None):
    num_workers, epsilon, policy = fields["num_workers"], fields["epsilon"], fields["policy"] or "apply"
    defaults = Settings()
    settings = Settings(share=defaults.share if fields["share"] is None else fields["share"],
                        max_slowest_steps=fields["max_slowest_steps"] or defaults.max_slowest_steps,
                        overlap=fields["overlap"], accept=fields["accept"])
    job_settings = COORDINATOR.init(num_workers, epsilon, policy, resumed=fields["resumed"], settings=settings,
                                    job=fields["job"], secret=secret, liveness=fields["liveness"])
    margin_text = "auto (0.1 x slowest step)" if epsilon is None else f"{epsilon} s"
    sizing = RULES[policy].sizing(settings)  # the policy was checked by init()
    logger.info("%s job %s: %d workers, margin %s, policy %s%s", "resumed" if fields["resumed"] else "new",
                job_settings["job"], num_workers, margin_text, policy, sizing)
    return {"ok": 1, **job_settings}


@endpoint(protocol.APPLY)
def apply(fields):
    if fields["c"] == 0 and fields["k"] > 0:
        raise FieldError("c", "must be > 0 once steps were done (k > 0)")
    return {"ready": int(COORDINATOR.apply(fields["r"], fields["k"], fields["c"], fields["te"], fields["job"]))}


@endpoint(protocol.RESET)
def reset(fields):
    COORDINATOR.reset(fields["r"], fields["t"], fields["te"], fields["job"])
    return {"ok": 1}


@endpoint(protocol.PLAN)
def plan(fields):
    if fields["c"] == 0:
        raise FieldError("c", "must be > 0")
    return COORDINATOR.plan(fields["r"], fields["c"], fields["a"], fields["job"])


@endpoint(protocol.ARRIVE)
def arrive(fields):
    return COORDINATOR.arrive(fields["r"], fields["t"], fields["job"])


@endpoint(protocol.WATCH)
def watch(fields):
    return COORDINATOR.watch(fields["r"], fields["t"], fields["arrived"], fields["wait"], fields["job"])


@endpoint(protocol.STATE)
def state(fields):
    return COORDINATOR.snapshot(fields["job"])


# The views of the protocol's endpoints, by endpoint (coordinator/urls.py serves each at its path).
VIEWS = {protocol.STATE: state, protocol.INIT: init, protocol.APPLY: apply, protocol.RESET: reset,
         protocol.PLAN: plan, protocol.ARRIVE: arrive, protocol.WATCH: watch}


def not_found(request, exception=None):
    return error_response(request, 404, f"no endpoint at {request.path}")


def bad_request(request, exception=None):
    return error_response(request, 400, "bad request")


def forbidden(request, exception=None):
    return error_response(request, 403, "forbidden")


def server_error(request):
    return error_response(request, 500, "internal error")
