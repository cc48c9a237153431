from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "GPU nodes and agents"

    def ready(self) -> None:
        checks.register(_fence_fits, checks.Tags.compatibility)


def _fence_fits(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """The worker fence must end every copy before NODE_LOST_TIMEOUT (agents.fencing)."""
    from agents.fencing import fence_timing

    try:
        fence_timing()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="agents.E001")]
    return []
