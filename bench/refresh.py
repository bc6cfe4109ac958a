"""Acting for users under load: subjects' rotating grants refreshed once across two worker processes (issue 55).

``python -m bench --only refresh`` (about 4 minutes): a real authorization server we did not write (oidc-provider,
``tests/peers/ts/oauth_user.mjs``: refresh-token rotation on, reuse detection revoking the grant, access tokens of
``--refresh-ttl`` seconds, 20 by default) in front of a real MCP server that checks every token by introspection at
that authorization server and echoes its subject (the TypeScript SDK's server, ``tests/peers/ts/server.mjs``, tool
``whoami``). Each of ``--refresh-subjects`` subjects consents once (a task waits for it, the person follows the URL,
the callback hands the answer to that task: ``worker.consent.complete_consent``); then ``--refresh-tasks`` tasks
(subject ``i mod N``, each working
``--refresh-work`` seconds at the server, spread from 2 s to 4 × the token lifetime, so that polls span refreshes) are
started at an even pace over ``--refresh-window`` seconds on two ``mcp-tasks worker`` processes sharing one token store,
and every outcome awaited.

Figures (the authorization server's own log, ``OAUTH_LOG``, never a token): results that name their own subject;
the most refreshes of one grant within one token lifetime (for every token issued at ``t``, the grant's refreshes in
``(t, t + ttl)``); ``invalid_grant`` answers; refresh tokens presented twice (one digest on two requests); refreshes
per grant; which worker process sent each task's ``tools/call`` and read its end (its history); the MCP server's
``tools/call`` count and refusals (401).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from .common import REPO, log

TS_DIR = REPO / "tests" / "peers" / "ts"
CLIENT = "mcp-tasks-bench"
REDIRECT = "http://127.0.0.1:9/callback"  # never reached: the person stops at the redirect to it
RESOURCE_SERVER = {"client_id": "mcp-rs", "client_secret": "bench-introspection-secret"}


class Proc:
    """A child whose readiness is a line containing ``ready`` on its stderr (or stdout), drained to a log file for
    the rest of its life; its ready line is kept."""

    def __init__(self, argv: list[str], *, ready: str, env: dict[str, str], out: Path, cwd: Path = REPO) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO), **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.ready_line = ""
        got = threading.Event()

        def drain() -> None:
            assert self.proc.stdout is not None
            with out.open("a") as fh:
                for line in self.proc.stdout:
                    fh.write(line)
                    fh.flush()
                    if not self.ready_line and ready in line:
                        self.ready_line = line.strip()
                        got.set()
            got.set()

        threading.Thread(target=drain, daemon=True).start()
        got.wait(90)
        if not self.ready_line:
            self.stop()
            raise RuntimeError(f"{argv[:4]} did not become ready: see {out}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


async def person(url: str, subject: str) -> str:
    """A browser whose person signs in as ``subject`` and consents (oidc-provider's interaction answers at once for
    ``login_hint``): redirects followed until the one to the client's redirect URI, which is returned."""
    import httpx2

    async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as browser:
        at = f"{url}&login_hint={subject}"
        for _ in range(10):
            answer = await browser.get(at)
            location = answer.headers.get("location") or ""
            if location.startswith(REDIRECT):
                return location
            if answer.status_code not in (302, 303) or not location:
                raise RuntimeError(f"consent for {subject}: {answer.status_code} {answer.text[:300]}")
            at = str(answer.url.join(location))
    raise RuntimeError("no redirect back to the client within 10 hops")


def most_refreshes_per_lifetime(entries: list[dict[str, Any]], ttl_s: float) -> tuple[int, dict[str, int]]:
    """(the most refreshes of one grant within one token lifetime, refreshes per grant): for every token the grant
    was issued at ``t`` (consent or refresh), its refreshes in ``(t, t + ttl)``."""
    issued: dict[str, list[float]] = defaultdict(list)
    refreshed: dict[str, list[float]] = defaultdict(list)
    for e in entries:
        if not e.get("ok") or not e.get("grant"):
            continue
        issued[e["grant"]].append(e["ts"] / 1000)
        if e.get("grant_type") == "refresh_token":
            refreshed[e["grant"]].append(e["ts"] / 1000)
    most = 0
    for grant, times in issued.items():
        for t in times:
            most = max(most, sum(1 for r in refreshed[grant] if t < r < t + ttl_s))
    return most, {g: len(r) for g, r in refreshed.items()}


