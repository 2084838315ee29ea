"""HTTP endpoints of the state server (ESync and NBSSGD). Every answer is compact JSON."""

import functools
import json
import logging

from django.core.exceptions import SuspiciousOperation
from django.http.multipartparser import MultiPartParserError

from coordinator.fields import (
    float_field, integer_field, optional_float_field, optional_integer_field, optional_text_field)
from coordinator.responses import error_response, json_response
from coordinator.state import Coordinator, FieldError, NotInitialised, Settings

logger = logging.getLogger(__name__)

COORDINATOR = Coordinator()


def endpoint(method):
    """Turns `view(data) -> dict` into a Django view: checks the method, reads the form or
    JSON body, and maps field problems to 400 and a missing job to 409."""

    def decorate(view):
        @functools.wraps(view)
        def django_view(request):
            if request.method != method:
                response = error_response(request, 405, f"{request.path} accepts {method} only")
                response["Allow"] = method
                return response
            try:
                return json_response(view(_request_data(request)))
            except FieldError as error:
                return error_response(request, 400, str(error), field=error.field_name)
            except NotInitialised as error:
                return error_response(request, 409, str(error))

        return django_view

    return decorate


def _request_data(request):
    if request.method != "POST":
        return {}
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


@endpoint("POST")
def init(data):
    num_workers = integer_field(data, "num_workers", minimum=1)
    epsilon = optional_float_field(data, "epsilon", minimum=0.0)
    policy = optional_text_field(data, "policy", default="apply")
    resumed = _switch_field(data, "resumed")
    defaults = Settings()
    share = optional_float_field(data, "share", minimum=0.0)
    settings = Settings(share=defaults.share if share is None else share,
                        max_slowest_steps=optional_integer_field(data, "max_slowest_steps",
                                                                 default=defaults.max_slowest_steps, minimum=1),
                        overlap=_switch_field(data, "overlap"),
                        accept=optional_integer_field(data, "accept", default=None, minimum=1))
    job_settings = COORDINATOR.init(num_workers, epsilon, policy, resumed=resumed, settings=settings)
    margin_text = "auto (0.1 x slowest step)" if epsilon is None else f"{epsilon} s"
    sizing = (f", rounds sized so that the {'overlapped ' if settings.overlap else ''}aggregation idles at most "
              f"{settings.share:g} of each, the slowest running at most {settings.max_slowest_steps} steps"
              if policy == "adaptive" else
              f", each step applying the first {settings.accept} gradients" if policy == "backup" else "")
    logger.info("%s job: %d workers, margin %s, policy %s%s", "resumed" if resumed else "new", num_workers,
                margin_text, policy, sizing)
    return {"ok": 1, **job_settings}


def _switch_field(data, name):
    value = optional_integer_field(data, name, default=0)
    if value not in (0, 1):
        raise FieldError(name, "must be 0 or 1")
    return bool(value)


@endpoint("POST")
def apply(data):
    rank = integer_field(data, "r")
    k = integer_field(data, "k")
    c = float_field(data, "c", minimum=0.0)
    te = float_field(data, "te")
    if c == 0 and k > 0:
        raise FieldError("c", "must be > 0 once steps were done (k > 0)")
    return {"ready": int(COORDINATOR.apply(rank, k, c, te))}


@endpoint("POST")
def reset(data):
    rank = integer_field(data, "r")
    t = integer_field(data, "t")
    te = float_field(data, "te")
    COORDINATOR.reset(rank, t, te)
    return {"ok": 1}


@endpoint("POST")
def plan(data):
    rank = integer_field(data, "r")
    c = float_field(data, "c", minimum=0.0)
    if c == 0:
        raise FieldError("c", "must be > 0")
    return COORDINATOR.plan(rank, c, optional_float_field(data, "a", minimum=0.0))


@endpoint("POST")
def arrive(data):
    rank = integer_field(data, "r")
    t = integer_field(data, "t")
    return COORDINATOR.arrive(rank, t)


@endpoint("POST")
def watch(data):
    rank = integer_field(data, "r")
    t = integer_field(data, "t")
    arrived = integer_field(data, "arrived")
    if arrived > 1:
        raise FieldError("arrived", "must be 0 or 1")
    wait = float_field(data, "wait", minimum=0.0)
    return COORDINATOR.watch(rank, t, bool(arrived), wait)


@endpoint("GET")
def state(data):
    return COORDINATOR.snapshot()


def not_found(request, exception=None):
    return error_response(request, 404, f"no endpoint at {request.path}")


def bad_request(request, exception=None):
    return error_response(request, 400, "bad request")


def forbidden(request, exception=None):
    return error_response(request, 403, "forbidden")


def server_error(request):
    return error_response(request, 500, "internal error")
