"""Real MCP peers as subprocesses, for the wire-layer tests.

* TypeScript SDK 1.32.2 task runtime (2025-11-25): ``tests/peers/ts/server.mjs``, over stdio, stateful
  streamable HTTP and stateless streamable HTTP;
* fastmcp 4.1.4 tasks extension (2026-07-28): ``python -m mcp_temporal_tasks.demo.server``; the same server
  with the official SDK's own server span per request written to a ``PEER_SPANS`` file:
  ``python -m tests.peers.fastmcp_otel`` (:func:`fastmcp_otel_peer`, read with :meth:`Peer.spans`);
* official Python SDK ``mcp==1.30.0`` experimental tasks (2025-11-25): ``tests/peers/py1/server.py``, over
  stateful streamable HTTP, run by its own venv ``tests/peers/py1/.venv`` (the project pins mcp 2.x).
* official Python SDK ``mcp==1.12.4`` FastMCP, protocol 2025-06-18, no tasks: ``tests/peers/py0618/server.py``, over
  stateful streamable HTTP, in its own venv ``tests/peers/py0618/.venv`` (needs pydantic < 2.12).

Every peer gets a fresh ``PEER_LOG`` file (one JSON line per incoming JSON-RPC request) that tests read
with :meth:`Peer.log` / :func:`read_peer_log`. HTTP peers bind 127.0.0.1 on a free port (``--port 0``;
the peer prints the port it got on its ``LISTENING`` line) and are killed when the context ends.

The TS stdio peer is not started here: the wire layer spawns it itself from an :class:`Endpoint`. The
endpoint's ``env_refs`` maps the child's ``PEER_LOG`` to a variable of *this* process
(``env_refs`` names worker environment variables, never values), which :func:`ts_stdio_peer` sets.

A missing ``node`` or a missing ``tests/peers/ts/node_modules`` is a test *failure* with the fix in the
message, never a skip: these peers are the only evidence that the client speaks real servers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mcp_temporal_tasks.activities.wire import Endpoint

REPO_ROOT = Path(__file__).resolve().parents[2]
TS_DIR = REPO_ROOT / "tests" / "peers" / "ts"
TS_SERVER = TS_DIR / "server.mjs"
PY1_DIR = REPO_ROOT / "tests" / "peers" / "py1"
PY1_SERVER = PY1_DIR / "server.py"
PY1_PYTHON = PY1_DIR / ".venv" / "bin" / "python"
PY0618_DIR = REPO_ROOT / "tests" / "peers" / "py0618"
PY0618_PYTHON = PY0618_DIR / ".venv" / "bin" / "python"
START_TIMEOUT_S = 30.0


def require_ts_peer() -> str:
    """Path of ``node``; fails the test (never skips) when the TS peer cannot run."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node (>= 20) is not on PATH: the TS peer cannot run. Install Node 20+, then run npm ci in tests/peers/ts",
            pytrace=False,
        )
    if not (TS_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        pytest.fail(f"{TS_DIR}/node_modules is missing: run npm ci in tests/peers/ts", pytrace=False)
    return node


def require_py1_peer() -> Path:
    """Python of the mcp 1.30.0 peer venv; fails the test (never skips) when that venv is missing."""
    fix = (
        f"create it: python3 -m venv {PY1_DIR}/.venv && {PY1_DIR}/.venv/bin/pip install -r "
        f"{PY1_DIR}/requirements.txt (scripts/test.sh does this)"
    )
    if not PY1_PYTHON.exists():
        pytest.fail(f"{PY1_PYTHON} is missing: the mcp 1.30.0 peer cannot run; {fix}", pytrace=False)
    probe = subprocess.run(
        [str(PY1_PYTHON), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "1.30.0":
        pytest.fail(
            f"{PY1_PYTHON} does not have mcp==1.30.0 (got {probe.stdout.strip() or probe.stderr.strip()!r}); {fix}",
            pytrace=False,
        )
    return PY1_PYTHON


def require_py0618_peer() -> Path:
    """Python of the mcp 1.12.4 (protocol 2025-06-18) peer venv; fails the test (never skips) when it is missing."""
    fix = (
        f"create it: python3 -m venv {PY0618_DIR}/.venv && {PY0618_DIR}/.venv/bin/pip install -r "
        f"{PY0618_DIR}/requirements.txt (scripts/test.sh does this)"
    )
    if not PY0618_PYTHON.exists():
        pytest.fail(f"{PY0618_PYTHON} is missing: the mcp 1.12.4 peer cannot run; {fix}", pytrace=False)
    return PY0618_PYTHON


def read_peer_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every line of a PEER_LOG file as a dict (an absent file is an empty log)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclass
class Peer:
    """A running peer. ``endpoint`` is what the wire layer connects to."""

    name: str
    endpoint: Endpoint
    log_path: Path
    #: ``"legacy"`` (TS) or ``"extension"`` (fastmcp).
    flavour: str
    transport: str  # "stdio" | "http"
    stateful: bool = True
    proc: subprocess.Popen[bytes] | None = None
    stderr_lines: list[str] = field(default_factory=list)
    #: ``PEER_SPANS`` file (one JSON line per finished server span), for peers that export spans.
    spans_path: Path | None = None

    @property
    def url(self) -> str | None:
        return self.endpoint.url

    def _requests(self) -> list[dict[str, Any]]:
        return [line for line in read_peer_log(self.log_path) if "event" not in line]

    def log(self, **match: Any) -> list[dict[str, Any]]:
        """PEER_LOG request lines, optionally only those whose fields equal ``match`` (events: :meth:`events`)."""
        return [line for line in self._requests() if all(line.get(k) == v for k, v in match.items())]

    def log_mark(self) -> int:
        return len(self._requests())

    def log_since(self, mark: int) -> list[dict[str, Any]]:
        return self._requests()[mark:]

    def events(self, **match: Any) -> list[dict[str, Any]]:
        """What the server recorded of its own doing (``{"event": ...}`` lines: a task's end, a GET stream asked
        for...), optionally only those whose fields equal ``match``."""
        return [
            line
            for line in read_peer_log(self.log_path)
            if "event" in line and all(line.get(k) == v for k, v in match.items())
        ]

    def spans(self) -> list[dict[str, Any]]:
        """The server's finished spans so far (``PEER_SPANS`` lines); empty for a peer that exports none."""
        return read_peer_log(self.spans_path) if self.spans_path is not None else []

    def __repr__(self) -> str:  # shows up in parametrized test ids and failure messages
        return f"Peer({self.name})"


def _fresh_log(directory: Path, name: str) -> Path:
    path = directory / f"{name}.jsonl"
    path.write_text("")
    return path


@contextlib.contextmanager
def _http_peer(
    cmd: list[str],
    *,
    name: str,
    log_path: Path,
    flavour: str,
    stateful: bool,
    cwd: Path,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Peer]:
    env = {**os.environ, "PEER_LOG": str(log_path), **(extra_env or {})}
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    lines: list[str] = []
    listening: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        # Keeps reading stderr for the peer's whole life so a chatty peer never blocks on a full pipe.
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            if line.startswith("LISTENING ") and not listening:
                listening.append(line.split(" ", 1)[1].strip())
                ready.set()
        ready.set()

    thread = threading.Thread(target=drain, name=f"peer-stderr-{name}", daemon=True)
    thread.start()
    try:
        ready.wait(START_TIMEOUT_S)
        if not listening:
            proc.kill()
            proc.wait(5)
            pytest.fail(
                f"peer {name} did not print LISTENING within {START_TIMEOUT_S}s "
                f"(exit {proc.poll()}); stderr:\n" + "\n".join(lines[-40:]),
                pytrace=False,
            )
        url = listening[0]
        assert url.startswith("http://127.0.0.1:"), url
        yield Peer(
            name=name,
            endpoint=Endpoint(url=url),
            log_path=log_path,
            flavour=flavour,
            transport="http",
            stateful=stateful,
            proc=proc,
            stderr_lines=lines,
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        thread.join(5)


@contextlib.contextmanager
def ts_http_peer(
    log_dir: Path,
    *,
    stateless: bool = False,
    poll_ms: int | None = None,
    auth: dict[str, str] | None = None,
    name: str | None = None,
    notify: bool = True,
    retry_ms: int | None = None,
) -> Iterator[Peer]:
    """TS peer over streamable HTTP (stateful, or ``stateless``).

    ``auth``: ``{"issuer", "client_id", "client_secret"}`` makes it a protected resource of that authorization
    server (:func:`oauth_server`), checking tokens by introspection as that client. ``notify=False``: its task
    tools send no ``notifications/tasks/status`` (``PEER_NOTIFY=0``). ``retry_ms``: resumable streams (an event
    store; priming events carry that ``retry``; ``PEER_RETRY_MS``)."""
    node = require_ts_peer()
    name = name or ("ts-http-stateless" if stateless else "ts-http-stateful")
    cmd = [node, str(TS_SERVER), "--transport", "http", "--port", "0"] + (["--stateless"] if stateless else [])
    extra = {"PEER_POLL_MS": str(poll_ms)} if poll_ms is not None else {}
    if not notify:
        extra["PEER_NOTIFY"] = "0"
    if retry_ms is not None:
        extra["PEER_RETRY_MS"] = str(retry_ms)
    if auth is not None:
        extra.update(
            PEER_AUTH_ISSUER=auth["issuer"],
            PEER_AUTH_CLIENT_ID=auth["client_id"],
            PEER_AUTH_CLIENT_SECRET=auth["client_secret"],
        )
    with _http_peer(
        cmd,
        name=name,
        log_path=_fresh_log(log_dir, name),
        flavour="legacy",
        stateful=not stateless,
        cwd=TS_DIR,
        extra_env=extra,
    ) as peer:
        yield peer


@contextlib.contextmanager
def oauth_server(
    log_dir: Path, *, clients: list[dict[str, Any]], token_ttl_s: int = 600, name: str = "oauth"
) -> Iterator[Peer]:
    """A real authorization server (oidc-provider, ``tests/peers/ts/oauth.mjs``) with these registered clients.

    ``Peer.url`` is its issuer; ``Peer.log()`` has one line per issued token (``client``, ``ttl``)."""
    with _oidc_provider("oauth.mjs", log_dir, clients=clients, token_ttl_s=token_ttl_s, name=name) as peer:
        yield peer


async def consent_as(url: str, subject: str, back_to: str) -> str:
    """A browser whose person signs in at oidc-provider (``oauth_user.mjs``: ``login_hint`` signs in and consents at
    once) as ``subject``: redirects followed, with cookies, until the one to ``back_to`` (the client's redirect URI),
    which is returned and not followed."""
    import httpx2

    async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as browser:
        at = f"{url}&login_hint={subject}"
        for _ in range(10):
            answer = await browser.get(at)
            location = answer.headers.get("location")
            assert answer.status_code in (302, 303) and location, (answer.status_code, answer.text[:300])
            if location.startswith(back_to):
                return location
            at = str(answer.url.join(location))
    raise AssertionError("no redirect back to the client within 10 hops")


@contextlib.contextmanager
def oauth_user_server(
    log_dir: Path,
    *,
    clients: list[dict[str, Any]],
    token_ttl_s: int = 20,
    name: str = "oauth-user",
    issued: Path | None = None,
) -> Iterator[Peer]:
    """A real authorization server for a subject's authorization-code grant (oidc-provider,
    ``tests/peers/ts/oauth_user.mjs``): refresh-token rotation, consent given at once for ``login_hint``,
    introspection for a confidential client among ``clients``.

    ``Peer.url`` is its issuer; ``Peer.log()`` has one line per token-endpoint outcome (``grant_type``, ``ok``,
    ``error``, ``grant``, ``rt``: a digest of the refresh token presented), ``Peer.events()`` oidc-provider's own
    ``refresh_token.consumed`` and ``grant.revoked``. ``issued``: a file that receives every token handed out, in
    clear (``OAUTH_ISSUED``), for tests that search for them."""
    extra = {"OAUTH_ISSUED": str(issued)} if issued is not None else None
    with _oidc_provider(
        "oauth_user.mjs", log_dir, clients=clients, token_ttl_s=token_ttl_s, name=name, extra_env=extra
    ) as peer:
        yield peer


@contextlib.contextmanager
def _oidc_provider(
    script: str,
    log_dir: Path,
    *,
    clients: list[dict[str, Any]],
    token_ttl_s: int,
    name: str,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Peer]:
    """``tests/peers/ts/SCRIPT`` on oidc-provider: its clients, token lifetime and log passed by environment."""
    node = require_ts_peer()
    if not (TS_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail(f"{TS_DIR}/node_modules/oidc-provider is missing: run npm ci in tests/peers/ts", pytrace=False)
    log_path = _fresh_log(log_dir, name)
    extra = {
        "OAUTH_CLIENTS": json.dumps(clients),
        "OAUTH_TOKEN_TTL_S": str(token_ttl_s),
        "OAUTH_LOG": str(log_path),
        **(extra_env or {}),
    }
    with _http_peer(
        [node, str(TS_DIR / script), "--port", "0"],
        name=name,
        log_path=log_path,
        flavour="oauth",
        stateful=False,
        cwd=TS_DIR,
        extra_env=extra,
    ) as peer:
        yield peer


@contextlib.contextmanager
def ts_stdio_peer(
    log_dir: Path, *, env_var: str = "MCP_TEST_PEER_LOG_TS_STDIO", child_env: dict[str, str] | None = None
) -> Iterator[Peer]:
    """TS peer over stdio: an Endpoint only; each client that connects spawns its own child.

    All children of this endpoint append to the same PEER_LOG (each line carries its ``pid``). ``child_env``
    (``PEER_POLL_MS``, ``PEER_NOTIFY``...) reaches the child the way any value does: the endpoint's ``env_refs`` name
    variables of this process, ``<env_var>_<NAME>``, set here for the context's duration.
    """
    node = require_ts_peer()
    log_path = _fresh_log(log_dir, "ts-stdio")
    values = {env_var: str(log_path), **{f"{env_var}_{k}": v for k, v in (child_env or {}).items()}}
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        refs = {"PEER_LOG": env_var, **{k: f"{env_var}_{k}" for k in (child_env or {})}}
        endpoint = Endpoint(command=[node, str(TS_SERVER), "--transport", "stdio"], env_refs=refs)
        yield Peer(
            name="ts-stdio", endpoint=endpoint, log_path=log_path, flavour="legacy", transport="stdio", stateful=True
        )
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: Docket (fastmcp's task queue) waits this long per idle read of its stream, 50 ms by default: a new task still
#: wakes it at once (a blocking read), but an idle fastmcp peer then costs 1.3 % of a core instead of 2.7 %. The suite
#: keeps about eight of them up for its whole run on 2 cores.
FASTMCP_IDLE = {"FASTMCP_DOCKET_MINIMUM_CHECK_INTERVAL": "PT0.5S"}


def fastmcp_env() -> dict[str, str]:
    """The environment a fastmcp peer adds: this checkout on its path, and :data:`FASTMCP_IDLE`."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])), **FASTMCP_IDLE}


@contextlib.contextmanager
def fastmcp_peer(
    log_dir: Path, *, task_ttl_ms: int | None = None, poll_interval_ms: int = 100, name: str | None = None
) -> Iterator[Peer]:
    """The fastmcp 2026-07-28 tasks-extension demo server over streamable HTTP."""
    name = name or ("fastmcp" if task_ttl_ms is None else f"fastmcp-ttl{task_ttl_ms}")
    cmd = [
        sys.executable,
        "-m",
        "mcp_temporal_tasks.demo.server",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--poll-interval-ms",
        str(poll_interval_ms),
    ]
    if task_ttl_ms is not None:
        cmd += ["--task-ttl-ms", str(task_ttl_ms)]
    extra = fastmcp_env()
    with _http_peer(
        cmd,
        name=name,
        log_path=_fresh_log(log_dir, name),
        flavour="extension",
        stateful=False,
        cwd=REPO_ROOT,
        extra_env=extra,
    ) as peer:
        yield peer


@contextlib.contextmanager
def fastmcp_otel_peer(log_dir: Path, *, poll_interval_ms: int = 100, name: str = "otel-fastmcp") -> Iterator[Peer]:
    """The fastmcp demo server with mcp 2.3.0's ``OpenTelemetryMiddleware`` put back (fastmcp removes it) and an
    OpenTelemetry SDK provider exporting every finished span to ``Peer.spans_path`` (``tests/peers/fastmcp_otel.py``).
    Named apart from ``fastmcp*``: its log (the demo server's) records no ``Mcp-Name`` header, which the checks over
    every fastmcp peer log (tests/test_wire_extension.py) read."""
    cmd = [
        sys.executable,
        "-m",
        "tests.peers.fastmcp_otel",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--poll-interval-ms",
        str(poll_interval_ms),
    ]
    spans_path = _fresh_log(log_dir, f"{name}.spans")
    extra = {**fastmcp_env(), "PEER_SPANS": str(spans_path)}
    with _http_peer(
        cmd,
        name=name,
        log_path=_fresh_log(log_dir, name),
        flavour="extension",
        stateful=False,
        cwd=REPO_ROOT,
        extra_env=extra,
    ) as peer:
        peer.spans_path = spans_path
        yield peer


@contextlib.contextmanager
def py1_http_peer(
    log_dir: Path, *, poll_ms: int | None = None, name: str = "py1-http", notify: bool = True
) -> Iterator[Peer]:
    """The official Python SDK 1.30.0 task server (2025-11-25) over stateful streamable HTTP (``notify=False``:
    ``slow_echo`` sends no ``notifications/tasks/status``, ``PEER_NOTIFY=0``)."""
    python = require_py1_peer()
    extra = {"PEER_POLL_MS": str(poll_ms)} if poll_ms is not None else {}
    if not notify:
        extra["PEER_NOTIFY"] = "0"
    with _http_peer(
        [str(python), str(PY1_SERVER), "--port", "0"],
        name=name,
        log_path=_fresh_log(log_dir, name),
        flavour="legacy",
        stateful=True,
        cwd=PY1_DIR,
        extra_env=extra,
    ) as peer:
        yield peer


@contextlib.contextmanager
def py0618_http_peer(log_dir: Path, *, name: str = "py0618-http") -> Iterator[Peer]:
    """The official Python SDK 1.12.4 FastMCP server (protocol 2025-06-18, no tasks) over stateful streamable HTTP."""
    python = require_py0618_peer()
    with _http_peer(
        [str(python), str(PY0618_DIR / "server.py"), "--port", "0"],
        name=name,
        log_path=_fresh_log(log_dir, name),
        flavour="2025-06-18",
        stateful=True,
        cwd=PY0618_DIR,
    ) as peer:
        yield peer


@contextlib.contextmanager
def mcp2_http_peer(log_dir: Path, *, name: str = "mcp2-http") -> Iterator[Peer]:
    """The official Python SDK's newest line, ``mcp`` 2.3 ``MCPServer`` (2026-07-28, MRTR), over streamable HTTP
    (``tests/peers/mcp2_server.py``; the project venv's own ``mcp``)."""
    with _http_peer(
        [sys.executable, "-m", "tests.peers.mcp2_server", "--port", "0"],
        name=name,
        log_path=_fresh_log(log_dir, name),
        flavour="2026-07-28",
        stateful=False,
        cwd=REPO_ROOT,
    ) as peer:
        yield peer


@contextlib.contextmanager
def peer_log_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mcp-peer-logs-") as tmp:
        yield Path(tmp)


def wait_until(predicate: Any, *, timeout_s: float = 10.0, interval_s: float = 0.05) -> Any:
    """Poll a synchronous predicate until it returns something truthy (returned) or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)


async def poll_until_terminal(
    client: Any, task_id: str, *, timeout_s: float = 15.0, stop_on_input: bool = False
) -> Any:
    """``tasks/get`` until the task is terminal (or ``input_required`` if ``stop_on_input``), honouring the
    server's ``pollInterval``. Returns the last :class:`TaskState`; fails the test on timeout."""
    import asyncio

    deadline = time.monotonic() + timeout_s
    while True:
        state = await client.get(task_id)
        if state.terminal or (stop_on_input and state.status == "input_required"):
            return state
        if time.monotonic() > deadline:
            pytest.fail(f"task {task_id} still {state.status!r} after {timeout_s}s")
        await asyncio.sleep(max(0.05, (state.poll_interval_ms or 100) / 1000))


def stdio_child_pid(peer: Peer, mark: int) -> int:
    """The pid of the stdio child that connected since ``mark`` (the TS peer logs its pid on every line)."""
    pids = {line["pid"] for line in peer.log_since(mark) if line.get("method") == "initialize"}
    assert len(pids) == 1, f"expected exactly one new stdio child since mark {mark}, got pids {pids}"
    return pids.pop()


# --- pytest fixtures (re-exported by tests/conftest.py) ------------------------------------------


@pytest.fixture(scope="session")
def peer_logs() -> Iterator[Path]:
    with peer_log_dir() as path:
        yield path


@pytest.fixture(scope="session")
def ts_stdio(peer_logs: Path) -> Iterator[Peer]:
    with ts_stdio_peer(peer_logs) as peer:
        yield peer


@pytest.fixture(scope="session")
def ts_http_stateful(peer_logs: Path) -> Iterator[Peer]:
    with ts_http_peer(peer_logs) as peer:
        yield peer


@pytest.fixture(scope="session")
def ts_http_stateless(peer_logs: Path) -> Iterator[Peer]:
    with ts_http_peer(peer_logs, stateless=True) as peer:
        yield peer


@pytest.fixture(scope="session", params=["ts-stdio", "ts-http-stateful", "ts-http-stateless"])
def ts_peer(request: pytest.FixtureRequest) -> Peer:
    """The TS peer on each of its three transports."""
    fixture = {
        "ts-stdio": "ts_stdio",
        "ts-http-stateful": "ts_http_stateful",
        "ts-http-stateless": "ts_http_stateless",
    }[request.param]
    return request.getfixturevalue(fixture)


@pytest.fixture(scope="session")
def fastmcp_server(peer_logs: Path) -> Iterator[Peer]:
    with fastmcp_peer(peer_logs) as peer:
        yield peer


@pytest.fixture(scope="session")
def fastmcp_json(peer_logs: Path) -> Iterator[Peer]:
    """fastmcp answering POSTs with plain JSON bodies (``--json-response``), as the bench server does."""
    cmd = [
        sys.executable,
        "-m",
        "mcp_temporal_tasks.demo.server",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--poll-interval-ms",
        "100",
        "--json-response",
    ]
    extra = fastmcp_env()
    with _http_peer(
        cmd,
        name="fastmcp-json",
        log_path=_fresh_log(peer_logs, "fastmcp-json"),
        flavour="extension",
        stateful=False,
        cwd=REPO_ROOT,
        extra_env=extra,
    ) as peer:
        yield peer


@pytest.fixture(scope="session")
def fastmcp_short_ttl(peer_logs: Path) -> Iterator[Peer]:
    """fastmcp with ``--task-ttl-ms 1000``: tasks are purged about a second after they end."""
    with fastmcp_peer(peer_logs, task_ttl_ms=1000) as peer:
        yield peer


@pytest.fixture(scope="session")
def py1_http(peer_logs: Path) -> Iterator[Peer]:
    """The mcp 1.30.0 (official Python SDK) task server over stateful streamable HTTP."""
    with py1_http_peer(peer_logs) as peer:
        yield peer


@pytest.fixture(scope="session")
def py0618_http(peer_logs: Path) -> Iterator[Peer]:
    """The mcp 1.12.4 FastMCP server (protocol 2025-06-18, no tasks) over stateful streamable HTTP."""
    with py0618_http_peer(peer_logs) as peer:
        yield peer


@pytest.fixture(scope="session")
def mcp2_http(peer_logs: Path) -> Iterator[Peer]:
    """The mcp 2.3 MCPServer (2026-07-28, MRTR) over streamable HTTP."""
    with mcp2_http_peer(peer_logs) as peer:
        yield peer


@pytest.fixture(scope="session")
def all_peers(ts_stdio: Peer, ts_http_stateful: Peer, ts_http_stateless: Peer, fastmcp_server: Peer) -> list[Peer]:
    return [ts_stdio, ts_http_stateful, ts_http_stateless, fastmcp_server]


__all__ = [
    "Peer",
    "REPO_ROOT",
    "TS_DIR",
    "TS_SERVER",
    "fastmcp_peer",
    "fastmcp_otel_peer",
    "peer_log_dir",
    "read_peer_log",
    "require_ts_peer",
    "ts_http_peer",
    "ts_stdio_peer",
    "wait_until",
    "poll_until_terminal",
    "stdio_child_pid",
    # fixtures
    "peer_logs",
    "ts_stdio",
    "ts_http_stateful",
    "ts_http_stateless",
    "ts_peer",
    "fastmcp_server",
    "fastmcp_json",
    "fastmcp_short_ttl",
    "all_peers",
    "PY1_DIR",
    "PY1_SERVER",
    "PY1_PYTHON",
    "require_py1_peer",
    "py1_http_peer",
    "py1_http",
    "oauth_server",
    "PY0618_DIR",
    "PY0618_PYTHON",
    "require_py0618_peer",
    "py0618_http_peer",
    "py0618_http",
]
