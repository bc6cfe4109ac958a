"""What the agent adapters share: a server's tools, filtered, and each call as one child ``McpTaskWorkflow``.

Imports no framework. A repeated identical call of a tool that is not idempotent, in one agent run, re-attaches to the
first call's child: no second ``tools/call`` (docs/agents.md, "A model that repeats itself"). Bad input ends with one
error naming it, before any ``tools/call``; a framework version without the hooks an adapter relies on is refused at
import (:func:`require_hooks`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    import jsonschema
    import mcp_types

    from mcp_temporal_tasks.activities.activity_io import ResolveInput, ServerProfile
    from mcp_temporal_tasks.activities.defs import RESOLVE
    from mcp_temporal_tasks.protocol.tasks import Endpoint, Era
    from mcp_temporal_tasks.workflows import decisions
    from mcp_temporal_tasks.workflows.records import McpTaskOutcome, Outcome, Timeouts
    from mcp_temporal_tasks.workflows.task_error import McpTaskError
    from mcp_temporal_tasks.workflows.tasks_client import McpTasksClient

#: What to do with an outcome other than ``completed`` / ``tool_error``: end the agent run with
#: :class:`McpTaskError` (``"raise"``), or answer the model with a message stating the outcome and that the tool
#: may already have run (``"tell_model"``).
OtherOutcomes = Literal["raise", "tell_model"]
_SCOPES_ATTR = "_mcp_tasks_agent_scopes"
_RUNS_ATTR = "_mcp_tasks_agent_runs"
_KEY_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


class ArgumentsRejected(ValueError):
    """The model's arguments fail the tool's input schema: no ``tools/call`` was sent."""


def argument_digest(arguments: Mapping[str, Any]) -> str:
    """A short, stable digest of a tool call's arguments (canonical JSON)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8", "replace")).hexdigest()[:16]


def outcome_message(outcome: McpTaskOutcome) -> str:
    """What the model is told, with ``other_outcomes="tell_model"``, about a call that did not complete."""
    detail = outcome.error.message if outcome.error else (outcome.reason or outcome.status_message or "")
    may_have_run = outcome.outcome not in (Outcome.REJECTED,)
    return (
        f"The call to tool {outcome.ledger.tool!r} on MCP server {outcome.ledger.server!r} ended "
        f"{outcome.outcome.value}"
        + (f": {detail}" if detail else "")
        + ". "
        + (
            "The tool may already have run on the server; calling it again could do the work twice. "
            if may_have_run
            else "The tool did not run. "
        )
        + f"(durable task {outcome.workflow_id})"
    )


def require_hooks(module: str, install: str, hooks: Mapping[str, bool]) -> None:
    """Refuse, at import, a framework version that lacks a hook ``module`` relies on: one ``ImportError`` naming every
    missing hook (``hooks`` maps each one's name to whether it is there) and the install that has them."""
    missing = [name for name, present in hooks.items() if not present]
    if missing:
        raise ImportError(
            f"{module} needs {', '.join(missing)}, which the installed framework lacks: pip install {install}"
        )


def in_workflow_only(what: str) -> None:
    if not workflow.in_workflow():
        raise RuntimeError(
            f"{what} runs its MCP tool calls as child workflows: use it in an agent that runs inside "
            "a Temporal workflow (with McpTasksPlugin on the worker)"
        )


def clear_error(err: ActivityError, what: str) -> ApplicationError:
    """An activity's failure (unknown server, refused endpoint, unreachable server...) as one non-retryable
    error naming ``what`` and the cause's message and type."""
    cause = err.cause
    message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
    kind = cause.type if isinstance(cause, ApplicationError) and cause.type else "McpToolsUnavailable"
    return ApplicationError(f"{what}: {message}", type=kind, non_retryable=True)


