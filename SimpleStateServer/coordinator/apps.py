from django.apps import AppConfig


class CoordinatorConfig(AppConfig):
    name = "coordinator"
    verbose_name = "ESync worker coordination"
