"""``mcp-tasks codec-server``: Temporal's remote codec protocol for the UI and the CLI, stored payloads resolved.

``POST /decode``, ``/encode`` and ``/download`` take and return Temporal's JSON form of ``Payloads`` (``{"payloads":
[{"metadata": {KEY: base64}, "data": base64}]}``), as the Temporal UI 2.x and ``temporal --codec-endpoint`` send it
(the UI: ``/decode?preserveStorageRefs=true`` for a page, then ``/download`` of one claim when asked). A claim (the
history's ``ExternalStorageReference``) is read from the store the workers write to, then the user's codec decodes
it: the same order as the SDK's data converter, which this module drives. CORS for the UI's origins; the
``Authorization`` header compared with a configured value. Every request is bounded (body size, payload count, time);
a bad one gets one HTTP error with a JSON body naming what was wrong, and the server goes on. HTTP is uvicorn's and
starlette's (installed with ``mcp``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import importlib
import logging
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import DataConverter, PayloadCodec

from mcp_temporal_tasks.worker.config import ConfigError, StorageSettings
from mcp_temporal_tasks.worker.storage import PayloadStoreError, external_storage

log = logging.getLogger("mcp_tasks.codec_server")

#: The UI's origins when none are given: the embedded Temporal's UI, and Temporal Cloud's.
DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233", "https://cloud.temporal.io")
#: What the UI sends (``data-encoder.ts``: Content-Type, X-Namespace, and with "pass access token" Authorization and
#: Authorization-Extras); the CLI sends Authorization (``--codec-auth``) and ``--codec-header`` ones.
ALLOWED_HEADERS = ("Content-Type", "X-Namespace", "Authorization", "Authorization-Extras")
#: A request's body: a page of history decodes in one request, each payload at most Temporal's 2 MiB.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_PAYLOADS = 2000
#: A request's whole time: a store that does not answer within it is a 504, not a hung connection.
REQUEST_TIMEOUT_S = 30.0
_REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"


class RequestError(Exception):
    """One bad request: its HTTP status and what was wrong, in words."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclasses.dataclass
class CodecSettings:
    """What a codec server runs with. ``auth``: the exact ``Authorization`` header value a request must carry (none:
    no check); ``preserve``: honour the UI's ``preserveStorageRefs=true`` on ``/decode`` (a claim stays a claim,
    ``/download`` reads it), else every claim is read on ``/decode`` too."""

    codec: PayloadCodec | None = None
    storage: StorageSettings | None = dataclasses.field(default_factory=StorageSettings)
    auth: str | None = None
    origins: Sequence[str] = DEFAULT_ORIGINS
    max_body_bytes: int = MAX_BODY_BYTES
    max_payloads: int = MAX_PAYLOADS
    timeout_s: float = REQUEST_TIMEOUT_S
    preserve: bool = True


