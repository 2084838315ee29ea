from django.urls import include, path

urlpatterns = [
    path("", include("coordinator.urls")),
]

handler400 = "coordinator.views.bad_request"
handler403 = "coordinator.views.forbidden"
handler404 = "coordinator.views.not_found"
handler500 = "coordinator.views.server_error"