class AgentMcpTools:
    """One MCP server's tools for one agent run, called as durable child workflows.

    The tool definitions come from one ``list_tools`` activity through :class:`McpTasksClient` (cached on the object
    with its failure), or are given statically, optionally filtered; each tool call runs as one child
    ``McpTaskWorkflow``.

    **Child ids, and a model that repeats itself.** Each call's child id is derived from the parent workflow's id, a
    key naming the server (the toolset's ``id``, else the server's name), a per-workflow *scope* number (one per
    object, i.e. per agent run: numbered in the order their first use happens, which a replay or a reset repeats;
    :meth:`for_run` gives a framework that names its runs, as ADK does, one object per run), the tool and a digest of
    the arguments::

        {parent id}/mcp/{key}/{scope}/{tool}/{sha256(arguments)[:16]}

    A second call of the same tool with the same arguments in the same scope, for a tool that is *not* idempotent
    (the worker's ``[servers.NAME.tools.TOOL] idempotent``, else the server's ``idempotentHint``/``readOnlyHint``
    where ``trust_annotations`` is set, else not) and whose replay policy is not ``always``, re-attaches to the first
    call's child (the same asyncio task inside this run; ``McpTasksClient``'s re-attachment after a reset) and
    answers with its outcome: no second ``tools/call``. An idempotent tool runs again, under ``…/{digest}.2``,
    ``….3``... The policy is read once per tool and scope with the ``resolve`` activity, exactly as the child reads
    it.

    **Bad input** ends with one error naming it, before any ``tools/call``: ``tools=`` naming a tool the server does
    not list, an unknown server (the ``list_tools`` activity's own error), and arguments that fail the tool's input
    schema (:class:`ArgumentsRejected`, which each adapter turns into its framework's "fix your arguments").
    ``other_outcomes`` other than ``"raise"`` / ``"tell_model"`` is a ``ValueError`` here, when the adapter builds
    this object: the one check for every adapter. This object only keeps it (:meth:`fresh` passes it on); each
    adapter acts on its own ``other_outcomes`` attribute.
    """

    def __init__(
        self,
        server: str | Endpoint,
        *,
        key: str | None = None,
        tools: Sequence[str] | None = None,
        tool_definitions: Sequence[mcp_types.Tool | Mapping[str, Any]] | None = None,
        task_queue: str | None = None,
        principal: str | None = None,
        era: Era | None = None,
        timeouts: Timeouts | None = None,
        other_outcomes: OtherOutcomes = "raise",
    ) -> None:
        if other_outcomes not in ("raise", "tell_model"):
            raise ValueError(f"other_outcomes must be 'raise' or 'tell_model', not {other_outcomes!r}")
        self.server = server
        self.tools_filter = list(tools) if tools is not None else None
        self.static = (
            [t if isinstance(t, mcp_types.Tool) else mcp_types.Tool.model_validate(t) for t in tool_definitions]
            if tool_definitions is not None
            else None
        )
        self.client = McpTasksClient(server, task_queue=task_queue, principal=principal, era=era, timeouts=timeouts)
        self.task_queue = task_queue
        self.principal = principal
        self.era = era
        self.timeouts = timeouts
        self.other_outcomes: OtherOutcomes = other_outcomes
        self.key = _KEY_CHARS.sub("_", key or self.client.name)[:64] or "mcp"
        self._tools: list[mcp_types.Tool] | None = None
        self._listing_failed: ApplicationError | None = None
        self._scope: str | None = None
        self._calls: dict[str, asyncio.Task[McpTaskOutcome]] = {}
        self._repeats: dict[str, int] = {}
        self._policies: dict[str, asyncio.Future[ServerProfile]] = {}

    def fresh(self) -> AgentMcpTools:
        """The same server and options, with nothing cached: one per agent run."""
        return AgentMcpTools(
            self.server,
            key=self.key,
            tools=self.tools_filter,
            tool_definitions=self.static,
            task_queue=self.task_queue,
            principal=self.principal,
            era=self.era,
            timeouts=self.timeouts,
            other_outcomes=self.other_outcomes,
        )

    def for_run(self, run: str) -> AgentMcpTools:
        """A :meth:`fresh` copy for the agent run the framework calls ``run`` (ADK's invocation id), the same one each
        time it is asked for in this workflow: a framework that keeps one toolset object across runs still gets one
        scope of child ids and one tool list per run. Kept on the workflow instance, so it ends with the workflow."""
        in_workflow_only("an MCP toolset of mcp_temporal_tasks")
        instance = workflow.instance()
        runs: dict[tuple[AgentMcpTools, str], AgentMcpTools] | None = getattr(instance, _RUNS_ATTR, None)
        if runs is None:
            runs = {}
            setattr(instance, _RUNS_ATTR, runs)
        mine = runs.get((self, run))
        if mine is None:
            mine = runs[(self, run)] = self.fresh()
        return mine

    @property
    def name(self) -> str:
        return self.client.name

    @property
    def cached(self) -> list[mcp_types.Tool] | None:
        return self._tools

    async def list_tools(self) -> list[mcp_types.Tool]:
        """The server's tools (one activity per object; none with ``tool_definitions``), filtered by ``tools``.

        A failure (an unknown or unreachable server, a ``tools=`` name the server does not list) is one non-retryable
        ``ApplicationError`` naming it, kept like the list: asked again, the object raises it again, with no second
        activity (ADK isolates a toolset's listing failure; its adapter raises it again where ADK does not)."""
        if self._tools is not None:
            return self._tools
        if self._listing_failed is not None:
            raise self._listing_failed
        try:
            listed = await self._listed()
        except ApplicationError as err:
            self._listing_failed = err
            raise
        self._tools = listed
        return listed

    async def _listed(self) -> list[mcp_types.Tool]:
        if self.static is not None:
            listed = list(self.static)
        else:
            try:
                listed = list((await self.client.list_tools()).tools)
            except ActivityError as err:
                raise clear_error(err, f"cannot list the tools of MCP server {self.name!r}") from err
        if self.tools_filter is not None:
            names = {t.name for t in listed}
            missing = [n for n in self.tools_filter if n not in names]
            if missing:
                raise ApplicationError(
                    f"MCP server {self.name!r} does not list the tool(s) {', '.join(map(repr, missing))} named in "
                    f"tools= (it lists: {', '.join(sorted(names)) or 'none'})",
                    type="McpToolNotListed",
                    non_retryable=True,
                )
            wanted = set(self.tools_filter)
            listed = [t for t in listed if t.name in wanted]
        return listed

    async def tool(self, name: str) -> mcp_types.Tool | None:
        return next((t for t in await self.list_tools() if t.name == name), None)

    async def run(self, name: str, arguments: dict[str, Any] | None) -> McpTaskOutcome:
        """Call ``name`` as a child ``McpTaskWorkflow`` (or re-attach to this scope's earlier identical call of a
        tool that is not idempotent); its outcome, whatever it is. :class:`ArgumentsRejected` before any call."""
        in_workflow_only("an MCP tool of mcp_temporal_tasks")
        arguments = dict(arguments or {})
        tool = await self.tool(name)
        if tool is None:
            listed = ", ".join(t.name for t in await self.list_tools()) or "none"
            raise ArgumentsRejected(f"MCP server {self.name!r} offers no tool {name!r} here (tools: {listed})")
        self._check_arguments(tool, arguments)
        base = f"{workflow.info().workflow_id}/mcp/{self.key}/{self._scope_id()}/{name}/{argument_digest(arguments)}"
        again = await self._runs_again(tool)
        child_id = base
        if again:
            n = self._repeats[base] = self._repeats.get(base, 0) + 1
            child_id = base if n == 1 else f"{base}.{n}"
        if child_id not in self._calls:
            self._calls[child_id] = asyncio.ensure_future(self.client.run(name, arguments, child_id=child_id))
        return await self._calls[child_id]

    def _scope_id(self) -> str:
        if self._scope is None:
            instance = workflow.instance()
            scopes: dict[str, int] = getattr(instance, _SCOPES_ATTR, None) or {}
            scopes[self.key] = scopes.get(self.key, 0) + 1
            setattr(instance, _SCOPES_ATTR, scopes)
            self._scope = f"r{scopes[self.key]}"
        return self._scope

    async def _runs_again(self, tool: mcp_types.Tool) -> bool:
        """Whether a repeated identical call sends a new ``tools/call``: the tool is idempotent (configuration,
        else trusted annotations), or its replay policy is ``always``: ``decisions.may_replay`` (``repeat=True``),
        the rule ``McpTaskWorkflow`` asks too, with the same precedence (``decisions.replay_rule``)."""
        # One resolve per tool and scope, shared by calls made at once (a model's parallel tool calls).
        pending = self._policies.get(tool.name)
        if pending is None:
            pending = self._policies[tool.name] = asyncio.ensure_future(self._resolve(tool.name))
        profile = await pending
        policy, hints = profile.policy, tool.annotations
        rule = decisions.replay_rule(
            configured_policy=policy.replay,
            configured_idempotent=policy.idempotent,
            annotated_idempotent=decisions.annotation_idempotent(
                trusted=profile.trust_annotations,
                idempotent_hint=hints.idempotent_hint if hints else None,
                read_only_hint=hints.read_only_hint if hints else None,
            ),
        )
        return decisions.may_replay(rule, repeat=True) == "replay"

    async def _resolve(self, tool: str) -> ServerProfile:
        try:
            return await workflow.execute_activity(
                RESOLVE,
                ResolveInput(server=self.server, tool=tool, principal=self.principal, era=self.era),
                result_type=ServerProfile,
                start_to_close_timeout=timedelta(minutes=1),
                task_queue=self.task_queue,
                summary=f"policy of {tool} on {self.name}"[:200],
            )
        except ActivityError as err:
            raise clear_error(err, f"cannot resolve MCP server {self.name!r}") from err

    @staticmethod
    def _check_arguments(tool: mcp_types.Tool, arguments: dict[str, Any]) -> None:
        schema = tool.input_schema
        if not isinstance(schema, dict) or not schema:
            return
        try:
            validator_cls = jsonschema.validators.validator_for(schema)
            validator_cls.check_schema(schema)
        except jsonschema.SchemaError:
            return  # the server's schema is not one we can check with: the server will judge
        errors = sorted(validator_cls(schema).iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
            raise ArgumentsRejected(
                f"arguments for tool {tool.name!r} do not match its input schema at {where}: {errors[0].message}"
            )


def ends_run(outcome: McpTaskOutcome, other_outcomes: OtherOutcomes) -> str:
    """For an outcome other than ``completed``/``tool_error``: raise :class:`McpTaskError`, or the message."""
    if other_outcomes == "raise":
        raise McpTaskError(outcome)
    return outcome_message(outcome)
