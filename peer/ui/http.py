"""The ASGI plumbing of the web app: a request's parts, responses with the app's security headers,
bodies read under a limit, and server-sent events.

Every response forbids framing, sniffing, caching and referrers, and carries a content security
policy that lets the page load only its own script and style (the app has no external asset, so
it works offline, and an injected ``<script>`` would not run).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
JSON: Final = b"application/json"
TEXT: Final = b"text/plain; charset=utf-8"


class BodyTooLarge(Exception):
    """A request body beyond the app's limit (``[ui] max_request_bytes``)."""


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    """The URL's parameters (the last value of a repeated one)."""
    headers: dict[str, list[str]]
    """Lower-case names to every value sent."""
    receive: Receive

    @classmethod
    def of(cls, scope: Scope, receive: Receive) -> Request:
        headers: dict[str, list[str]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        query = dict(urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        return cls(scope["method"], scope["path"], query, headers, receive)

    def header(self, name: str) -> str | None:
        values = self.headers.get(name)
        return values[-1] if values else None

    async def body(self, limit: int) -> bytes:
        """The whole body; ``BodyTooLarge`` as soon as it exceeds ``limit`` bytes."""
        declared = self.header("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def json(self, limit: int) -> dict[str, Any]:
        """The body as a JSON object; ``ValueError`` when it is not one."""
        data = await self.body(limit)
        value = json.loads(data or b"{}")
        if not isinstance(value, dict):
            raise ValueError("the request body must be a JSON object")  # noqa: TRY004 (bad input)
        return value


async def start(
    send: Send,
    status: int,
    content_type: bytes,
    *,
    length: int | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    fields = [(b"content-type", content_type), *SECURITY_HEADERS, *(headers or [])]
    if content_type.startswith(b"text/html"):
        fields.append((b"content-security-policy", CONTENT_SECURITY_POLICY.encode()))
    if length is not None:
        fields.append((b"content-length", str(length).encode()))
    await send({"type": "http.response.start", "status": status, "headers": fields})


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = TEXT,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await start(send, status, content_type, length=len(body), headers=headers)
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, value: object) -> None:
    await respond(send, status, json.dumps(value, ensure_ascii=False).encode(), JSON)


def event(name: str, value: object, *, id: int | None = None) -> bytes:
    """One server-sent event (``data`` is JSON, on one line)."""
    lines = [f"event: {name}"]
    if id is not None:
        lines.append(f"id: {id}")
    lines.append("data: " + json.dumps(value, ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode()


async def lifespan(receive: Receive, send: Send) -> None:
    """Hypercorn's start and stop messages: nothing to set up or tear down."""
    while True:
        message = await receive()
        kind = message["type"].removeprefix("lifespan.")
        await send({"type": f"lifespan.{kind}.complete"})
        if kind == "shutdown":
            return
