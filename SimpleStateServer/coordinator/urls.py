from django.urls import re_path

from coordinator import views

# Every endpoint of the protocol (coordination/protocol.py) at its path. The trailing slash is optional so that a
# client leaving it out is not redirected, which would turn its POST into a GET.
urlpatterns = [
    re_path(rf"^{endpoint.path.strip('/')}{'/?' if endpoint.path != '/' else ''}$", view,
            name=endpoint.path.strip("/") or "state")
    for endpoint, view in views.VIEWS.items()
] + [
    # Catches everything else so unknown paths get JSON even with DEBUG on.
    re_path(r"^", views.not_found, name="not-found"),
]
