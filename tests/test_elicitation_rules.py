"""The elicitation rules, without Temporal or a server: what is put to a person, SEP-1034 defaults, the answer's
check against a hostile form, and how long a plain call's question waits."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_temporal_tasks.protocol.elicitation import ELICITATION_CAPABILITY, elicitation_problem, with_defaults
from mcp_temporal_tasks.workflows.decisions import call_input_bound_s
from mcp_temporal_tasks.workflows.mcp_task import validate_input_response
from mcp_temporal_tasks.workflows.records import PendingInput

pytestmark = pytest.mark.fast

#: The form of the conformance suite's SEP-1034 scenario.
SEP1034 = {
    "type": "object",
    "required": [],
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    },
}


def form(schema: Any, **extra: Any) -> dict[str, Any]:
    return {"message": "?", "requestedSchema": schema, **extra}


def test_only_form_mode_is_declared() -> None:
    assert ELICITATION_CAPABILITY == {}  # on 2025-11-25: form mode only


@pytest.mark.parametrize(
    "params, problem",
    [
        (form(SEP1034), None),
        (form(SEP1034, mode="form"), None),
        (form({"type": "object", "properties": {}}), None),
        (form({"type": "object"}), None),
        ({"mode": "url", "message": "open", "url": "https://x", "elicitationId": "e"}, "mode 'url'"),
        ("garbage", "params is not an object"),
        ({"requestedSchema": SEP1034}, "message is not a string"),
        (form("a string"), "requestedSchema is not an object"),
        (form({"type": "array"}), "type is not 'object'"),
        (form({"type": "object", "properties": []}), "properties is not an object"),
        (form({"type": "object", "properties": {"x": {"type": "no-such-type"}}}), "'x' has type 'no-such-type'"),
        (form({"type": "object", "properties": {"x": {"type": "object", "properties": {}}}}), "not a primitive"),
        (form({"type": "object", "properties": {"x": 5}}), "not a primitive"),
        (form({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(65)}}), "65 properties"),
        (form({"type": "object", "properties": {}, "required": "x"}), "required is not a list"),
    ],
)
def test_what_is_put_to_a_person(params: Any, problem: str | None) -> None:
    found = elicitation_problem(params)
    assert (found is None) if problem is None else (found is not None and problem in found), found


def test_sep1034_defaults_fill_what_an_accept_omits() -> None:
    filled = with_defaults({"action": "accept", "content": {"name": "Ann"}}, SEP1034)
    assert filled == {
        "action": "accept",
        "content": {"name": "Ann", "age": 30, "score": 95.5, "status": "active", "verified": True},
    }
    assert with_defaults({"action": "accept"}, SEP1034)["content"]["name"] == "John Doe"
    assert with_defaults({"action": "decline"}, SEP1034) == {"action": "decline"}
    assert with_defaults({"action": "accept", "content": {}}, "hostile") == {"action": "accept", "content": {}}
    assert with_defaults({"action": "accept", "content": []}, SEP1034) == {"action": "accept", "content": []}


def test_an_answer_is_checked_with_the_defaults_filled_in_and_a_hostile_form_is_a_clear_refusal() -> None:
    required = {**SEP1034, "required": ["name"]}
    validate_input_response(
        PendingInput(key="k", method="elicitation/create", requested_schema=required),
        {"action": "accept", "content": {}},
    )  # name comes from its default
    broken = PendingInput(
        key="k",
        method="elicitation/create",
        requested_schema={"type": "object", "properties": {"x": {"type": "no-such-type"}}},
    )
    with pytest.raises(ValueError, match="requestedSchema is unusable"):
        validate_input_response(broken, {"action": "accept", "content": {"x": 1}})
    validate_input_response(broken, {"action": "decline"})  # declining is always possible


@pytest.mark.parametrize(
    "input_s, call_s, expected",
    [
        (86400.0, 300.0, 150.0),  # defaults: half the call's bound
        (2.0, 300.0, 2.0),  # the task's own input bound, when shorter
        (86400.0, 1.0, 1.0),  # never under a second
    ],
)
def test_how_long_a_plain_calls_question_waits(input_s: float, call_s: float, expected: float) -> None:
    assert call_input_bound_s(input_s, call_s) == expected
