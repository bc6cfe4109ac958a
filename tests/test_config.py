"""Worker configuration: what is accepted, what is refused (with the key named), and the deploy file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_temporal_tasks.worker.config import ConfigError, load_config

pytestmark = pytest.mark.fast

DEPLOY_TOML = Path(__file__).resolve().parent.parent / "deploy" / "worker.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.toml"
    path.write_text(text)
    return path


def test_full_config(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            """
[temporal]
address = "temporal:7233"
namespace = "agents"
[worker]
metrics_port = 9464
[servers.billing]
url = "https://billing.example.com/mcp?x=1"
principal = "svc"
era = "2025-11-25"
trust_annotations = true
[servers.billing.headers]
Authorization = { env = "BILLING_TOKEN" }
[servers.billing.tools.charge_card]
idempotent = false
replay = "with_approval"
max_replays = 2
output_schema = { type = "object", required = ["receipt"] }
[servers.local]
command = ["node", "server.mjs"]
[servers.local.env]
API_KEY = { env = "LOCAL_API_KEY" }
""",
        ),
        env={},
    )
    assert cfg.temporal.address == "temporal:7233" and cfg.temporal.namespace == "agents"
    # Worker defaults the benchmark sized: memory bounded by the cache, activations on a small thread pool.
    assert (cfg.worker.max_cached_workflows, cfg.worker.workflow_threads) == (1000, 2)
    billing = cfg.servers["billing"]
    assert billing.headers == {"Authorization": "BILLING_TOKEN"}
    assert billing.tools["charge_card"].replay == "with_approval" and billing.tools["charge_card"].max_replays == 2
    assert billing.endpoint().identity() == "https://billing.example.com/mcp"  # query string never shown
    assert cfg.servers["local"].endpoint().env_refs == {"API_KEY": "LOCAL_API_KEY"}


def test_env_overrides(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, '[temporal]\naddress = "a:1"\n'),
        env={"TEMPORAL_ADDRESS": "b:2", "MCP_TASKS_TASK_QUEUE": "q2", "MCP_TASKS_METRICS_PORT": "9000"},
    )
    assert (cfg.temporal.address, cfg.temporal.task_queue, cfg.worker.metrics_port) == ("b:2", "q2", 9000)


@pytest.mark.parametrize(
    "text, message",
    [
        ("colour = 1", "unknown top-level key(s): colour"),
        ('[temporal]\nadress = "x:1"', "temporal.adress: unknown key"),
        ('[temporal]\naddress = "nohostport"', "temporal.address"),
        ("[worker]\nmetrics_port = 70000", "worker.metrics_port"),
        ("[worker]\nworkflow_threads = 0", "worker.workflow_threads"),
        ('[servers.a]\nurl = "http://h/mcp"\ncommand = ["x"]', "servers.a: needs exactly one of 'url' or 'command'"),
        ('[servers.a]\ncommand = "node server.mjs"', "servers.a.command: must be a list"),
        ('[servers.a]\nurl = "http://h/mcp"\nera = "2024-01-01"', "servers.a.era"),
        ('[servers.a]\nurl = "http://h/mcp"\n[servers.a.tools.t]\nreplay = "sometimes"', "servers.a.tools.t.replay"),
        (
            '[servers.a]\nurl = "http://h/mcp"\n[servers.a.tools.t]\nidempotnt = true',
            "servers.a.tools.t.idempotnt: unknown key",
        ),
        ('[servers.a]\nurl = "http://h/mcp"\n[servers.a.headers]\nX-Key = "literal"', "servers.a.headers.X-Key"),
        ('[servers.a]\nurl = "ftp://h/mcp"', "servers.a"),
        ("[[servers]]\nurl = 1", "servers: must be a table"),
        ("not toml ===", "is not valid TOML"),
        # Booleans are booleans: "yes" is not taken for true.
        ('[worker]\ntracing = "yes"', "worker.tracing: must be true or false (got 'yes')"),
        ("[temporal]\ntls = 1", "temporal.tls: must be true or false (got 1)"),
        (
            '[servers.a]\nurl = "http://h/mcp"\ntrust_annotations = "true"',
            "servers.a.trust_annotations: must be true or false",
        ),
        (
            '[servers.a]\nurl = "http://h/mcp"\n[servers.a.tools.t]\nidempotent = "no"',
            "servers.a.tools.t.idempotent: must be",
        ),
        # An unknown key is named even when it also leaves a required one missing.
        (
            '[servers.demo]\nulr = "http://h/mcp"',
            "servers.demo.ulr: unknown key (did you mean 'url'?); servers.demo: needs",
        ),
    ],
)
def test_bad_config_is_refused_with_the_key_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), env={})
    assert message in str(exc.value)


def test_messages_carry_no_pydantic_prefix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, '[temporal]\naddress = "nohostport"'), env={})
    assert str(exc.value) == "temporal.address: must be HOST:PORT (e.g. localhost:7233), got 'nohostport'"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", env={})


def test_deploy_worker_toml_loads_with_the_worker_loader() -> None:
    """The file docker-compose mounts into the workers is valid for the real loader."""
    cfg = load_config(DEPLOY_TOML, env={})
    assert cfg.temporal.address == "temporal:7233"
    assert cfg.servers["demo"].url == "http://demo-mcp:8000/mcp"
    assert cfg.servers["demo"].tools["charge_card"].replay == "with_approval"


def test_every_server_table_in_the_readme_loads() -> None:
    """The TOML examples of the README and of every page of docs/ (tasks, job bindings, long synchronous tools,
    authenticated servers) are valid configuration."""
    import re
    import tomllib

    from mcp_temporal_tasks.worker.config import server_config
    from tests.doc_pages import everything

    docs = everything()
    blocks = re.findall(r"```toml\n(.*?)```", docs, re.S)
    # The auth tables' secret variables are checked at load: the documented ones are set for the check.
    env = {var: "set" for var in re.findall(r'client_secret = \{ env = "(\w+)" \}', docs)}
    loaded = {
        name: server_config(name, table, env=env)
        for block in blocks
        for name, table in tomllib.loads(block).get("servers", {}).items()
    }
    assert {"billing", "builds", "exports", "reports", "payments"} <= set(loaded)
    assert loaded["payments"].auth is not None and loaded["payments"].auth.client_secret_env == "PAYMENTS_CLIENT_SECRET"
    assert loaded["exports"].jobs["export"].submit == "start_export"
    assert loaded["reports"].tools["monthly_report"].max_call_s == 1800


def test_every_mistake_at_once_with_suggestions_in_every_section(tmp_path: Path) -> None:
    """Issue 43: three mistakes in three sections are all named in one run, each with the key it is closest to."""
    text = (
        '[temporal]\nadress = "localhost:7233"\n[worker]\nmetrics_prot = 9464\n'
        '[servers.demo]\nulr = "http://h/mcp"\n[servers.demo.tools.x]\nreplya = "never"\n'
    )
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), env={})
    assert exc.value.problems == [
        "temporal.adress: unknown key (did you mean 'address'?)",
        "worker.metrics_prot: unknown key (did you mean 'metrics_port'?)",
        "servers.demo.ulr: unknown key (did you mean 'url'?)",
        "servers.demo: needs exactly one of 'url' or 'command'",
        "servers.demo.tools.x.replya: unknown key (did you mean 'replay'?)",
    ]
