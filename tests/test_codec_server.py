"""Issue 57: `mcp-tasks codec-server`, Temporal's remote codec protocol, as a process: the UI's requests (CORS
preflight, ``/decode?preserveStorageRefs=true``, ``/download`` of a claim) and `temporal workflow show
--codec-endpoint` read a result stored outside the history under an encrypting codec; bad requests (garbage, a claim
of a deleted object, an oversized body, a wrong Authorization header) each get one HTTP error naming it, and the
server goes on serving."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import httpx2
from google.protobuf import json_format
from temporalio.client import Client

from mcp_temporal_tasks.activities.activity_io import Endpoint
from mcp_temporal_tasks.worker.config import StorageSettings
from mcp_temporal_tasks.worker.storage import with_storage
from mcp_temporal_tasks.worker.temporal_client import DATA_CONVERTER
from mcp_temporal_tasks.workflows.client import get_outcome, start_mcp_task
from mcp_temporal_tasks.workflows.records import McpTaskRequest, Outcome
from tests.peers.harness import Peer
from tests.temporal_harness import CLI, ENV, ProcessUnderTest, address_of, in_process_worker, temporal_binary, unique
from tests.test_external_storage import XorCodec

AUTH = "Bearer codec-test-token"
UI = "http://localhost:8233"


async def test_the_codec_server_reads_a_stored_encrypted_result(
    client: Client, temporal_env: Any, ts_http_stateful: Peer, tmp_path: Path
) -> None:
    # A worker and a client with an encrypting codec and the embedded store under tmp_path: a 400 KiB result is
    # encrypted, then stored; the history holds a claim.
    store = tmp_path / "payloads"
    encrypting = dataclasses.replace(DATA_CONVERTER, payload_codec=XorCodec())
    converter = with_storage(encrypting, StorageSettings(local_dir=str(store)))
    c = Client(client.service_client, namespace=client.namespace, data_converter=converter)
    queue, marker = unique("q-codec-server"), unique("SECRET-RESULT")
    request = McpTaskRequest(
        server=Endpoint(url=ts_http_stateful.url or ""), tool="big_echo", arguments={"kb": 400, "marker": marker}
    )
    async with in_process_worker(c, task_queue=queue):
        handle = await start_mcp_task(c, request, workflow_id=unique("codec-server"), task_queue=queue)
        out = await asyncio.wait_for(get_outcome(c, handle.id), 60)
    assert out.outcome == Outcome.COMPLETED
    history = await handle.fetch_history()
    ended = next(e for e in history.events if e.HasField("workflow_execution_completed_event_attributes"))
    claim = ended.workflow_execution_completed_event_attributes.result.payloads[0]
    assert claim.metadata["messageType"] == b"temporal.api.sdk.v1.ExternalStorageReference"
    claim_json = json_format.MessageToDict(claim)

    config = tmp_path / "codec.toml"
    config.write_text(f'[temporal.storage]\nlocal_dir = "{store}"\n')
    codec = "tests.test_external_storage:XorCodec"
    server = ProcessUnderTest(
        [*CLI, "codec-server", "--port", "0", "--config", str(config), "--codec", codec],
        ready="LISTENING",
        name="codec-server",
        env={**ENV, "MCP_TASKS_CODEC_AUTH": AUTH},
    )
    try:
        server.wait_ready()
        url = next(line for line in server.lines if line.startswith("LISTENING")).split()[1]
        good = {"Content-Type": "application/json", "X-Namespace": "default", "Authorization": AUTH}
        async with httpx2.AsyncClient(base_url=url, timeout=30) as http:

            async def post(path: str, body: Any, headers: dict[str, str] | None = None) -> httpx2.Response:
                content = body if isinstance(body, bytes) else json.dumps(body).encode()
                return await http.post(path, content=content, headers=headers or good)

            async def still_serves() -> None:
                back = await post("/decode", {"payloads": [claim_json]})
                assert back.status_code == 200, back.text[:300]
                assert marker.encode() in base64.b64decode(back.json()["payloads"][0]["data"]), back.text[:300]

            # The UI's CORS preflight, then the UI's two requests: a page keeps the claim, /download reads it.
            preflight = await http.options(
                "/decode",
                headers={
                    "Origin": UI,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
                },
            )
            assert preflight.status_code == 200, preflight.text
            assert preflight.headers["access-control-allow-origin"] == UI
            page = await post("/decode?preserveStorageRefs=true", {"payloads": [claim_json]})
            assert page.status_code == 200 and marker not in page.text
            kept = json_format.Parse(json.dumps(page.json()["payloads"][0]), type(claim)())
            assert kept.metadata["messageType"] == b"temporal.api.sdk.v1.ExternalStorageReference"
            download = await post("/download", {"payloads": [claim_json]})
            assert download.status_code == 200 and download.headers["content-type"].startswith("application/json")
            decoded = json_format.Parse(json.dumps(download.json()["payloads"][0]), type(claim)())
            text = json.loads(decoded.data)["result"]["content"][0]["text"]
            print(f"/download: {len(download.content)} bytes, result text {len(text)} chars, {text[:20]!r}")
            assert decoded.metadata["encoding"] == b"json/plain" and text.startswith(marker)
            # Round trip of the user's codec: /encode, then /decode.
            plain = {"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "eyJhIjogMX0="}
            encoded = await post("/encode", {"payloads": [plain]})
            assert encoded.status_code == 200 and encoded.json()["payloads"][0] != plain
            again = await post("/decode", encoded.json())
            assert again.json()["payloads"][0]["data"] == plain["data"]

            # Bad input: one clear error each, and the server goes on.
            missing = json.loads(json.dumps(claim_json))
            reference = json.loads(json_format.Parse(json.dumps(claim_json), type(claim)()).data)
            reference["claimData"]["path"] = reference["claimData"]["path"].replace(".bin", "0.bin")
            missing["data"] = base64.b64encode(json.dumps(reference).encode()).decode()
            cases = {
                "garbage": (await post("/decode", b"\x00\xffnot json at all"), 400, "not UTF-8"),
                "not Payloads": (await post("/decode", {"payloads": "nope"}), 400, "not Payloads JSON"),
                "deleted object": (await post("/download", {"payloads": [missing]}), 404, "does not exist"),
                "not a claim": (await post("/download", {"payloads": [plain]}), 400, "stored payloads only"),
                "oversized": (await post("/decode", b"x" * (17 * 1024 * 1024)), 413, "over the bound"),
                "wrong authorization": (
                    await post("/decode", {"payloads": [claim_json]}, {**good, "Authorization": "Bearer wrong"}),
                    401,
                    "Authorization",
                ),
                "no authorization": (
                    await post("/decode", {"payloads": [claim_json]}, {"Content-Type": "application/json"}),
                    401,
                    "Authorization",
                ),
            }
            for name, (response, status, words) in cases.items():
                print(f"{name}: HTTP {response.status_code} {response.text[:200]}")
                assert response.status_code == status and words in response.json()["error"], (name, response.text)
                await still_serves()
            assert cases["wrong authorization"][0].headers.get("www-authenticate") == "Bearer"

        # The temporal CLI through the codec server: the result, decrypted and read from the store.
        show = await asyncio.to_thread(
            subprocess.run,
            [
                temporal_binary(),
                "workflow",
                "show",
                "--workflow-id",
                handle.id,
                "--address",
                address_of(temporal_env),
                "--codec-endpoint",
                url,
                "--codec-auth",
                AUTH,
                "--output",
                "json",
            ],
            capture_output=True,
            timeout=60,
        )
        printed = show.stdout.decode()
        print(f"temporal workflow show --codec-endpoint: exit {show.returncode}, {len(printed)} chars of JSON")
        assert show.returncode == 0, show.stderr.decode()[-2000:]
        events = json.loads(printed)["events"]
        result = events[-1]["workflowExecutionCompletedEventAttributes"]["result"]["payloads"][0]
        shown = json.loads(base64.b64decode(result["data"]))["result"]["content"][0]["text"]
        print(f"  its result: metadata {result['metadata']}, text {len(shown)} chars, {shown[:20]!r}")
        assert shown.startswith(marker) and "messageType" not in result["metadata"]
    finally:
        server.stop()
    assert server.proc.returncode is not None
