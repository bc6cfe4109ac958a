"""What a worker registers: our workflows, the activities of a configuration, the search attributes.

Below both ``runner`` (the processes ``mcp-tasks`` runs) and ``plugin`` (``McpTasksPlugin``, which ``runner``
builds its workers with), so the two share these without importing each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client

from mcp_temporal_tasks.activities.mcp_activities import McpActivities
from mcp_temporal_tasks.activities.push import PushHub
from mcp_temporal_tasks.activities.result_store import ResultStore
from mcp_temporal_tasks.activities.wire import PROCESS_ID, Endpoint, SessionPool
from mcp_temporal_tasks.worker.config import ConfigError, WorkerConfig
from mcp_temporal_tasks.workflows.mcp_task import McpTaskWorkflow
from mcp_temporal_tasks.workflows.records import SEARCH_ATTRIBUTE_NAMES

WORKFLOWS = [McpTaskWorkflow]


async def ensure_search_attributes(client: Client, namespace: str) -> list[str]:
    """Register our Keyword search attributes where the namespace lacks them; returns those added."""
    existing = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    known = set(existing.custom_attributes) | set(existing.system_attributes)
    missing = [n for n in SEARCH_ATTRIBUTE_NAMES if n not in known]
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace, search_attributes={n: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for n in missing}
            )
        )
    return missing


def make_activities(
    cfg: WorkerConfig,
    *,
    inline_allowlist: Iterable[Endpoint] = (),
    live_sink: Callable[[str, dict[str, Any]], None] | None = None,
) -> McpActivities:
    """The activities of ``cfg``. ``inline_allowlist``: inline endpoints allowed whatever ``[worker]`` says
    (the CLI's in-process worker allows the one endpoint its user typed, nothing else). ``live_sink``: told at once
    what each call and wait reports (``mcp-tasks run``'s live view of the task its own worker runs)."""
    w = cfg.worker
    store = ResultStore(f"{w.state_dir}/results" if w.state_dir else None, inline_limit=w.inline_result_bytes)
    try:
        store.ensure_writable()
    except OSError as exc:
        raise ConfigError(
            f"worker.state_dir: the result store {store.root} is not writable "
            f"({type(exc).__name__}: {exc.strerror or exc}); set [worker] state_dir or "
            "MCP_TASKS_STATE_DIR to a writable directory"
        ) from None
    # Each set of activities owns its stdio children and has a queue of its own: two plugins in one process
    # (two clients, say) must not take each other's stdio tasks.
    owner = f"{PROCESS_ID}-{uuid.uuid4().hex[:6]}"
    return McpActivities(
        servers=cfg.servers,
        pool=SessionPool(idle_s=w.idle_session_s, owner=owner),
        store=store,
        allow_inline_endpoints=w.allow_inline_endpoints,
        allow_inline_commands=w.allow_inline_commands,
        allow_inline_credentials=w.allow_inline_credentials,
        inline_allowlist=inline_allowlist,
        owner_queue=owner,
        live_sink=live_sink,
        push=PushHub(
            enabled=w.push_notifications,
            stretch=w.push_stretch,
            list_reads=w.push_list_reads,
            task_reads=w.push_task_reads,
            net_stretch=w.push_net_stretch,
        ),
    )
