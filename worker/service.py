"""``connect()`` for a service: Temporal's environment configuration, our data converter and the payload store it names.

What ``mcp_temporal_tasks.connect`` is. The store is the one every worker of these tasks writes to
(``[temporal.storage]`` of ``$MCP_TASKS_CONFIG``, or the ``MCP_TASKS_STORAGE_*`` variables; neither: the embedded
store under the state directory, the default of a worker on the same machine), so ``get_outcome`` reads a result of
any size with nothing more said. It lives in ``worker`` because the configuration and the drivers do;
``workflows.client`` holds the rest of what a service calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.converter import DataConverter

from mcp_temporal_tasks.worker.config import load_config
from mcp_temporal_tasks.worker.storage import settings_of, with_storage
from mcp_temporal_tasks.workflows.client import DEFAULT_ADDRESS

__all__ = ["connect", "service_storage"]


def service_storage(config: str | Path | None = None) -> Any:
    """The ``[temporal.storage]`` settings a service reads with: ``config`` (else ``$MCP_TASKS_CONFIG``) and the
    ``MCP_TASKS_STORAGE_*`` variables; only the ``[temporal]`` table (and ``[worker] state_dir``) are read, so the
    workers' credential variables need not be set here. Raises ``ConfigError`` naming a wrong key."""
    cfg = load_config(config, temporal_only=True)
    return settings_of(cfg.temporal.storage, cfg.worker.state_dir)


async def connect(target_host: str | None = None, *, config: str | Path | None = None, **kwargs: Any) -> Client:
    """``Client.connect`` as a service needs it: Temporal's environment configuration (``TEMPORAL_ADDRESS``,
    ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*``, ``TEMPORAL_PROFILE`` and temporal.toml
    profiles), the target defaulting to ``localhost:7233`` as in Temporal's samples, the pydantic data converter the
    workflow's payloads need, and the External Storage the workers write large payloads to (``config`` or
    ``$MCP_TASKS_CONFIG``'s ``[temporal.storage]``, the ``MCP_TASKS_STORAGE_*`` variables, else the embedded store of
    this machine). ``target_host`` and any ``Client.connect`` keyword (``namespace``, ``plugins``, ``data_converter``,
    ``tls``...) override what the environment says; a ``data_converter`` given without a store gets this one (its
    codec kept), and ``McpTasksPlugin`` in ``plugins`` brings its own."""
    from temporalio.envconfig import ClientConfig

    from mcp_temporal_tasks.worker.temporal_client import DATA_CONVERTER

    options: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    if target_host:
        options["target_host"] = target_host
    options.setdefault("target_host", DEFAULT_ADDRESS)
    if options.get("api_key") and "tls" not in options:
        options["tls"] = True  # Temporal Cloud: an API key always travels over TLS
    if not kwargs.get("plugins"):  # McpTasksPlugin sets the converter and its store (keeping a codec) when given
        given: DataConverter | None = kwargs.pop("data_converter", None)
        options["data_converter"] = with_storage(given or DATA_CONVERTER, service_storage(config))
    options.update(kwargs)
    return await Client.connect(options.pop("target_host"), **options)
