"""What this client declares and answers of a server's ``elicitation/create`` (form mode; SEP-1034 defaults).

Declared as ``capabilities.elicitation = {}``: form mode only (on 2025-11-25), wherever the request arrives. A request
that cannot be put to a person (URL mode, a form that is not a flat object of primitives) is answered at once with
``-32602`` naming why: never a crash, never shown to anyone (docs/human-input.md).
"""

from __future__ import annotations

from typing import Any

#: Declared in ``initialize`` (form mode only: what is answered).
ELICITATION_CAPABILITY: dict[str, Any] = {}
#: Property types a form may ask for (the spec's PrimitiveSchemaDefinition; ``array`` of enum strings included).
PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean", "array"})
#: More properties than this in one form is not a form a person fills in.
MAX_PROPERTIES = 64


def elicitation_problem(params: Any) -> str | None:
    """Why an ``elicitation/create`` cannot be asked as a form (None: it can): a URL-mode request, a
    ``requestedSchema`` that is not a flat object of primitive properties (as the spec restricts it). The caller
    answers it at once with a JSON-RPC error ``-32602`` naming it: no person is asked a question nobody can answer."""
    if not isinstance(params, dict):
        return "params is not an object"
    mode = params.get("mode", "form")
    if mode != "form":
        return f"mode {str(mode)[:32]!r} is not answered by this client (it declared form mode only)"
    message = params.get("message")
    if not isinstance(message, str):
        return "message is not a string"
    schema = params.get("requestedSchema")
    if not isinstance(schema, dict):
        return "requestedSchema is not an object"
    if schema.get("type") != "object":
        return "requestedSchema.type is not 'object'"
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return "requestedSchema.properties is not an object"
    if len(props) > MAX_PROPERTIES:
        return f"requestedSchema has {len(props)} properties (at most {MAX_PROPERTIES})"
    for name, prop in props.items():
        if not isinstance(prop, dict) or prop.get("type") not in PRIMITIVE_TYPES:
            kind = prop.get("type") if isinstance(prop, dict) else prop
            return f"requestedSchema property {str(name)[:64]!r} has type {str(kind)[:32]!r}, not a primitive"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return "requestedSchema.required is not a list of names"
    return None


def with_defaults(response: dict[str, Any], schema: Any) -> dict[str, Any]:
    """``response`` with SEP-1034 defaults filled in: for an ``accept``, every property of ``schema`` that has a
    ``default`` and is missing from ``content``. Anything else is returned as it is."""
    if response.get("action") != "accept" or not isinstance(schema, dict):
        return response
    props = schema.get("properties")
    if not isinstance(props, dict):
        return response
    content = response.get("content")
    content = dict(content) if isinstance(content, dict) else {} if content is None else content
    if not isinstance(content, dict):
        return response
    for name, prop in props.items():
        if isinstance(prop, dict) and "default" in prop and name not in content:
            content[name] = prop["default"]
    return {**response, "content": content}
