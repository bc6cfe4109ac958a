#!/usr/bin/env python3
"""A client command for the official conformance suite's auth scenarios (``conformance client --command``).

The suite appends the MCP server's URL as the last argument and passes ``MCP_CONFORMANCE_SCENARIO`` and, for some
scenarios, ``MCP_CONFORMANCE_CONTEXT`` (JSON: ``client_id`` and ``client_secret``, or ``private_key_pem`` and
``signing_algorithm``). This maps them to a worker configuration with an OAuth ``auth`` table (secrets by
environment reference, as always) and runs ``mcp-tasks tools --server conf`` against it: one session, its
requests authorized as the scenario's server demands. With ``--address HOST:PORT`` (a running Temporal) it also
runs the scenario's ``test-tool`` as a task (``mcp-tasks run``), so that a ``tools/call`` is made.

Usage: conformance_auth_client.py [--address HOST:PORT] URL
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).with_name("mcp-tasks")


def main(argv: list[str]) -> int:
    address = None
    if len(argv) >= 3 and argv[0] == "--address":
        address, argv = argv[1], argv[2:]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    url = argv[0]
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    env = dict(os.environ)
    lines = ["[servers.conf]", f"url = {json.dumps(url)}", "[servers.conf.auth]"]
    client_id = context.get("client_id") or "conformance-client"
    if context.get("private_key_pem"):
        env["CONF_PRIVATE_KEY"] = context["private_key_pem"]
        lines += ['type = "private_key_jwt"', f"client_id = {json.dumps(client_id)}",
                  'private_key = { env = "CONF_PRIVATE_KEY" }',
                  f"signing_alg = {json.dumps(context.get('signing_algorithm') or 'RS256')}"]
    else:
        env["CONF_CLIENT_SECRET"] = context.get("client_secret") or "conformance-secret"
        lines += ['type = "client_credentials"', f"client_id = {json.dumps(client_id)}",
                  'client_secret = { env = "CONF_CLIENT_SECRET" }']
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp, "worker.toml")
        config.write_text("\n".join(lines) + "\n")
        commands = [[str(BIN), "tools", "--server", "conf", "--config", str(config), "--json"]]
        if address:
            commands.append([str(BIN), "run", "test-tool", "--server", "conf", "--config", str(config), "--json",
                             "--address", address, "--task-queue", f"conf-{os.getpid()}"])
        for command in commands:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
            print(f"$ mcp-tasks {command[1]} -> exit {done.returncode}")
            print(done.stdout.strip()[:4000])
            if done.stderr.strip():
                print(done.stderr.strip()[-4000:], file=sys.stderr)
            if done.returncode != 0:
                return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
