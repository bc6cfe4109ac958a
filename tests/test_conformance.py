"""The official MCP conformance suite as the outside judge: every client scenario of both lines of
``@modelcontextprotocol/conformance``, 0.1.16 (tests/peers/conformance) and 0.2.0-alpha.12 with the 2026-07-28
revision's scenarios (tests/peers/conformance-next), each pinned with its lockfile and Node 22, installed by
scripts/test.sh with ``npm ci``; run through ``mcp-tasks`` by ``tests/conformance_client.py`` against this xdist
worker's Temporal dev server, each asserted against ONE table: tests/conformance_expectations.toml, a section per line
(``pass``; ``n/a`` with exactly which checks fail; ``pending: ...`` still run and asserted to still fail).
docs/conformance.md shows the same table, generated from it: ``python -m tests.test_conformance`` rewrites it; a test
checks it is current.

One test per scenario and line, so xdist spreads them over its workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.peers.harness import REPO_ROOT

#: Each line of the suite, by the version its folder pins (package.json, package-lock.json).
LINES = {
    "0.1.16": REPO_ROOT / "tests" / "peers" / "conformance",
    "0.2.0-alpha.12": REPO_ROOT / "tests" / "peers" / "conformance-next",
}
TABLE_FILE = REPO_ROOT / "tests" / "conformance_expectations.toml"
DOCS_PAGE = REPO_ROOT / "docs" / "conformance.md"
START, END = "<!-- conformance-table:start -->", "<!-- conformance-table:end -->"
#: The suite's bound on our client command per scenario (it kills the client after it), and ours on the suite.
CLIENT_TIMEOUT_MS = 90_000
SUITE_TIMEOUT_S = 150


def tables() -> dict[str, dict[str, dict[str, Any]]]:
    """Every line's table of scenario rows."""
    with TABLE_FILE.open("rb") as fh:
        return tomllib.load(fh)


def suite_of(line: str) -> Path:
    return LINES[line] / "node_modules" / ".bin" / "conformance"


def suite_env(line: str, **extra: str) -> dict[str, str]:
    node_bin = LINES[line] / "node_modules" / "node" / "bin"
    if not (node_bin / "node").exists() or not suite_of(line).exists():
        pytest.fail(
            f"the conformance suite {line} is not installed: run `npm ci` in {LINES[line]} (scripts/test.sh does)",
            pytrace=False,
        )
    return {
        **os.environ,
        "PATH": f"{node_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        **extra,
    }


def render() -> str:
    """The docs table, from the expectations file."""
    rows = ["| suite | scenario | result | why |", "|---|---|---|---|"]
    for line, table in tables().items():
        for name, row in table.items():
            status = row["status"]
            shown = "passes" if status == "pass" else ("not applicable" if status == "n/a" else status)
            why = row.get("reason", "")
            if row.get("failing"):
                why += f" (failing checks: {', '.join(f'`{c}`' for c in row['failing'])})"
            rows.append(f"| {line} | `{name}` | {shown} | {why} |")
    return "\n".join(rows)


@pytest.mark.parametrize("line", sorted(LINES))
def test_the_table_lists_every_client_scenario_of_the_suite(line: str) -> None:
    package = json.loads(
        (LINES[line] / "node_modules" / "@modelcontextprotocol" / "conformance" / "package.json").read_text()
    )
    assert package["version"] == line, f"{LINES[line]} installs conformance {package['version']}, not {line}"
    out = subprocess.run(
        [str(suite_of(line)), "list", "--client"],
        env=suite_env(line),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=LINES[line],
    )
    listed = [row.split()[1] for row in out.stdout.splitlines() if row.startswith("  - ")]
    assert len(listed) >= 26, out.stdout + out.stderr
    table = tables()[line]
    assert sorted(listed) == sorted(table), (
        f"tests/conformance_expectations.toml must list exactly the scenarios of suite {line}"
    )
    for name, row in table.items():
        status = row["status"]
        assert status in ("pass", "n/a") or status.startswith("pending: issue "), (name, status)
        assert status == "pass" or row.get("reason"), f"{name}: every n/a and pending row says why"
        listed_failing = bool(row.get("failing")) or bool(row.get("all_skipped"))
        assert (status == "n/a") == listed_failing, f"{name}: n/a rows (only) list their failing checks"


def test_docs_page_shows_the_table() -> None:
    text = DOCS_PAGE.read_text(encoding="utf-8")
    assert START in text and END in text
    shown = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert shown == render(), "docs/conformance.md is out of date: run `python -m tests.test_conformance`"


