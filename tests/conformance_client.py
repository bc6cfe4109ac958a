"""The client command the official MCP conformance suite runs (tests/test_conformance.py, docs/conformance.md).

    conformance client --command "python -m tests.conformance_client" --scenario NAME ...

The suite appends the scenario server's URL and sets ``MCP_CONFORMANCE_SCENARIO`` (and, for some auth scenarios,
``MCP_CONFORMANCE_CONTEXT``: JSON with ``client_id`` and ``client_secret``, or ``private_key_pem`` and
``signing_algorithm``; a workload's ``valid_jwt``; the person's ``idp_id_token`` with ``idp_issuer``,
``idp_token_endpoint`` and ``idp_client_id``). Each scenario becomes what a user of ``mcp-tasks`` does: a
configuration file for the server (with its ``[servers.s.auth]`` table where the context gives credentials; the
secret or key only by environment reference, the platform token by file, as a worker takes them), then
``mcp-tasks tools`` and ``mcp-tasks run <tool>`` against the Temporal at ``CONFORMANCE_TEMPORAL_ADDRESS`` (an
already-running one: no dev server per scenario). The exit code is ``run``'s.

The ``auth/*`` scenarios of a subject's authorization-code grant (all but :data:`SERVICE_AUTH`) run ``mcp-tasks login
s --subject conformance-person`` with a token store of this run, and this script is the person: it fetches each consent
URL login prints without following the redirect (the suite's mock answers at once with a 302 carrying code and state)
and hands the ``Location`` to login's loopback listener, as a browser would; login then lists the tools with the grant.
The service-client ``auth/*`` scenarios check the flow (discovery, token request, bearer on every request) that
``mcp-tasks tools`` runs end to end with the same wire client and token source a worker's activities use; a ``run``
per auth scenario would add a Temporal worker's start to each without touching another line of auth code, so they run
``tools`` (CI time). ``elicitation-sep1034-client-defaults`` is answered as a person would: ``mcp-tasks run`` in the
background, then ``mcp-tasks answer`` accepting with no content (the schema's defaults are ours to fill in).

Which tool: the scenario server's own (``add_numbers`` gets ``{"a": 2, "b": 3}``; any other tool ``{}``), the first
of its ``tools/list``. ``initialize`` only lists tools (the handshake is what it checks).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "mcp_temporal_tasks.worker.cli"]
#: Arguments for the scenario servers' tools; any tool not here gets ``{}``.
ARGUMENTS: dict[str, dict[str, Any]] = {"add_numbers": {"a": 2, "b": 3}}
#: The tool each scenario's server has (known: no ``mcp-tasks tools`` step, which CI time pays for); other
#: scenarios list the tools first and call the first one.
TOOL_OF = {
    "tools_call": "add_numbers",
    "sse-retry": "test_reconnection",
    "elicitation-sep1034-client-defaults": "test_client_elicitation_defaults",
}
#: Credentials of our own for auth scenarios whose context gives none (not a secret: the suite's mock accepts any).
DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET = "mcp-tasks-conformance", "conformance-secret"
#: Scenarios that judge the listing alone (the handshake; a schema's ``$ref`` left unfetched): their servers answer
#: no ``tools/call``.
LIST_ONLY = {"initialize", "json-schema-ref-no-deref"}
#: The permissive tool of ``json-schema-2020-12-preservation``, given the other tool's input schema verbatim.
ECHO_TOOL = "json_schema_echo"
#: Bound on each CLI step: the suite's own --timeout ends the whole command anyway.
STEP_TIMEOUT_S = 60
#: The auth scenarios a service client runs (client credentials, a pre-registered client, the resource check); every
#: other ``auth/*`` scenario is a subject's authorization-code grant, consented with ``mcp-tasks login``.
SERVICE_AUTH = {
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/pre-registration",
    "auth/resource-mismatch",
    "auth/wif-jwt-bearer",
}
#: Enterprise-managed authorization (SEP-990): the person's ID token (the context's ``idp_id_token``) is handed over
#: with ``mcp-tasks login s --subject conformance-person --id-token-file``, which then lists the tools for the person
#: (the token exchange at the suite's IdP, then the JWT-bearer grant at its authorization server).
ENTERPRISE = {"auth/cross-app-access-complete-flow", "auth/enterprise-managed-authorization"}
#: Of those, the one whose tool then also runs as a task for the person (a worker's path: the ID token read from the
#: store in the activity; tests/test_conformance.py searches its history for tokens). One line only: CI time.
TASK_AFTER_HANDOVER = {"auth/enterprise-managed-authorization": "test-tool"}
#: The client ID metadata document URL the suite's basic-cimd scenario expects (hard-coded there, never fetched).
CIMD_URL = "https://conformance-test.local/client-metadata.json"
#: Scenarios whose server asks for more scope on tools/call than on tools/list: after login, the tool is run as a
#: task for the person, which waits for the step-up consent (AWAITING_AUTHORIZATION, the URL in ``mcp-tasks status``);
#: the person gives it and hands the answer with ``mcp-tasks login --callback``; the same task then calls the tool.
#: ``auth/dpop-nonce``: the task runs at once, its worker signing with the DPoP key login stored in the grant (and
#: meeting the MCP server's nonce challenge afresh).
TASK_AFTER_LOGIN = {"auth/scope-step-up": "test-tool", "auth/dpop-nonce": "test-tool"}
#: Scenarios whose servers take only DPoP-bound tokens (SEP-1932): the server's configuration says ``dpop = true``,
#: as a user's would for a server that asks for it (the extension is optional: nothing turns it on unasked).
DPOP = {"auth/dpop", "auth/dpop-nonce"}
#: The subject whose consent the scenario's "person" (this script) gives.
PERSON = "conformance-person"
#: Scenarios whose server asks a question mid-call, and the answer a person gives with ``mcp-tasks answer``.
ANSWERS = {
    "elicitation-sep1034-client-defaults": {"action": "accept", "content": {}},
    "sep-2322-client-request-state": {"action": "accept", "content": {"confirmed": True}},
}
#: MRTR (SEP-2322): the tools that ask (answered as above, each in its own run), the one called while the first waits
#: for its answer (parallel isolation: it must carry neither the answers nor the state), and the one whose result has
#: no ``resultType`` (complete: never continued).
MRTR_ASKING = ["test_mrtr_echo_state", "test_mrtr_no_state"]
MRTR_MEANWHILE = "test_mrtr_unrelated"
MRTR_PLAIN = "test_mrtr_no_result_type"


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def write_config(directory: Path, url: str, scenario: str, context: dict[str, Any], env: dict[str, str]) -> Path:
    """``[servers.s]`` for ``url``; credentials from the context go to ``env`` and are referenced by name only."""
    lines = ["[servers.s]", f"url = {toml_value(url)}"]
    auth: dict[str, Any] = {}
    if scenario in ENTERPRISE:
        env["CONFORMANCE_CLIENT_SECRET"] = str(context.get("client_secret", ""))
        auth = {
            "type": "enterprise_managed",
            "client_id": context.get("client_id", ""),
            "client_secret": {"env": "CONFORMANCE_CLIENT_SECRET"},
            "idp_issuer": context.get("idp_issuer", ""),
            "idp_token_endpoint": context.get("idp_token_endpoint", ""),
            "idp_client_id": context.get("idp_client_id", ""),
        }
        context = {}
    elif isinstance(context.get("valid_jwt"), str):
        # Workload identity federation: the platform's token is a file the platform rotates (a projected
        # service-account token): written where the worker reads it at each token request.
        token_file = directory / "platform-token"
        token_file.write_text(context["valid_jwt"])
        token_file.chmod(0o600)
        auth = {"type": "workload_identity", "assertion": {"file": str(token_file)}}
        if isinstance(context.get("client_id"), str):
            auth["client_id"] = context["client_id"]
        context = {}
    elif scenario.startswith("auth/") and scenario not in SERVICE_AUTH:
        with socket.socket() as free:  # a loopback port of this run alone (xdist runs scenarios side by side)
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        auth = {"type": "authorization_code", "redirect_uri": f"http://127.0.0.1:{port}/callback"}
        if scenario == "auth/basic-cimd":
            auth["client_metadata_url"] = CIMD_URL
        if scenario in DPOP:
            auth["dpop"] = True
        context = {}
    elif scenario.startswith("auth/") and not isinstance(context.get("client_id"), str):
        # No credentials from the suite: a service client is still configured with its own (the suite's mock
        # authorization servers accept any client for client credentials), as a user of mcp-tasks would be.
        context = {"client_id": DEFAULT_CLIENT_ID, "client_secret": DEFAULT_CLIENT_SECRET}
    if isinstance(context.get("client_id"), str):
        if isinstance(context.get("private_key_pem"), str):
            env["CONFORMANCE_PRIVATE_KEY"] = context["private_key_pem"]
            auth = {
                "type": "private_key_jwt",
                "client_id": context["client_id"],
                "private_key": {"env": "CONFORMANCE_PRIVATE_KEY"},
            }
            if isinstance(context.get("signing_algorithm"), str):
                auth["signing_alg"] = context["signing_algorithm"]
        elif isinstance(context.get("client_secret"), str):
            env["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
            auth = {
                "type": "client_credentials",
                "client_id": context["client_id"],
                "client_secret": {"env": "CONFORMANCE_CLIENT_SECRET"},
            }
    if auth:
        lines.append("[servers.s.auth]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in auth.items())
    path = directory / "mcp-tasks.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def consented(args: list[str], env: dict[str, str]) -> int:
    """``mcp-tasks login`` with this script as the person: each consent URL it prints is fetched without following
    the authorization server's redirect (the suite's mock answers at once with a 302 carrying code and state, no
    login page), then the ``Location`` is fetched as the browser would, reaching login's loopback listener."""
    import httpx2

    proc = subprocess.Popen(
        [*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    seen: list[str] = []
    assert proc.stderr is not None
    try:
        for line in proc.stderr:  # login ends within its --timeout, closing stderr
            seen.append(line)
            if line.startswith("http"):
                answer = httpx2.get(line.strip(), follow_redirects=False, timeout=10)
                location = answer.headers.get("location")
                if answer.status_code in (301, 302, 303, 307) and location:
                    httpx2.get(location, follow_redirects=False, timeout=10)
        out, _ = proc.communicate(timeout=STEP_TIMEOUT_S)
    except (subprocess.TimeoutExpired, httpx2.HTTPError) as exc:
        proc.kill()
        out, _ = proc.communicate()
        seen.append(f"person: {type(exc).__name__}\n")
    sys.stderr.write(f"$ mcp-tasks login ... -> exit {proc.returncode}\n{''.join(seen)[-3000:]}")
    sys.stdout.write(out[-3000:])
    return proc.returncode


def workflow_id(scenario: str) -> str:
    """A fresh workflow id per run, under ``CONFORMANCE_RUN`` when set: one Temporal serves both lines of the suite,
    which share scenario names, and a test reads back exactly the workflows its own run started."""
    run_tag = os.environ.get("CONFORMANCE_RUN", "")
    return f"conformance-{run_tag}{'-' if run_tag else ''}{scenario.replace('/', '-')}-{uuid.uuid4().hex[:12]}"


def stepped_up(tool: str, target: list[str], scenario: str, env: dict[str, str]) -> int:
    """The tool run as one task for the person: when it waits for a consent (AWAITING_AUTHORIZATION, the URL in
    ``mcp-tasks status``), the person opens that URL (not following the mock's redirect) and hands the answer with
    ``mcp-tasks login --callback``; the same workflow then sends its ``tools/call``. ``run``'s exit is the verdict."""
    import httpx2

    address = os.environ.get("CONFORMANCE_TEMPORAL_ADDRESS", "")
    wid = workflow_id(scenario)
    args = ["run", tool, *target, "--args", "{}", "--id", wid, "--json", "--address", address, "--principal", PERSON]
    run = subprocess.Popen(
        [*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + STEP_TIMEOUT_S
    answered: set[str] = set()
    failed = 0
    try:
        while time.monotonic() < deadline and run.poll() is None:
            shown = step(["status", wid, "--address", address, "--json"], env)
            try:
                view = json.loads(shown.stdout or "{}")
            except ValueError:
                view = {}
            asked = (view.get("authorization") or {}).get("url") if isinstance(view, dict) else None
            if isinstance(asked, str) and asked not in answered:
                answered.add(asked)
                answer = httpx2.get(asked, follow_redirects=False, timeout=10)
                location = answer.headers.get("location") or ""
                callback = ["login", "--callback", location, "--json", "--address", address]
                if step(callback, env).returncode != 0:
                    failed = 1
                    break
            time.sleep(0.3)
        out, err = run.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        run.kill()
        out, err = run.communicate()
    sys.stderr.write(f"$ mcp-tasks run ... -> exit {run.returncode} ({len(answered)} consent(s))\n{err[-3000:]}")
    sys.stdout.write(out[-3000:])
    return max(run.returncode, failed)


def step(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, stdin=subprocess.DEVNULL
    )
    sys.stderr.write(f"$ mcp-tasks {' '.join(args[:2])} ... -> exit {proc.returncode}\n{proc.stderr[-3000:]}")
    sys.stdout.write(proc.stdout[-3000:])
    return proc


def answered(
    args: list[str],
    env: dict[str, str],
    wid: str,
    address: str,
    answer: dict[str, Any],
    meanwhile: Callable[[], int] | None = None,
) -> int:
    """``run`` in the background; ``answer`` once its question is there (tried until it is, bounded); ``run``'s exit.
    ``meanwhile``: a step run once the question is outstanding, before it is answered (its failure is the exit)."""
    run = subprocess.Popen(
        [*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + STEP_TIMEOUT_S
    failed = 0
    try:
        while meanwhile is not None and time.monotonic() < deadline and run.poll() is None:
            # `status` exits non-zero while the task runs: its JSON view says whether a question is outstanding.
            shown = step(["status", wid, "--address", address, "--json"], env)
            try:
                view = json.loads(shown.stdout or "{}")
            except ValueError:
                view = {}
            if isinstance(view, dict) and view.get("pending_inputs"):
                failed = meanwhile()
                break
            time.sleep(0.5)
        while time.monotonic() < deadline and run.poll() is None:
            if (
                step(["answer", wid, "--address", address, "--json", "--response", json.dumps(answer)], env).returncode
                == 0
            ):
                break
            time.sleep(0.5)
        out, err = run.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        run.kill()
        out, err = run.communicate()
    sys.stderr.write(f"$ mcp-tasks run ... -> exit {run.returncode}\n{err[-3000:]}")
    sys.stdout.write(out[-3000:])
    return max(run.returncode, failed)


def placeholder(schema: Any) -> Any:
    """A value a property's schema accepts, for the required arguments of a scenario tool nobody gave arguments for."""
    schema = schema if isinstance(schema, dict) else {}
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    return {"string": "x", "integer": 1, "number": 1, "boolean": True, "array": [], "null": None}.get(
        kind, {} if kind == "object" else "x"
    )


def arguments_for(tool: dict[str, Any]) -> dict[str, Any]:
    """``ARGUMENTS`` where known, else a placeholder for each required property of the tool's input schema."""
    name = tool.get("name")
    if isinstance(name, str) and name in ARGUMENTS:
        return ARGUMENTS[name]
    schema = tool.get("input_schema") or {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    return {p: placeholder(props.get(p)) for p in required if isinstance(p, str)}


def calls_for(scenario: str, tools: list[dict[str, Any]], context: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``mcp-tasks run`` steps a scenario asks for: the tool calls its context lists (SEP-2243 custom headers),
    the schema echo (JSON Schema preservation), every tool ``mcp-tasks tools`` does not refuse (the invalid-header
    gate: the refused ones are tried separately), or the first tool."""
    listed = {t["name"]: t for t in tools if isinstance(t.get("name"), str)}
    given = context.get("toolCalls")
    if isinstance(given, list) and given:
        # A null argument is left out: ``verbose: null`` breaks the tool's own schema (``type: boolean``), which
        # mcp-tasks refuses before sending; absent and null both mean "no Mcp-Param header" (the SDK encoder omits a
        # null: tests/test_handshake_rules.py).
        return [
            (c["name"], {k: v for k, v in (c.get("arguments") or {}).items() if v is not None})
            for c in given
            if isinstance(c, dict) and isinstance(c.get("name"), str)
        ]
    if scenario == "json-schema-2020-12-preservation" and ECHO_TOOL in listed:
        focal = next((t for n, t in listed.items() if n != ECHO_TOOL), None)
        return [(ECHO_TOOL, {"schema": (focal or {}).get("input_schema") or {}})]
    if scenario == "sep-2322-client-request-state" and set(MRTR_ASKING) <= set(listed):
        return [(name, {}) for name in [*MRTR_ASKING, MRTR_PLAIN]]
    if scenario == "http-invalid-tool-headers":
        return [(n, arguments_for(t)) for n, t in listed.items() if not str(t.get("runs_as", "")).startswith("refused")]
    if not listed:
        return []
    name = next((t for t in ARGUMENTS if t in listed), next(iter(listed)))
    return [(name, arguments_for(listed[name]))]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m tests.conformance_client <server URL> (the suite appends it)\n")
        return 2
    url = argv[0]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    try:
        context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    except ValueError:
        context = {}
    context = context if isinstance(context, dict) else {}
    env = {k: v for k, v in os.environ.items() if k != "MCP_CONFORMANCE_CONTEXT"}
    with tempfile.TemporaryDirectory(prefix="mcp-conformance-") as tmp:
        config = write_config(Path(tmp), url, scenario, context, env)
        env["MCP_TASKS_STATE_DIR"] = tmp  # the CLI's local state (result store) stays in this run's folder
        target = ["--server", "s", "--config", str(config)]
        if scenario in ENTERPRISE:
            from cryptography.fernet import Fernet

            env["MCP_TASKS_TOKEN_KEY"] = Fernet.generate_key().decode()
            id_token = Path(tmp) / "id-token"
            id_token.write_text(str(context.get("idp_id_token", "")))
            id_token.chmod(0o600)
            login = ["login", "s", "--config", str(config), "--subject", PERSON, "--id-token-file", str(id_token)]
            code = step([*login, "--timeout", "30", "--json"], env).returncode
            if code != 0 or scenario not in TASK_AFTER_HANDOVER:
                return code
            # As a worker runs it: a task for the person, whose worker reads the ID token from the store.
            address = os.environ.get("CONFORMANCE_TEMPORAL_ADDRESS", "")
            wid = workflow_id(scenario)
            tool = TASK_AFTER_HANDOVER[scenario]
            run_args = ["run", tool, *target, "--args", "{}", "--id", wid, "--json", "--address", address]
            return step([*run_args, "--principal", PERSON], env).returncode
        if scenario.startswith("auth/") and scenario not in SERVICE_AUTH:
            from cryptography.fernet import Fernet

            env["MCP_TASKS_TOKEN_KEY"] = Fernet.generate_key().decode()
            login = ["login", "s", "--config", str(config), "--subject", PERSON, "--no-browser", "--timeout", "30"]
            code = consented([*login, "--json"], env)
            if code != 0 or scenario not in TASK_AFTER_LOGIN:
                return code
            return stepped_up(TASK_AFTER_LOGIN[scenario], target, scenario, env)
        if scenario.startswith("auth/"):
            return step(["tools", *target, "--json"], env).returncode
        refused: list[str] = []
        tool = TOOL_OF.get(scenario)
        if tool is not None:
            calls = [(tool, ARGUMENTS.get(tool, {}))]
        else:
            listed = step(["tools", *target, "--json"], env)
            if listed.returncode != 0 or scenario in LIST_ONLY:
                return listed.returncode
            tools = [t for t in json.loads(listed.stdout).get("tools", []) if isinstance(t, dict)]
            calls = calls_for(scenario, tools, context)
            refused = [t["name"] for t in tools if str(t.get("runs_as", "")).startswith("refused")]
            if not calls:
                sys.stderr.write("the scenario server lists no tool: listing it was the whole exchange\n")
                return 0
        address = os.environ.get("CONFORMANCE_TEMPORAL_ADDRESS")
        if not address:
            sys.stderr.write("CONFORMANCE_TEMPORAL_ADDRESS is not set (host:port of a running Temporal)\n")
            return 2
        worst = 0
        for name, arguments in calls:
            worst = max(worst, run(scenario, name, arguments, target, env, address))
        if refused:
            # The invalid-header gate as a user meets it: `run` of an excluded tool ends rejected, never sent.
            gated = run(scenario, refused[0], {}, target, env, address, expect_refusal=True)
            worst = max(worst, gated)
        return worst


def run(
    scenario: str,
    tool: str,
    arguments: dict[str, Any],
    target: list[str],
    env: dict[str, str],
    address: str,
    *,
    expect_refusal: bool = False,
) -> int:
    """``mcp-tasks run`` of one tool (answered as a person would where the scenario asks a question); its exit code,
    or with ``expect_refusal`` 0 exactly when it ended rejected with ``tools/call`` never sent."""
    # A fresh workflow id per run: the default one is derived from the request, so a second run of a scenario
    # would (rightly) show the first one's stored outcome instead of calling the tool.
    wid = workflow_id(scenario)
    args = ["run", tool, *target, "--args", json.dumps(arguments), "--id", wid, "--json", "--address", address]
    if scenario in ANSWERS and (tool in MRTR_ASKING or not tool.startswith("test_mrtr_")):
        meanwhile = None
        if tool == MRTR_ASKING[0]:
            meanwhile = functools.partial(run, scenario, MRTR_MEANWHILE, {}, target, env, address)
        return answered(args, env, wid, address, ANSWERS[scenario], meanwhile)
    proc = step(args, env)
    if not expect_refusal:
        return proc.returncode
    try:
        outcome = json.loads(proc.stdout)
    except ValueError:
        return 1
    never_sent = outcome.get("outcome") == "rejected" and not outcome.get("operation_attempts")
    return 0 if never_sent else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
