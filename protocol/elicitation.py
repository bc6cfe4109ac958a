"""What this client answers of a server's ``elicitation/create``, and the rules it keeps doing so.

Declared in ``initialize`` as ``capabilities.elicitation = {}``: on 2025-11-25 an empty object means form mode only,
which is what is answered, wherever the request arrives (the stream of a plain ``tools/call``, of a task's held
``tasks/result``): a person answers through the workflow (``mcp-tasks answer``, the ``provide_input`` update), or
nobody does within the bound and the answer is ``decline`` (``cancel`` with ``on_input_timeout = "cancel"``).
URL mode is not declared, so a URL-mode request is refused with ``-32602`` instead of being shown to anyone.

* :func:`elicitation_problem`: why a request cannot be put to a person (a URL-mode request, a ``requestedSchema``
  that is not a flat object of primitive properties, as the spec restricts it): answered at once with a JSON-RPC
  error ``-32602`` naming it, never a crash and never a person asked a question nobody can answer.
* :func:`with_defaults`: SEP-1034: an ``accept`` whose content omits a property that has a ``default`` in the
  ``requestedSchema`` gets that default.
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
    """Why an ``elicitation/create`` cannot be asked as a form (None: it can)."""
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