def load_codec(spec: str) -> PayloadCodec:
    """``module:attribute``: a ``PayloadCodec`` instance, or a class or function that makes one with no argument."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--codec {spec!r}: expected MODULE:ATTRIBUTE (e.g. myapp.crypto:codec)")
    try:
        found: Any = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--codec {spec!r}: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, PayloadCodec) and callable(found):
        try:
            found = found()
        except Exception as exc:  # noqa: BLE001  (the user's constructor: named, never a traceback)
            raise ConfigError(f"--codec {spec!r}: making the codec failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, PayloadCodec):
        raise ConfigError(f"--codec {spec!r} is a {type(found).__name__}, not a temporalio PayloadCodec")
    return found


def _is_claim(payload: Payload) -> bool:
    return payload.metadata.get("messageType") == _REFERENCE_TYPE or (
        payload.metadata.get("__temporal_external_storage_reference") == b"true"
    )


class CodecService:
    """The protocol's three operations over one data converter (the user's codec, the workers' store)."""

    def __init__(self, settings: CodecSettings) -> None:
        self.settings = settings
        self.converter = dataclasses.replace(
            DataConverter.default,
            payload_codec=settings.codec,
            external_storage=external_storage(settings.storage) if settings.storage is not None else None,
        )

    def authorized(self, header: str | None) -> bool:
        wanted = self.settings.auth
        return wanted is None or (header is not None and hmac.compare_digest(header.encode(), wanted.encode()))

    def parse(self, body: bytes) -> list[Payload]:
        try:
            message = json_format.Parse(body.decode("utf-8"), Payloads())
        except UnicodeDecodeError as exc:
            raise RequestError(400, f"the body is not UTF-8 (byte {exc.start})") from None
        except json_format.ParseError as exc:
            shape = '{"payloads": [...]}'
            raise RequestError(400, f"the body is not Payloads JSON ({shape}): {str(exc)[:300]}") from None
        if len(message.payloads) > self.settings.max_payloads:
            raise RequestError(
                413, f"{len(message.payloads)} payloads in one request, over the bound of {self.settings.max_payloads}"
            )
        return list(message.payloads)

    async def encode(self, payloads: list[Payload]) -> list[Payload]:
        codec = self.settings.codec
        return list(await codec.encode(payloads)) if codec is not None else payloads

    async def decode(self, payloads: list[Payload], *, preserve: bool) -> list[Payload]:
        out = []
        for payload in payloads:
            out.append(payload if preserve and _is_claim(payload) else await self._read(payload))
        return out

    async def download(self, payloads: list[Payload]) -> list[Payload]:
        if not payloads or not all(_is_claim(p) for p in payloads):
            raise RequestError(400, "/download takes stored payloads only (External Storage claims)")
        return [await self._read(p) for p in payloads]

    async def _read(self, payload: Payload) -> Payload:
        """A claim read from the store and decoded by the codec, or a payload decoded by the codec: the SDK's own
        inbound order (``DataConverter._transform_inbound_payload`` of the pinned temporalio, 1.35.0;
        tests/test_codec_server.py holds what it does)."""
        try:
            return await self.converter._transform_inbound_payload(payload)
        except PayloadStoreError as exc:
            missing = "does not exist" in str(exc)
            raise RequestError(404 if missing else 502, str(exc)[:1000]) from None
        except RuntimeError as exc:
            if "TMPRL1105" in str(exc):
                raise RequestError(
                    501, "a stored payload, and this codec server has no store: give it the workers' --config"
                ) from None
            raise RequestError(422, f"cannot decode the payload: {type(exc).__name__}: {str(exc)[:300]}") from None
        except ValueError as exc:  # e.g. "No driver found with name 'aws.s3driver'"
            raise RequestError(
                422, f"cannot read the payload: {str(exc)[:300]} (give this codec server the workers' store)"
            ) from None
        except Exception as exc:  # noqa: BLE001  (the user's codec: its failure is this request's, not the server's)
            raise RequestError(422, f"the codec failed: {type(exc).__name__}: {str(exc)[:300]}") from None


def build_app(settings: CodecSettings) -> Any:
    """The starlette application: the three routes, CORS for ``settings.origins``, every bound."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    service = CodecService(settings)

    async def body_of(request: Request) -> bytes:
        bound = settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > bound:
            raise RequestError(413, f"a body of {declared} bytes, over the bound of {bound}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > bound:
                raise RequestError(413, f"a body over the bound of {bound} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def endpoint(kind: str) -> Any:
        async def handle(request: Request) -> Response:
            try:
                if not service.authorized(request.headers.get("authorization")):
                    raise RequestError(401, "missing or wrong Authorization header")
                async with asyncio.timeout(settings.timeout_s):
                    payloads = service.parse(await body_of(request))
                    if kind == "encode":
                        out = await service.encode(payloads)
                    elif kind == "decode":
                        preserve = settings.preserve and request.query_params.get("preserveStorageRefs") == "true"
                        out = await service.decode(payloads, preserve=preserve)
                    else:
                        out = await service.download(payloads)
            except RequestError as exc:
                log.info("%s %s: %d %s", request.method, request.url.path, exc.status, exc.message)
                headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
                return JSONResponse({"error": exc.message}, status_code=exc.status, headers=headers)
            except TimeoutError:
                return JSONResponse({"error": f"no answer within {settings.timeout_s:g} s"}, status_code=504)
            body = json_format.MessageToJson(Payloads(payloads=out), indent=None)
            return Response(body, media_type="application/json")

        return handle

    routes = [Route(f"/{kind}", endpoint(kind), methods=["POST"]) for kind in ("encode", "decode", "download")]
    middleware = [
        Middleware(
            CORSMiddleware,
            allow_origins=list(settings.origins),
            allow_methods=["POST", "OPTIONS"],
            allow_headers=list(ALLOWED_HEADERS),
            allow_credentials=True,
            max_age=600,
        )
    ]
    return Starlette(routes=routes, middleware=middleware)


async def serve(settings: CodecSettings, host: str, port: int, *, on_ready: Any = None) -> None:
    """Serve until cancelled (or SIGINT/SIGTERM, uvicorn's own handling). ``on_ready(url)`` once it listens."""
    import uvicorn

    config = uvicorn.Config(
        build_app(settings),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        limit_concurrency=64,
        timeout_keep_alive=5,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.05)
    if server.started and on_ready is not None:
        sock = server.servers[0].sockets[0].getsockname() if server.servers else (host, port)
        on_ready(f"http://{host}:{sock[1]}")
    await task
