"""What MCP tasks are, as data and pure rules, below both the workflows and the wire: the era-neutral models
(``tasks``), the typed wire errors and read-error rules (``wire_errors``), size and text bounds (``limits``), result
contracts (``contract``, ``sdk_types``), time arithmetic (``bounds``) and elicitation answers (``elicitation``).

No I/O: nothing here opens a socket, a process or a file, so workflow code imports it through the sandbox and the
wire (``activities.wire``) builds on it. Workflows never import ``activities.wire`` (import-linter contract).
"""