async def phase_refresh(env: Any, args: Any) -> dict[str, Any]:
    from cryptography.fernet import Fernet

    from mcp_temporal_tasks.activities.activity_io import AUTHORIZATION_MEMO
    from mcp_temporal_tasks.activities.wire.auth.token_store import TokenStore
    from mcp_temporal_tasks.worker.consent import complete_consent
    from mcp_temporal_tasks.workflows.client import outcome_of, start_mcp_task
    from mcp_temporal_tasks.workflows.records import McpTaskRequest

    ttl, subjects, n = int(args.refresh_ttl), int(args.refresh_subjects), int(args.refresh_tasks)
    window, work = float(args.refresh_window), float(args.refresh_work)
    tmp: Path = env.tmp / "refresh"
    tmp.mkdir()
    as_log, peer_log = tmp / "oauth.jsonl", tmp / "peer.jsonl"
    key = Fernet.generate_key().decode()
    store_env = {"MCP_TASKS_TOKEN_KEY": key, "MCP_TASKS_TOKEN_DIR": str(tmp / "store")}
    clients = [
        {"client_id": CLIENT, "redirect_uris": [REDIRECT]},
        {
            **RESOURCE_SERVER,
            "token_endpoint_auth_method": "client_secret_basic",
            "grant_types": [],
            "response_types": [],
            "redirect_uris": [],
        },
    ]
    procs: list[Proc] = []
    try:
        oauth = Proc(
            ["node", str(TS_DIR / "oauth_user.mjs"), "--port", "0"],
            ready="LISTENING",
            env={"OAUTH_CLIENTS": json.dumps(clients), "OAUTH_TOKEN_TTL_S": str(ttl), "OAUTH_LOG": str(as_log)},
            out=tmp / "oauth.out",
            cwd=TS_DIR,
        )
        procs.append(oauth)
        issuer = oauth.ready_line.split()[-1]
        peer = Proc(
            ["node", str(TS_DIR / "server.mjs"), "--transport", "http", "--port", "0", "--stateless"],
            ready="LISTENING",
            env={
                "PEER_LOG": str(peer_log),
                "PEER_AUTH_ISSUER": issuer,
                "PEER_AUTH_CLIENT_ID": RESOURCE_SERVER["client_id"],
                "PEER_AUTH_CLIENT_SECRET": RESOURCE_SERVER["client_secret"],
            },
            out=tmp / "peer.out",
            cwd=TS_DIR,
        )
        procs.append(peer)
        url = peer.ready_line.split()[-1]
        cfg = tmp / "worker.toml"
        cfg.write_text(
            f'[servers.s]\nurl = "{url}"\n'
            f'auth = {{ type = "authorization_code", client_id = "{CLIENT}", redirect_uri = "{REDIRECT}" }}\n'
        )
        queue = f"bench-refresh-{env.run_id}"
        workers = []
        for i in range(2):
            argv = [sys.executable, "-m", "mcp_temporal_tasks.worker.cli", "worker", "--address", env.dev.address]
            argv += ["--task-queue", queue, "--config", str(cfg), "--plain-logs"]
            workers.append(
                Proc(
                    argv, ready="ready: polling task queue", env={**store_env, **env.child_env()}, out=tmp / f"w{i}.out"
                )
            )
        procs.extend(workers)
        log(f"refresh: AS {issuer} (tokens {ttl}s), MCP server {url}, workers {[w.pid for w in workers]}")
        assert env.client is not None
        client = env.client
        store = TokenStore(tmp / "store", key)

        def request(subject: str, seconds: float) -> Any:
            return McpTaskRequest(server="s", tool="whoami", arguments={"seconds": seconds}, principal=subject)

        # Consent, once per subject: the task waits for it and says where (its memo, as the UI shows it); the person
        # goes there; the callback hands the answer to the same task, which exchanges the code and completes.
        names = [f"user-{i:02d}" for i in range(subjects)]
        for subject in names:
            handle = await start_mcp_task(
                client, request(subject, 0), workflow_id=f"consent-{subject}-{env.run_id}", task_queue=queue
            )
            url = None
            for _ in range(600):  # 60 s
                asked = (await (await handle.describe()).memo()).get(AUTHORIZATION_MEMO)
                url = asked.get("url") if isinstance(asked, dict) else None
                if url:
                    break
                await asyncio.sleep(0.1)
            if not url:
                raise RuntimeError(f"{subject}: the task did not wait for a consent within 60 s")
            await complete_consent(await person(url, subject), client, store=store)
            out = await asyncio.wait_for(outcome_of(handle), 120)
            if out.outcome.value != "completed":
                raise RuntimeError(f"{subject}: the consenting task ended {out.outcome.value}: {out.reason}")
        consents = len(read_jsonl(as_log))
        log(f"refresh: {subjects} subjects consented ({consents} token answers); {n} tasks over {window:g}s")

        # The load: n tasks at an even pace over the window, each working a while at the server.
        rng = random.Random(55)
        t0 = time.monotonic()
        handles: list[tuple[str, Any]] = []
        for i in range(n):
            await asyncio.sleep(max(0.0, t0 + i * window / n - time.monotonic()))
            subject = names[i % subjects]
            seconds = round(rng.uniform(2.0, work), 1)
            handle = await start_mcp_task(
                client, request(subject, seconds), workflow_id=f"whoami-{i:03d}-{env.run_id}", task_queue=queue
            )
            handles.append((subject, handle))
        outs = await asyncio.wait_for(asyncio.gather(*(outcome_of(h) for _, h in handles)), window + 600)
        elapsed = time.monotonic() - t0

        own = sum(
            1
            for (subject, _), out in zip(handles, outs, strict=True)
            if out.outcome.value == "completed" and (out.result or {}).get("structuredContent") == {"subject": subject}
        )
        outcomes = Counter(out.outcome.value for out in outs)
        # Which worker process sent each task's tools/call (its first activity) and which read its end (its last).
        submitted: Counter[str] = Counter()
        ended: Counter[str] = Counter()
        for _, h in handles:
            started = [
                event.activity_task_started_event_attributes.identity.split("@")[0]
                async for event in h.fetch_history_events()
                if event.HasField("activity_task_started_event_attributes")
            ]
            if started:
                submitted[started[0]] += 1
                ended[started[-1]] += 1
        entries = [e for e in read_jsonl(as_log) if "event" not in e]
        refreshes = [e for e in entries if e.get("grant_type") == "refresh_token"]
        most, per_grant = most_refreshes_per_lifetime(entries, ttl)
        digests = Counter(e["rt"] for e in refreshes if e.get("rt"))
        peer_lines = read_jsonl(peer_log)
        return {
            "tasks": n,
            "subjects": subjects,
            "token_ttl_s": ttl,
            "window_s": window,
            "elapsed_s": round(elapsed, 1),
            "own_subject": own,
            "outcomes": dict(outcomes),
            "most_refreshes_per_grant_per_lifetime": most,
            "invalid_grant": sum(1 for e in entries if e.get("error") == "invalid_grant"),
            "token_errors": sum(1 for e in entries if not e.get("ok")),
            "refresh_tokens_used_twice": sum(1 for c in digests.values() if c > 1),
            "refreshes": len(refreshes),
            "refreshes_per_grant": sorted(per_grant.values()),
            "authorization_codes": sum(1 for e in entries if e.get("grant_type") == "authorization_code"),
            "grants_revoked": sum(1 for e in read_jsonl(as_log) if e.get("event") == "grant.revoked"),
            "tools_call_sent_by_worker": dict(submitted),
            "end_read_by_worker": dict(ended),
            "tools_call": sum(1 for e in peer_lines if e.get("method") == "tools/call" and e.get("tool") == "whoami"),
            "refused_401": sum(1 for e in peer_lines if e.get("denied") == 401),
        }
    finally:
        for p in reversed(procs):
            with contextlib.suppress(Exception):
                p.stop()


