"""The operator's HTTP endpoint of a super-peer: ``/metrics``, ``/healthz``, ``/readyz``, the
status page ``/`` and what it reads, ``/status.json``.

The server is Hypercorn, run with its trio worker inside the daemon's own nursery: the endpoint
is one more task of the daemon's event loop, so the handlers read the node's state on the thread
that owns it (no locks, no second loop, no thread), and Hypercorn brings a maintained HTTP/1.1
implementation (h11) with its limits (request head size, keep-alive) instead of one of our own.
The application is plain ASGI; ``/metrics`` is ``prometheus_client``'s own ASGI application.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from prometheus_client import make_asgi_app
from prometheus_client.registry import CollectorRegistry

from superpeer.config import HttpSettings
from superpeer.metrics import neighbour_state

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

log = logging.getLogger("superpeer.http")


@dataclass(frozen=True, slots=True)
class Endpoints:
    """What the endpoint asks the daemon: ``snapshot`` is the status page's data, ``readiness``
    says whether it should get traffic (and why not), ``registry`` is None when metrics are off."""

    snapshot: Callable[[], dict[str, Any]]
    readiness: Callable[[], tuple[bool, str]]
    registry: CollectorRegistry | None


def readiness(status: Mapping[str, Any], *, stopping: bool) -> tuple[bool, str]:
    """Ready: a member of the cube, not leaving, not paused for want of disk space
    (``superpeer.diskspace``), every neighbour's link connected and none suspected, and no
    neighbour's or attached peer's clock measured beyond ``max_clock_offset_seconds``
    (CockroachDB's rule; delivery does not depend on it here, but expiries and what operators
    read do: ``clocks``). A super-peer alone in its cube (dimension 0) has no neighbours to
    wait for."""
    if stopping:
        return False, "leaving the cube"
    paused = status.get("disk", {}).get("paused")
    if paused:
        return False, f"paused: {paused}"
    if status.get("state") != "member":
        return False, f"not a member of the cube ({status.get('state')})"
    links = status.get("links", {})
    waiting = sorted(
        f"{node} {state}"
        for node, neighbour in status.get("neighbours", {}).items()
        if (state := neighbour_state(neighbour, links.get(node))) != "up"
    )
    if waiting:
        return False, "neighbours not connected: " + ", ".join(waiting)
    clocks = status.get("clock", {}).get("beyond_bound", [])
    if clocks:
        bound = status["clock"].get("max_clock_offset_seconds")
        return False, f"clocks beyond max_clock_offset_seconds ({bound}): " + "; ".join(clocks)
    return True, f"member, {len(status.get('neighbours', {}))} neighbours connected"


def status_page() -> bytes:
    return resources.files("superpeer.statuspage").joinpath("index.html").read_bytes()


class OperatorApp:
    """The ASGI application."""

    def __init__(self, endpoints: Endpoints) -> None:
        self._endpoints = endpoints
        self._metrics = make_asgi_app(endpoints.registry) if endpoints.registry else None
        self._page = status_page()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if method not in ("GET", "HEAD"):
            await _respond(send, 405, b"only GET and HEAD\n", headers=[(b"allow", b"GET, HEAD")])
            return
        if path == "/metrics" and self._metrics is not None:
            await self._metrics(scope, receive, send)
        elif path == "/healthz":
            await _respond(send, 200, b"ok\n")
        elif path == "/readyz":
            ready, reason = self._endpoints.readiness()
            await _respond(send, 200 if ready else 503, reason.encode() + b"\n")
        elif path == "/status.json":
            body = json.dumps(self._endpoints.snapshot(), sort_keys=True).encode()
            await _respond(send, 200, body, content_type=b"application/json")
        elif path in ("/", "/index.html"):
            await _respond(send, 200, self._page, content_type=b"text/html; charset=utf-8")
        else:
            await _respond(send, 404, b"not found (/, /metrics, /healthz, /readyz, /status.json)\n")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes = b"text/plain; charset=utf-8",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def serve_operator_endpoint(
    settings: HttpSettings,
    endpoints: Endpoints,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; reports the addresses (``http://HOST:PORT``) once listening."""
    host, port = settings.bind
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = log
    config.h11_max_incomplete_size = settings.max_header_bytes
    config.keep_alive_timeout = settings.keep_alive_seconds
    config.include_server_header = False

    await serve(OperatorApp(endpoints), config, task_status=task_status)  # type: ignore[arg-type]
