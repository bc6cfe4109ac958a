"""``McpTasksPlugin``: MCP tasks on the workers a Temporal application already runs; the sandbox's pass-through list.

Given to ``Client.connect`` it sets the pydantic payload converter our models need (keeping a codec, and a converter
that already handles pydantic models) and every worker on that client inherits the rest; given to
``Worker(..., plugins=[plugin])`` it needs a client that already has that converter, and says so if it does not.
What it does on each worker: docs/temporal-apps.md. ``mcp-tasks worker`` is a thin user of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client, ClientConfig
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from temporalio.converter import DataConverter, DefaultFailureConverter, DefaultPayloadConverter
from temporalio.plugin import SimplePlugin
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from mcp_temporal_tasks.activities.activity_io import ServerConfig
from mcp_temporal_tasks.activities.mcp_activities import McpActivities
from mcp_temporal_tasks.worker.config import ConfigError, StorageSettings, WorkerSettings, load_config, server_config
from mcp_temporal_tasks.worker.config import WorkerConfig as McpWorkerConfig
from mcp_temporal_tasks.worker.registry import WORKFLOWS, ensure_search_attributes, make_activities
from mcp_temporal_tasks.worker.storage import aclose_storage, prepare, settings_of, with_storage
from mcp_temporal_tasks.worker.temporal_client import run_trace_parent, tracing_interceptor  # noqa: F401  (re-exported)
from mcp_temporal_tasks.workflows.records import SEARCH_ATTRIBUTE_NAMES
from mcp_temporal_tasks.workflows.task_error import McpTaskFailureConverter

log = logging.getLogger("mcp_tasks.plugin")


def is_tracing(interceptor: Any) -> bool:
    return any(c.__name__ == "TracingInterceptor" for c in type(interceptor).__mro__)


#: What workflow code imports of ours, passed through the sandbox (loaded once, from the worker, not re-run for every
#: workflow): the workflows, the activity stubs and names (``activities/defs.py``), the models they are built from
#: (``activities/activity_io.py`` and the I/O-free ``protocol`` package), and the agent adapters users' workflows
#: import. Not the activity implementation, no module of the wire (``activities.wire``), nor anything else of a
#: worker: a user's workflow importing one of those gets the sandbox's own copy (and its restrictions), as for any
#: module. Not ``fastmcp`` either: where it is loaded it patches camelCase read properties onto the mcp types whose
#: getter imports fastmcp; the one reader of ours that workflow code drives (google-genai, on what
#: ``McpTasksClientSession`` returns) reads through properties of our own (``google_genai.py``).
#: ``tests/test_sandbox_imports.py`` lists what a workflow run loads in the sandbox.
PASSTHROUGH = (
    "mcp_temporal_tasks.workflows",
    "mcp_temporal_tasks.protocol",
    "mcp_temporal_tasks.activities.defs",
    "mcp_temporal_tasks.activities.activity_io",
    "mcp_temporal_tasks.activities.relay",
    "mcp_temporal_tasks._agent_tools",
    "mcp_temporal_tasks.pydantic_ai",
    "mcp_temporal_tasks.openai_agents",
    "mcp_temporal_tasks.google_adk",
    "mcp_temporal_tasks.google_genai",
)


def handles_pydantic(converter: DataConverter) -> bool:
    """Whether ``converter`` already encodes pydantic models as JSON: the pydantic payload converter or a subclass
    (Pydantic AI's ``PydanticAIPayloadConverter``), or a composite whose JSON converter is the pydantic one
    (``temporalio.openai_agents.OpenAIPayloadConverter``)."""
    if issubclass(converter.payload_converter_class, PydanticPayloadConverter):
        return True
    try:
        payload_converter = converter.payload_converter_class()
    except Exception:  # noqa: BLE001  (a converter that needs arguments: not one we can inspect)
        return False
    converters = getattr(payload_converter, "converters", None)
    return isinstance(converters, Mapping) and any(
        isinstance(c, PydanticJSONPlainPayloadConverter) for c in converters.values()
    )


def with_pydantic(converter: DataConverter | None) -> DataConverter:
    """``converter`` with a payload converter that handles pydantic models: kept when it already does (another
    framework's, e.g. OpenAI Agents' or Pydantic AI's), else the pydantic one; its codec is kept, and so is its
    failure converter unless it is the default one, which becomes :class:`McpTaskFailureConverter`."""
    base = converter or DataConverter.default
    changes: dict[str, Any] = {}
    if not handles_pydantic(base):
        changes["payload_converter_class"] = PydanticPayloadConverter
    if base.failure_converter_class is DefaultFailureConverter:
        # A task's outcome failure then carries no Python stack trace (the UI's Result pane shows the outcome).
        changes["failure_converter_class"] = McpTaskFailureConverter
    return dataclasses.replace(base, **changes) if changes else base


def _is_openai_agents_plugin(plugin: object) -> bool:
    kind = type(plugin)
    return kind.__name__ == "OpenAIAgentsPlugin" and kind.__module__.startswith("temporalio.openai_agents")


def _sandbox(runner: WorkflowRunner | None) -> WorkflowRunner:
    if isinstance(runner, SandboxedWorkflowRunner):
        return dataclasses.replace(runner, restrictions=runner.restrictions.with_passthrough_modules(*PASSTHROUGH))
    if runner is None:
        raise ValueError("McpTasksPlugin needs a workflow runner to configure")
    return runner


@dataclasses.dataclass
class _Owner:
    """The owner-queue worker of one connection, and how many of the plugin's workers there use it."""

    worker: Worker
    run: asyncio.Task[None] | None = None
    users: int = 0


class McpTasksPlugin(SimplePlugin):
    """Register durable MCP tasks on a worker. ``servers``: name → :class:`ServerConfig`, or the same table as a
    ``[servers.NAME]`` of the TOML configuration (``headers = {Authorization = {env = "VAR"}}``, ``tools``...).
    ``settings``: the ``[worker]`` table (result store, inline endpoints, session idle time...). ``tracing``: add
    Temporal's OpenTelemetry interceptor, so the starter, the workflow and each activity share one trace, which
    every MCP request carries on in ``params._meta`` (``traceparent``/``tracestate``).

    A ``temporalio.plugin.SimplePlugin``, shaped like ``temporalio.mcp.MCPPlugin``::

        plugin = McpTasksPlugin.from_config("worker.toml")       # or McpTasksPlugin(servers={...})
        client = await Client.connect(**ClientConfig.load_client_connect_config(), plugins=[plugin])
        worker = Worker(client, task_queue="agents", workflows=[MyAgent])   # inherits the plugin

    On each worker it registers ``McpTaskWorkflow`` and the activities (not the example ``McpFanOutWorkflow``: a
    worker that wants it lists it) and passes what workflow code imports of ``mcp_temporal_tasks`` through the
    sandbox (:data:`PASSTHROUGH`); registers the search attributes in the worker's namespace at start (or fails naming
    the missing ones); runs this process's *owner* task queue beside the worker (tasks on stdio servers live in a
    child process of this worker, and all their later activities are pinned to that queue: ``runner.build_workers``);
    and closes the MCP sessions when the worker stops.
    """

    def __init__(
        self,
        servers: Mapping[str, ServerConfig | Mapping[str, Any]] | None = None,
        *,
        settings: WorkerSettings | None = None,
        register_search_attributes: bool = True,
        activities: McpActivities | None = None,
        tracing: bool = False,
        storage: StorageSettings | Mapping[str, Any] | None = None,
    ) -> None:
        parsed = {
            name: cfg if isinstance(cfg, ServerConfig) else server_config(name, cfg)
            for name, cfg in (servers or {}).items()
        }
        self.config = McpWorkerConfig(servers=parsed, worker=settings or WorkerSettings())
        try:
            chosen = storage if isinstance(storage, StorageSettings) else StorageSettings.model_validate(storage or {})
        except ValidationError as exc:
            raise ConfigError(f"McpTasksPlugin(storage=...): {exc.errors()[0]['msg']}") from None
        #: Large payloads (``[temporal.storage]``: bucket, prefix, endpoint, threshold): the External Storage this
        #: plugin gives a client's data converter (one the client already has is kept).
        self.storage = settings_of(chosen, self.config.worker.state_dir)
        self.config.temporal.storage = self.storage
        #: The activities, their session pool and result store (checked writable now, not at the first result).
        self.mcp_activities = activities or make_activities(self.config)
        prepare(self.storage)  # the embedded store writable (and its cleanup), after the result store's own check
        self.register_search_attributes = register_search_attributes
        #: The running owner-queue workers, by (connection, namespace).
        self._owners: dict[tuple[int, str], _Owner] = {}
        # (SimplePlugin keeps its own `activities` attribute: ours is `mcp_activities`.)
        super().__init__(
            "mcp_temporal_tasks.McpTasksPlugin",
            data_converter=self._data_converter,
            activities=self.mcp_activities.all(),
            workflows=list(WORKFLOWS),
            workflow_runner=_sandbox,
            interceptors=[tracing_interceptor()] if tracing or self.config.worker.tracing else None,
        )

    @classmethod
    def from_config(cls, path: str | Path | None = None, **kw: Any) -> McpTasksPlugin:
        """From the TOML configuration (``path``, else ``$MCP_TASKS_CONFIG``; see the README)."""
        cfg = load_config(path)
        kw.setdefault("storage", cfg.temporal.storage)
        return cls(cfg.servers, settings=cfg.worker, **kw)

    def _data_converter(self, converter: DataConverter | None) -> DataConverter:
        return with_storage(with_pydantic(converter), self.storage)

    @property
    def owner_queue(self) -> str:
        assert self.mcp_activities.owner_queue is not None
        return self.mcp_activities.owner_queue

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        # Listed before OpenAIAgentsPlugin on one client: that plugin refuses any payload converter but the default
        # one (which it replaces with its own, handling pydantic models too), so ours leaves the default to it.
        plugins = list(config.get("plugins") or [])
        later = plugins[plugins.index(self) + 1 :] if self in plugins else []
        current = config.get("data_converter") or DataConverter.default
        leave_to_later = current.payload_converter_class is DefaultPayloadConverter and any(
            map(_is_openai_agents_plugin, later)
        )
        config = super().configure_client(config)
        if leave_to_later:
            config["data_converter"] = current
        return config

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        client = config["client"]
        if not handles_pydantic(client.data_converter):
            raise ConfigError(
                "McpTasksPlugin: the worker's client has no pydantic payload converter; give the plugin to "
                "Client.connect(..., plugins=[plugin]) (workers on that client inherit it), or connect with "
                "data_converter=temporalio.contrib.pydantic.pydantic_data_converter"
            )
        ours = self.interceptors
        if ours and any(is_tracing(i) for i in client.config().get("interceptors") or []):
            # The client traces already (its worker inherits that interceptor): a second one would double every span.
            self.interceptors = None
        try:
            config = super().configure_worker(config)
        finally:
            self.interceptors = ours
        if config.get("task_queue") == self.owner_queue:  # the owner queue runs activities only
            config["workflows"] = [w for w in config.get("workflows") or [] if w not in WORKFLOWS]
        return config

    async def run_worker(self, worker: Worker, next: Any) -> None:
        if worker.task_queue == self.owner_queue:
            await next(worker)
            return
        client = worker.client
        if self.register_search_attributes:
            await _register_search_attributes(client)
        # One owner worker per connection and namespace, shared by every worker of this plugin there: the SDK
        # refuses a second worker on the same task queue of one client, and the MCP sessions (stdio children
        # holding tasks) stay open until the last of these workers stops.
        key = (id(client.service_client), client.namespace)
        owner = self._owners.get(key)
        if owner is None:
            owner = _Owner(
                Worker(
                    client,
                    task_queue=self.owner_queue,
                    activities=[] if self in client.config().get("plugins", []) else self.mcp_activities.all(),
                    max_concurrent_activities=self.config.worker.max_concurrent_activities,
                    graceful_shutdown_timeout=timedelta(seconds=5),
                )
            )
            owner.run = asyncio.create_task(owner.worker.run())
            self._owners[key] = owner
        owner.users += 1
        try:
            await next(worker)
        finally:
            owner.users -= 1
            if owner.users == 0:
                del self._owners[key]
                await owner.worker.shutdown()
                if owner.run is not None:
                    await asyncio.gather(owner.run, return_exceptions=True)
            if not self._owners:
                await self.mcp_activities.push.aclose()
                await self.mcp_activities.pool.aclose()
                await aclose_storage(client.data_converter)


async def _register_search_attributes(client: Client) -> None:
    try:
        added = await ensure_search_attributes(client, client.namespace)
    except RPCError as exc:
        if exc.status == RPCStatusCode.UNIMPLEMENTED:  # e.g. the time-skipping test server: nothing to check with
            log.warning("cannot check the search attributes of namespace %s: %s", client.namespace, exc.message)
            return
        raise ConfigError(
            f"McpTasksPlugin: cannot check or register the search attributes {', '.join(SEARCH_ATTRIBUTE_NAMES)} "
            f"(Keyword) in namespace {client.namespace!r}: {exc.message}. Register them once, e.g. "
            "`temporal operator search-attribute create --name McpTaskStatus --type Keyword`, or pass "
            "register_search_attributes=False"
        ) from None
    if added:
        log.info("registered search attributes %s in namespace %s", ", ".join(added), client.namespace)