def render_refresh(res: dict[str, Any]) -> list[str]:
    r = res.get("refresh")
    if not r:
        return []
    n = r["tasks"]
    return [
        "",
        f"### Acting for users: {n} tasks, {r['subjects']} subjects, 2 worker processes, {r['window_s']:g} s "
        f"(tokens of {r['token_ttl_s']} s, rotation on)",
        "",
        "| figure | value | want |",
        "|---|---|---|",
        f"| results that name their own subject | {r['own_subject']}/{n} | {n}/{n} |",
        f"| most refreshes of one grant within one token lifetime | {r['most_refreshes_per_grant_per_lifetime']} "
        "| ≤ 1 |",
        f"| `invalid_grant` answers (AS log) | {r['invalid_grant']} | 0 |",
        f"| refresh tokens used twice (AS log) | {r['refresh_tokens_used_twice']} | 0 |",
        f"| token-endpoint errors of any kind / grants revoked | {r['token_errors']} / {r['grants_revoked']} | 0 / 0 |",
        f"| refreshes (per grant) | {r['refreshes']} ({r['refreshes_per_grant']}) | |",
        f"| consents (authorization codes) | {r['authorization_codes']} | {r['subjects']} |",
        f"| outcomes | {r['outcomes']} | completed: {n} |",
        f"| tasks whose tools/call each worker process sent (pid: n) | {r['tools_call_sent_by_worker']} | both |",
        f"| tasks whose end each worker process read (pid: n) | {r['end_read_by_worker']} | both |",
        f"| tools/call at the server / refused 401 | {r['tools_call']} / {r['refused_401']} | {n} + consent asks |",
        f"| wall time from the first start to the last outcome | {r['elapsed_s']} s | |",
    ]
