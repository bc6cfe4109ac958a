"""Bounds on everything a server sends.

Hostile input is normal input: every value that leaves this layer fits in a Temporal payload, in a terminal line and
in a log record.
"""

from __future__ import annotations

import json
from typing import Any

#: One JSON-RPC reply (a JSON body or one SSE event). Results above the result store's inline limit are kept by
#: reference, so this only has to stop a server from exhausting the worker's memory; a reply over it is a clear, final
#: error (:class:`~.wire_errors.ReplyTooLarge`), not a transient one. The HTTP library's own default per-SSE-event cap
#: (1 MiB) is replaced by it on purpose.
MAX_REPLY_BYTES = 32 * 1024 * 1024
#: pydantic, the JSON encoders and Temporal's payload converter all recurse; a result nested deeper than this ends
#: ``decode_failed`` instead of failing the activity over and over.
MAX_RESULT_DEPTH = 64
#: json.loads recurses per nesting level; deeper parts of a reply are cut (replaced by a marker) so the
#: rest (a task's status) can still be read, and the result that carried them is then ``decode_failed``.
PARSE_CUT_DEPTH = 256
#: Server text that is shown (status lines, heartbeat details, the workflow's current details: ``STATUS_MESSAGE_CAP``)
#: or kept for diagnosis (error texts: ``TEXT_CAP``; raw payloads: ``RAW_CAP``).
STATUS_MESSAGE_CAP = 4 * 1024
TEXT_CAP = 16 * 1024
RAW_CAP = 16 * 1024
#: Task ids we accept from a server. Longer ones are hashed wherever an index or a label shows them.
MAX_TASK_ID = 16 * 1024
CUT_MARKER = "[mcp-tasks: nested deeper than the parser allows; cut]"


def cap_text(text: str, limit: int = TEXT_CAP) -> str:
    """``text`` within ``limit`` characters (a marker says how much was cut), lone surrogates replaced."""
    if len(text) > limit:
        text = f"{text[:limit]}…[truncated {len(text) - limit} chars]"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


#: How much of a task id a label shows (heartbeat details, activity summaries, log lines).
SHORT_ID = 64


def short_id(task_id: str, n: int = SHORT_ID) -> str:
    """A task id as labels show it: bounded, whatever the server sent (its first ``n`` characters and an ellipsis)."""
    return task_id if len(task_id) <= n else f"{task_id[:n]}…"


def carry_problem(value: Any, max_depth: int = MAX_RESULT_DEPTH) -> str | None:
    """Why ``value`` cannot be carried in a Temporal payload as is (too deep, a lone surrogate), or None.

    Iterative, so a hostile value cannot exhaust the stack of the check itself.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if item == CUT_MARKER:
                return f"nested deeper than {PARSE_CUT_DEPTH} levels"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "contains a lone surrogate (not encodable as UTF-8)"
            continue
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels"
            if isinstance(item, dict):
                stack.extend((k, depth) for k in item)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
    return None


def safe_raw(raw: Any, cap: int = RAW_CAP) -> Any:
    """A diagnostic copy of ``raw`` that always fits a payload: the value itself when small and carriable,
    else its JSON text (surrogates escaped) cut to ``cap`` characters."""
    if raw is None:
        return None
    if isinstance(raw, str):
        return cap_text(raw, cap)
    try:
        text = json.dumps(raw, ensure_ascii=True, default=str)
    except (RecursionError, ValueError, TypeError):
        return f"[unserialisable {type(raw).__name__}]"
    if isinstance(raw, (dict, list)) and len(text) <= cap and carry_problem(raw) is None:
        return raw
    return text[:cap] + (f"…[truncated {len(text) - cap} chars]" if len(text) > cap else "")


def _cut_deep(text: str, limit: int) -> str:
    """``text`` with every container nested deeper than ``limit`` replaced by the cut marker (JSON-aware)."""
    out: list[str] = []
    depth = 0
    cut_from: int | None = None
    in_str = esc = False
    last = 0
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth == limit + 1 and cut_from is None:
                cut_from = i
        elif ch in "]}":
            if depth == limit + 1 and cut_from is not None:
                out.append(text[last:cut_from])
                out.append(json.dumps(CUT_MARKER))
                last = i + 1
                cut_from = None
            depth -= 1
    out.append(text[last:])
    return "".join(out)


def loads_bounded(data: bytes | str) -> Any:
    """``json.loads`` that survives hostile nesting: too-deep parts are cut, not fatal to the reply."""
    try:
        return json.loads(data)
    except RecursionError:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        return json.loads(_cut_deep(text, PARSE_CUT_DEPTH))