@pytest.mark.parametrize(
    ("line", "scenario"), [(line, name) for line, table in tables().items() for name in sorted(table)]
)
def test_scenario(line: str, scenario: str, temporal_env: Any, tmp_path: Path) -> None:
    from tests.temporal_harness import address_of

    row = tables()[line][scenario]
    run_tag = uuid.uuid4().hex[:8]
    env = suite_env(line, CONFORMANCE_TEMPORAL_ADDRESS=address_of(temporal_env), CONFORMANCE_RUN=run_tag)
    started = time.monotonic()
    out = subprocess.run(
        [
            str(suite_of(line)),
            "client",
            "--command",
            f"{sys.executable} -m tests.conformance_client",
            "--scenario",
            scenario,
            "--timeout",
            str(CLIENT_TIMEOUT_MS),
            "-o",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT_S,
        cwd=REPO_ROOT,
    )
    elapsed = time.monotonic() - started
    report = out.stdout + out.stderr  # the suite writes its verdict to stderr
    files = list(tmp_path.rglob("checks.json"))
    assert len(files) == 1, (out.stdout + out.stderr)[-3000:]
    checks = json.loads(files[0].read_text())
    failing = sorted({c["id"] for c in checks if c.get("status") == "FAILURE"})
    passed = [c["id"] for c in checks if c.get("status") == "SUCCESS"]
    client_err = "".join(p.read_text(errors="replace")[-2000:] for p in files[0].parent.glob("stderr.txt"))
    what = f"{line} {scenario} ({elapsed:.1f} s): failing {failing}\n{report[-2500:]}\n{client_err}"
    status = row["status"]
    if status == "pass":
        assert passed and not failing and "OVERALL: PASSED" in report, what
    elif status == "n/a":
        # Exactly the checks of the flow a service client never runs fail; every other check passes, and the client
        # finished (a timeout would hide checks).
        # ``none_pass``: a scenario whose every check belongs to that flow (stated in its reason); ``all_skipped``:
        # the suite skips every check of a flow this client never enters.
        assert failing == sorted(row["failing"]) and (passed or row.get("none_pass") or row.get("all_skipped")), what
        if row.get("all_skipped"):
            assert checks and not passed and all(c.get("status") == "SKIPPED" for c in checks if c.get("id")), what
        assert "TIMED OUT" not in report, what
    else:
        assert failing, f'{scenario} passes now: set its row of {TABLE_FILE.name} to "pass" ({status}). {what}'

    if scenario in SUBJECT_TASKS:
        await_no_token_in_histories(temporal_env, scenario, run_tag)
    if scenario in STORED_KEY_TASKS:
        assert "Client exited with code" not in report, what
        await_one_completed_task(temporal_env, scenario, run_tag)


#: Scenarios whose tool runs as a task for a subject (tests/conformance_client.py ``TASK_AFTER_LOGIN``,
#: ``TASK_AFTER_HANDOVER``) and how many tasks each runs, and what the suite's mock hands out: access tokens
#: ``test-token-<ms>``, the code ``test-auth-code``, and JWTs (the person's ID token, the ID-JAG: ``eyJ``, a JSON
#: object's base64url start).
SUBJECT_TASKS = {"auth/scope-step-up": 1, "auth/enterprise-managed-authorization": 1}
MOCK_SECRETS = ("test-token-", "test-auth-code", "eyJ")


#: Scenarios whose tool runs as a task after login (``TASK_AFTER_LOGIN``) with no further consent: a worker's own
#: process presents the grant login stored, signing with the DPoP key kept in the grant's record (dpop-nonce: the MCP
#: server's nonce challenge on the task's requests too, a ``tools/call`` among them).
STORED_KEY_TASKS = {"auth/dpop-nonce"}


def await_one_completed_task(temporal_env: Any, scenario: str, run_tag: str) -> None:
    """The scenario ran exactly one task for its subject, and it completed."""
    import asyncio

    from temporalio.client import WorkflowExecutionStatus

    async def statuses() -> list[Any]:
        prefix = f"conformance-{run_tag}-{scenario.replace('/', '-')}-"
        return [wf.status async for wf in temporal_env.client.list_workflows() if wf.id.startswith(prefix)]

    assert asyncio.run(statuses()) == [WorkflowExecutionStatus.COMPLETED], scenario


def await_no_token_in_histories(temporal_env: Any, scenario: str, run_tag: str) -> None:
    """The tasks this scenario ran for its subject: their histories (input, memo, search attributes, every event)
    carry no token, no authorization code and no JWT, only what names the grant."""
    import asyncio

    async def histories() -> list[str]:
        prefix = f"conformance-{run_tag}-{scenario.replace('/', '-')}-"
        out = []
        async for wf in temporal_env.client.list_workflows():
            if wf.id.startswith(prefix):
                history = await temporal_env.client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
                out.append(readable(history.to_json()))
        return out

    found = asyncio.run(histories())
    expected = SUBJECT_TASKS[scenario]
    assert len(found) == expected, f"{scenario}: expected {expected} task(s), got {len(found)}"
    if scenario == "auth/scope-step-up":  # one task, waiting for the step-up consent and then resumed
        assert "mcp_task_consent" in found[0], f"{scenario}: the task was not handed the consent's answer"
    for text in found:
        assert "conformance-person" in text, "the payloads are searched decoded (the input's principal)"
        for secret in MOCK_SECRETS:
            at = text.find(secret)
            assert at < 0, f"{scenario}: {secret!r} in a workflow history: ...{text[max(0, at - 300) : at + 100]}..."


def readable(history_json: str) -> str:
    """A history's JSON with every payload's ``data`` decoded in place: the JSON form holds payloads in base64, where
    a token would not be seen as itself (and every JSON payload starts ``eyJ``)."""
    import base64
    import re

    return re.sub(
        r'"data": "([A-Za-z0-9+/=]+)"',
        lambda m: json.dumps({"data": base64.b64decode(m.group(1)).decode("utf-8", "replace")})[1:-1],
        history_json,
    )


def write_docs() -> None:
    text = DOCS_PAGE.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    DOCS_PAGE.write_text(f"{head}{START}\n{render()}\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")


if __name__ == "__main__":
    write_docs()
