import hmac
import logging

from django.conf import settings
from django.core.exceptions import (
    BadRequest, DisallowedHost, PermissionDenied, SuspiciousOperation)
from django.http import Http404

from coordinator.responses import error_response, json_response

logger = logging.getLogger(__name__)

TOKEN_HEADER = "X-ESync-Token"


class AccessMiddleware:
    """Checks the Host header against ALLOWED_HOSTS and, when ESYNC_STATE_TOKEN is set,
    the shared token every worker sends. The token is the access control: ALLOWED_HOSTS
    defaults to '*' because workers reach the server by whatever cluster address it has."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            # Nothing else in this middleware stack reads the host, so check it here.
            request.get_host()
        except DisallowedHost as error:
            return error_response(request, 400, str(error))
        if not _token_matches(request):
            return error_response(request, 401, f"missing or wrong {TOKEN_HEADER} header")
        return self.get_response(request)


def _token_matches(request):
    expected = settings.ESYNC_STATE_TOKEN
    if not expected:
        return True
    given = request.headers.get(TOKEN_HEADER, "")
    return hmac.compare_digest(given.encode(), expected.encode())


class SafetyNetMiddleware:
    """Last resort: an exception escaping a view becomes a logged JSON 500 instead of an
    HTML page. The views are written so that no request input gets here."""

    _HANDLED_BY_DJANGO = (Http404, PermissionDenied, SuspiciousOperation, BadRequest)

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, self._HANDLED_BY_DJANGO):
            return None
        logger.exception("unexpected error in %s %s", request.method, request.path)
        return json_response({"error": "internal error"}, status=500)
