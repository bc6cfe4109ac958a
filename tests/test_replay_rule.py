"""Issue 39: one replay rule. ``decisions.replay_rule`` (the precedence) and ``decisions.may_replay`` (the decision)
are what the workflow, the agent tools and ``mcp-tasks tools`` all use; here the rule itself, every combination."""

from __future__ import annotations

import itertools

import pytest

from mcp_temporal_tasks.workflows import decisions
from mcp_temporal_tasks.workflows.records import ReplayPolicy

pytestmark = pytest.mark.fast

HINTS = [None, True, False]


@pytest.mark.parametrize("trusted,idem,ro", list(itertools.product([True, False], HINTS, HINTS)))
def test_annotations_count_only_when_trusted_and_read_only_alone_counts(
    trusted: bool, idem: bool | None, ro: bool | None
) -> None:
    got = decisions.annotation_idempotent(trusted=trusted, idempotent_hint=idem, read_only_hint=ro)
    if not trusted or (idem is None and ro is None):
        assert got is None
    else:
        assert got == bool(idem or ro)
    # The rule of histories from before (read-only-hint-is-idempotent not yet patched) needed idempotentHint.
    old = decisions.annotation_idempotent(
        trusted=trusted, idempotent_hint=idem, read_only_hint=ro, read_only_alone=False
    )
    assert old == (bool(idem or ro) if trusted and idem is not None else None)


@pytest.mark.parametrize("req,conf,ann", list(itertools.product(HINTS, HINTS, HINTS)))
def test_idempotency_precedence_request_then_configuration_then_annotations(
    req: bool | None, conf: bool | None, ann: bool | None
) -> None:
    rule = decisions.replay_rule(requested_idempotent=req, configured_idempotent=conf, annotated_idempotent=ann)
    assert rule.idempotent == next((v for v in (req, conf, ann) if v is not None), False)


def test_policy_and_budget_precedence() -> None:
    assert decisions.replay_rule().policy == ReplayPolicy.NEVER and decisions.replay_rule().max_replays == 1
    rule = decisions.replay_rule(
        requested_policy=ReplayPolicy.ALWAYS, configured_policy="never", requested_max=0, configured_max=3
    )
    assert (rule.policy, rule.max_replays) == (ReplayPolicy.ALWAYS, 0)
    rule = decisions.replay_rule(configured_policy="if_idempotent", configured_max=3)
    assert (rule.policy, rule.max_replays) == (ReplayPolicy.IF_IDEMPOTENT, 3)


@pytest.mark.parametrize("policy,idempotent", list(itertools.product(list(ReplayPolicy), [True, False])))
def test_may_replay_after_a_failure_is_decide_replay_and_a_repeat_runs_an_idempotent_tool(
    policy: ReplayPolicy, idempotent: bool
) -> None:
    rule = decisions.ReplayRule(policy, idempotent, 1)
    for used in (0, 1, 2):
        assert decisions.may_replay(rule, replays_used=used) == decisions.decide_replay(
            policy, idempotent=idempotent, replays_used=used, max_replays=1
        )
    repeat = decisions.may_replay(rule, repeat=True)
    assert repeat == ("replay" if idempotent or policy == ReplayPolicy.ALWAYS else "stop")


def test_the_cli_tools_view_shows_the_same_rule() -> None:
    from mcp_temporal_tasks.activities.activity_io import ServerConfig, ToolPolicy
    from mcp_temporal_tasks.protocol.tasks import ToolInfo
    from mcp_temporal_tasks.worker.cli.calling import tool_policy

    server = ServerConfig.model_validate(
        {"url": "http://x/mcp", "trust_annotations": True, "tools": {"c": ToolPolicy(replay="always").model_dump()}}
    )
    shown = tool_policy("r", ToolInfo(name="r", read_only_hint=True), server)
    assert (shown["idempotent"], shown["idempotent_from"], shown["replay"]) == (True, "annotations (trusted)", "never")
    shown = tool_policy("c", ToolInfo(name="c", idempotent_hint=False), server)
    assert (shown["idempotent"], shown["idempotent_from"], shown["replay"]) == (
        False,
        "annotations (trusted)",
        "always",
    )
