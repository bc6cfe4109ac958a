"""A task's result contract, and decoding a payload against it.

The contract: the payload is an ``mcp_types.CallToolResult`` (SDK ``SDK_VERSION``) whose ``structuredContent``
validates against the pinned ``outputSchema`` if any (configuration, or the tool's declaration at submit time);
``isError`` results are not held to it (the schema describes success). A failure is a :class:`ResultDecodeError`
carrying the raw payload: the work finished, only its shape is not what was promised. Callers must never turn it
into "failed" or retry the tool.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jsonschema
from pydantic import ValidationError

from mcp_temporal_tasks.protocol import sdk_types
from mcp_temporal_tasks.protocol.limits import carry_problem
from mcp_temporal_tasks.protocol.wire_errors import ResultDecodeError


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value).encode()).hexdigest()


def contract_of(output_schema: dict[str, Any] | None) -> dict[str, Any]:
    """The expected-result contract as data (recorded in the ledger with its digest)."""
    return {"type": "CallToolResult", "sdk": f"mcp_types=={sdk_types.SDK_VERSION}", "outputSchema": output_schema}


def decode_result(raw: Any, output_schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """Validate ``raw`` and return it in canonical wire form (camelCase, unknown fields dropped)."""
    problem = carry_problem(raw)
    if problem is not None:  # checked first: pydantic and the payload converter would recurse or fail to encode
        raise ResultDecodeError(f"result cannot be carried: {problem}", raw=raw)
    try:
        model = sdk_types.validate_call_tool_result(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise ResultDecodeError(f"result is not a CallToolResult: {where}: {first['msg']}", raw=raw) from exc
    if output_schema is not None and not model.is_error:
        if model.structured_content is None:
            raise ResultDecodeError("tool declares an outputSchema but the result has no structuredContent", raw=raw)
        try:
            jsonschema.validate(model.structured_content, output_schema)
        except jsonschema.ValidationError as exc:
            path = "/".join(str(p) for p in exc.absolute_path) or "<root>"
            raise ResultDecodeError(
                f"structuredContent does not match outputSchema at {path}: {exc.message}", raw=raw
            ) from exc
        except jsonschema.SchemaError as exc:
            raise ResultDecodeError(f"pinned outputSchema is itself invalid: {exc.message}", raw=raw) from exc
    out: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    if isinstance(raw, dict) and "resultType" not in raw:
        # The SDK model defaults resultType to "complete" (a 2026-07-28 field): a 2025-11-25 server never sent it,
        # and the outcome carries what the server sent.
        out.pop("resultType", None)
    return out
