"""MCP tasks as data and pure rules, below workflows and the wire: no I/O, workflow-safe.

Nothing here opens a socket, a process or a file, so workflow code imports it through the sandbox and the wire
(``activities.wire``) builds on it. Workflows never import ``activities.wire`` (import-linter contract).
"""
