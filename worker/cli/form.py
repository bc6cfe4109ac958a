"""``mcp-tasks answer``'s interactive form: one prompt per field of the schema an input request asks for.

An invalid answer, or Enter at a required field, asks again (never a silent default such as "declined"); the
prompt shows the choices (``[y/n]``, enum values) and the field's description.
"""

from __future__ import annotations

import json
import select
import sys
from typing import Any

import jsonschema

from mcp_temporal_tasks.worker.cli.parser import EXIT_USAGE, CliError, err
from mcp_temporal_tasks.worker.printable import printable
from mcp_temporal_tasks.workflows.records import PendingInput


def _ask(prompt: str) -> str:
    """One line from the terminal; end of input stops (nothing is sent).

    At a terminal the wait polls (0.2 s): the kernel hands a Ctrl-C to any thread of the process that does not block
    it, and a ``read()`` on the main thread that the signal did not interrupt would wait for the next key. Between
    polls the main thread runs Python again, where the pending Ctrl-C is raised whichever thread took it."""
    try:
        if not sys.stdin.isatty():
            return input(prompt).strip()
        sys.stdout.write(prompt)
        sys.stdout.flush()
        while not select.select([sys.stdin], [], [], 0.2)[0]:
            pass
        line = sys.stdin.readline()  # canonical mode: the terminal hands over one whole line per read
        if not line:
            raise EOFError
        return line.strip()
    except EOFError:
        raise CliError("answer: input ended before every field was answered; nothing was sent", EXIT_USAGE) from None


def _choices(prop: dict[str, Any]) -> list[Any] | None:
    if isinstance(prop.get("enum"), list):
        return list(prop["enum"])
    options = prop.get("oneOf") or prop.get("anyOf")
    if isinstance(options, list) and options and all(isinstance(o, dict) and "const" in o for o in options):
        return [o["const"] for o in options]
    return None


def _parse_field(raw: str, prop: dict[str, Any]) -> Any:
    """The typed value of one answer, or ValueError with what is expected."""
    kind = prop.get("type", "string")
    choices = _choices(prop)
    if kind == "boolean":
        word = raw.lower()
        if word in ("y", "yes", "true", "1"):
            return True
        if word in ("n", "no", "false", "0"):
            return False
        raise ValueError("answer y or n")
    if kind == "integer":
        try:
            value: Any = int(raw)
        except ValueError:
            raise ValueError("a whole number is expected") from None
    elif kind == "number":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("a number is expected") from None
    else:
        value = raw
    if choices is not None and value not in choices:
        raise ValueError("one of: " + ", ".join(printable(c) for c in choices))
    try:
        jsonschema.validate(value, prop)
    except jsonschema.ValidationError as exc:
        raise ValueError(printable(exc.message)) from None
    except jsonschema.SchemaError:
        pass
    return value


def prompt_elicitation(p: PendingInput) -> dict[str, Any]:
    """Ask a human on the terminal for each field of the requested schema; the ``ElicitResult`` to send."""
    err(f"\n{printable(p.message or p.method, multiline=True)}")
    while True:
        action = _ask("action [accept/decline/cancel] (Enter: accept): ") or "accept"
        if action in ("accept", "decline", "cancel"):
            break
        err(f"  {printable(action)!r} is not one of accept, decline, cancel")
    if action != "accept":
        return {"action": action}
    schema = p.requested_schema or {}
    required = set(schema.get("required", []))
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        label = printable(prop.get("title") or name)
        kind = prop.get("type", "string")
        choices = _choices(prop)
        hint = (
            "[y/n]"
            if kind == "boolean"
            else ("[" + "/".join(printable(c) for c in choices) + "]" if choices else f"({printable(kind)})")
        )
        if "default" in prop:
            hint += f" (Enter: {printable(json.dumps(prop['default']))})"
        elif name not in required:
            hint += " (optional, Enter skips)"
        else:
            hint += " (required)"
        if prop.get("description"):
            err(f"  {label}: {printable(prop['description'])}")
        while True:
            raw = _ask(f"{label} {hint}: ")
            if not raw:
                if "default" in prop:
                    content[name] = prop["default"]
                    break
                if name not in required:
                    break
                err(f"  {label} is required")
                continue
            try:
                content[name] = _parse_field(raw, prop)
                break
            except ValueError as exc:
                err(f"  {printable(raw)!r}: {exc}")
    return {"action": "accept", "content": content}
