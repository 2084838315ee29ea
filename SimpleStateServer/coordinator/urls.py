from django.urls import re_path

from coordinator import views

# The trailing slash is optional so that a client leaving it out is not redirected,
# which would turn its POST into a GET.
urlpatterns = [
    re_path(r"^$", views.state, name="state"),
    re_path(r"^init/?$", views.init, name="init"),
    re_path(r"^apply/?$", views.apply, name="apply"),
    re_path(r"^reset/?$", views.reset, name="reset"),
    re_path(r"^plan/?$", views.plan, name="plan"),
    re_path(r"^arrive/?$", views.arrive, name="arrive"),
    re_path(r"^watch/?$", views.watch, name="watch"),
    # Catches everything else so unknown paths get JSON even with DEBUG on.
    re_path(r"^", views.not_found, name="not-found"),
]
