import logging

from django.http import JsonResponse

logger = logging.getLogger(__name__)

_COMPACT = {"separators": (",", ":")}


def json_response(payload, status=200):
    response = JsonResponse(payload, status=status, json_dumps_params=_COMPACT)
    # The development server closes the connection after any answer without a length,
    # which would cost the workers a new TCP connection per minibatch.
    response["Content-Length"] = str(len(response.content))
    return response


def error_response(request, status, message, **details):
    logger.warning("%s %s %s -> %d: %s", request.method, request.path,
                   _client(request), status, message)
    return json_response({"error": message, **details}, status=status)


def _client(request):
    return request.META.get("REMOTE_ADDR", "?")
