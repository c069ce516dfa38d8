"""The web app's pages and API (ASGI): what a person does with their peer, each action through
the daemon's own commands (``PeerService.execute``, the control socket's commands, in-process).

The page (``static/``) is one HTML document, its script and its style. The API under ``/api/``
speaks JSON; a command's failure keeps the command's answer (``{"error": KIND, "message"}``, see
``peer.control``) with the HTTP status that says whose fault it is: 400 ``invalid``, 409
``refused`` (by the network), 503 ``unavailable`` (the access point is not connected).

Reading, the app looks at the daemon's files through the objects the daemon owns (its inbox
pages, its fetches, the journal of what it published); acting, it only ever calls ``execute``.
No route reads a file by a name the request gives: fetched files are found by their rendezvous
key in the fetches the daemon recorded, static files by a fixed list. The private key and the
private identifier are never read here (``test_ui.py`` checks every route for them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import mimetypes
import re
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

import qel
from peer.expires import parse_expires
from peer.ui.documents import metadata_document, new_identifier, readable, turtle_of
from peer.ui.guard import Allowed, Guard
from peer.ui.http import (
    BodyTooLarge,
    Receive,
    Request,
    Scope,
    Send,
    event,
    lifespan,
    respond,
    respond_json,
    start,
)
from peer.ui.queries import FormError, build_query, check_query, error_position
from peer.ui.settings import UiSettings
from wire import messages as m

if TYPE_CHECKING:
    from peer.daemon import PeerService

log = logging.getLogger("peer.ui")
STATUS_OF_KIND: Final = {"invalid": 400, "refused": 409, "unavailable": 503}
HEARTBEAT_SECONDS: Final = 15.0
"""An idle event stream says so this often (a proxy or a browser drops a silent one)."""
FETCH_WAIT_SECONDS: Final = 2.0
"""How long a fetch asked from the page waits for its file before answering with progress."""
FILE_BLOCK: Final = 256 * 1024
STATIC: Final = {
    "/": ("index.html", b"text/html; charset=utf-8"),
    "/static/app.js": ("app.js", b"text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", b"text/css; charset=utf-8"),
}
INLINE_TYPES: Final = frozenset(
    {"application/pdf", "image/png", "image/jpeg", "image/gif", "image/webp", "text/plain"}
)
"""Files the page may open in the browser; anything else (HTML, SVG, scripts...) is saved: a
fetched file must never run in the app's origin."""
ROUTES: Final = {
    ("GET", "/api/status"): "status",
    ("POST", "/api/query/build"): "build",
    ("POST", "/api/query/check"): "check",
    ("POST", "/api/subscribe"): "subscribe",
    ("POST", "/api/unsubscribe"): "unsubscribe",
    ("GET", "/api/inbox"): "inbox",
    ("POST", "/api/locate"): "locate",
    ("POST", "/api/fetch"): "fetch",
    ("GET", "/api/fetches"): "fetches",
    ("GET", "/api/published"): "published",
    ("POST", "/api/publish"): "publish",
    ("POST", "/api/retract"): "retract",
    ("POST", "/api/advertise"): "advertise",
    ("POST", "/api/settings"): "change_settings",
}
"""The API's JSON routes: (method, path) to the ``UiApp`` method answering it."""
STREAMS: Final = {
    ("GET", "/api/events"): "events",
    ("GET", "/api/file"): "file",
    ("POST", "/api/publish/file"): "publish_file",
}
"""Routes that stream a response or a request body."""
_KEY: Final = re.compile(r"[0-9a-f]{16,64}")
FORMATS: Final = ("turtle", "nt", "xml", "json-ld")


class Failure(Exception):
    """An answer other than success: ``status`` and the JSON body to send."""

    def __init__(self, status: int, kind: str, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": kind, "message": message, **extra}


Handler = Callable[[Request], Awaitable[Any]]


class UiApp:
    """The ASGI application; ``guard`` decides who may use it."""

    def __init__(
        self,
        service: PeerService,
        settings: UiSettings,
        guard: Guard,
        *,
        uploads: Path,
        notifier: str | None,
        max_request_bytes: int,
        max_upload_bytes: int,
    ) -> None:
        self.service = service
        self.settings = settings
        self.uploads = uploads
        self.notifier = notifier
        self.max_request_bytes = max_request_bytes
        self.max_upload_bytes = max_upload_bytes
        self.guard = guard
        package = resources.files("peer.ui.static")
        self._static = {
            path: (package.joinpath(name).read_bytes(), kind)
            for path, (name, kind) in STATIC.items()
        }
        self._routes: dict[tuple[str, str], Handler] = {
            key: getattr(self, name) for key, name in ROUTES.items()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request = Request.of(scope, receive)
        verdict = self.guard.check(request.method, request.query.get("token"), request.headers)
        if not isinstance(verdict, Allowed):
            log.warning(
                "event=ui_refused status=%d reason=%r path=%s",
                verdict.status,
                verdict.reason,
                request.path,
            )
            await respond(send, verdict.status, verdict.reason.encode() + b"\n")
            return
        if verdict.login:
            await self._login(request, send)
            return
        try:
            await self._dispatch(request, send)
        except Failure as failure:
            await respond_json(send, failure.status, failure.body)

    async def _login(self, request: Request, send: Send) -> None:
        """The token came in the URL: the cookie, and the same address without the token."""
        query = {k: v for k, v in request.query.items() if k != "token"}
        path = "/" + request.path.lstrip("/")  # "//host" would send the browser elsewhere
        target = urllib.parse.quote(path) + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = [(b"location", target.encode()), (b"set-cookie", self.guard.cookie().encode())]
        await respond(send, 303, b"", headers=headers)

    async def _dispatch(self, request: Request, send: Send) -> None:
        method = "GET" if request.method == "HEAD" else request.method
        static = self._static.get(request.path)
        if static is not None and method == "GET":
            await respond(send, 200, static[0], static[1])
            return
        stream = STREAMS.get((method, request.path))
        if stream is not None:
            await getattr(self, stream)(request, send)
            return
        handler = self._routes.get((method, request.path))
        if handler is None:
            if any(path == request.path for _, path in [*ROUTES, *STREAMS]):
                raise Failure(405, "invalid", f"{request.method} is not accepted here")
            raise Failure(404, "invalid", f"no page {request.path}")
        await respond_json(send, 200, await handler(request))

    # -- the daemon's commands ----------------------------------------------------------------
    async def command(self, name: str, **arguments: str) -> dict[str, Any]:
        """Runs a control command in-process; its result, or ``Failure`` with its answer."""
        reply = await self.service.execute(m.ControlRequest(command=name, arguments=arguments))
        body = json.loads(reply.body)
        if not reply.ok:
            kind = str(body.pop("error", "invalid"))
            message = str(body.pop("message", ""))
            raise Failure(STATUS_OF_KIND.get(kind, 400), kind, message, **body)
        return body

    async def _json(self, request: Request) -> dict[str, Any]:
        try:
            return await request.json(self.max_request_bytes)
        except BodyTooLarge:
            raise Failure(
                413, "invalid", f"the request is larger than {self.max_request_bytes} bytes"
            ) from None
        except ValueError as error:
            raise Failure(400, "invalid", f"the request is not a JSON object: {error}") from None

    # -- Follow -------------------------------------------------------------------------------
    async def build(self, request: Request) -> dict[str, Any]:
        form = await self._json(request)
        try:
            text = build_query(form)
        except FormError as error:
            raise Failure(400, "invalid", error.message, field=error.field) from None
        return await self._checked(text)

    async def check(self, request: Request) -> dict[str, Any]:
        text = _string(await self._json(request), "query")
        return await self._checked(text)

    async def _checked(self, text: str) -> dict[str, Any]:
        try:
            query = await trio.to_thread.run_sync(check_query, text)
        except qel.QueryError as error:
            position = error_position(str(error))
            where = {"line": position[0], "column": position[1]} if position else {}
            raise Failure(400, "invalid", str(error), text=text, **where) from None
        return {"text": query.text, "qel": query.qel, "sparql": query.sparql}

    async def subscribe(self, request: Request) -> dict[str, Any]:
        body = await self._json(request)
        arguments = {"query": _string(body, "query")}
        if body.get("id"):
            arguments["id"] = _string(body, "id")
        if body.get("on_change"):
            arguments["on"] = "change"
        arguments.update(_expiry(body))
        return await self.command("subscribe", **arguments)

    async def unsubscribe(self, request: Request) -> dict[str, Any]:
        return await self.command("unsubscribe", id=_string(await self._json(request), "id"))

    # -- Inbox --------------------------------------------------------------------------------
    async def inbox(self, request: Request) -> dict[str, Any]:
        body = await self.command("inbox", after=_sequence(request))
        body["records"] = [_shown(record) for record in body["records"]]
        return body

    async def events(self, request: Request, send: Send) -> None:
        """The inbox's new records as server-sent events (``record``), from ``after`` (or the
        ``Last-Event-ID`` the browser sends when it reconnects)."""
        after = int(_sequence(request))
        last = request.header("last-event-id")
        if last is not None and last.isdigit():
            after = max(after, int(last))
        await start(send, 200, b"text/event-stream", headers=[(b"x-accel-buffering", b"no")])
        await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
        async with trio.open_nursery() as nursery:

            async def until_disconnected() -> None:
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_disconnected)
            while True:
                with trio.move_on_after(HEARTBEAT_SECONDS):
                    await self.service.client.wait_for_record_after(after)
                body = await self.command("inbox", after=str(after))
                chunks = [
                    event("record", _shown(record), id=record["sequence"])
                    for record in body["records"]
                ]
                if body["records"]:
                    after = body["records"][-1]["sequence"]
                data = b"".join(chunks) or b": idle\n\n"
                await send({"type": "http.response.body", "body": data, "more_body": True})

    async def locate(self, request: Request) -> dict[str, Any]:
        return await self.command(
            "locate", public_id=_string(await self._json(request), "public_id")
        )

    # -- Fetch --------------------------------------------------------------------------------
    async def fetch(self, request: Request) -> dict[str, Any]:
        """Asks for a publication's file and waits a little; while the file has not come, says
        whether its owner is online now (offline: the access point keeps a rendezvous)."""
        body = await self._json(request)
        arguments = {"publication": _string(body, "publication"), "wait": str(FETCH_WAIT_SECONDS)}
        if body.get("owner"):
            arguments["owner"] = _string(body, "owner")
        progress = await self.command("fetch", **arguments)
        answer: dict[str, Any] = {"fetch": _progress(progress)}
        if progress["state"] == "waiting":
            try:
                located = await self.command("locate", public_id=progress["owner"])
            except Failure as failure:
                answer["owner_online"] = None
                answer["locate_problem"] = failure.body["message"]
            else:
                answer["owner_online"] = located["online"]
        return answer

    async def fetches(self, request: Request) -> dict[str, Any]:
        resources_ = self.service.client.resources
        assert resources_ is not None
        found = await trio.to_thread.run_sync(resources_.fetches)
        found.sort(key=lambda f: (f["state"] != "waiting", f["publication"], f["owner"]))
        return {"fetches": [_progress(f) for f in found]}

    async def file(self, request: Request, send: Send) -> None:
        """A fetched file, by its rendezvous key, checked against its SHA-256 again (it lies in
        the user's files and could have changed since), opened in the browser (``inline``, for
        the types in ``INLINE_TYPES``) or saved."""
        key = request.query.get("rendezvous", "")
        resources_ = self.service.client.resources
        assert resources_ is not None
        progress = resources_.progress(key) if _KEY.fullmatch(key) else None
        if progress is None or progress["state"] != "done":
            raise Failure(404, "invalid", "no fetched file with that key")
        path = Path(progress["out"])
        try:
            digest = await trio.to_thread.run_sync(_sha256, path)
        except OSError as error:
            raise Failure(410, "invalid", f"the fetched file cannot be read: {error}") from None
        if digest != progress["sha256"]:
            raise Failure(
                409,
                "invalid",
                f"the file at {path} changed since it was fetched (its SHA-256 is not the one "
                "its publication announced); fetch it again",
            )
        name = _file_name(progress)
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        inline = request.query.get("disposition") == "inline" and kind in INLINE_TYPES
        disposition = "inline" if inline else "attachment"
        if not inline and kind not in INLINE_TYPES:
            kind = "application/octet-stream"
        quoted = urllib.parse.quote(name)
        headers = [
            (b"content-disposition", f"{disposition}; filename*=UTF-8''{quoted}".encode()),
            (b"x-sha256", digest.encode()),
        ]
        await start(send, 200, kind.encode(), length=progress["size"], headers=headers)
        async with await trio.open_file(path, "rb") as reader:
            while block := await reader.read(FILE_BLOCK):
                await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    # -- Share --------------------------------------------------------------------------------
    async def published(self, request: Request) -> dict[str, Any]:
        records = await trio.to_thread.run_sync(self.service.published.records)
        shown = []
        for record in records:
            item = {k: record[k] for k in ("id", "subject", "changes", "retracted")}
            item.update(
                first_published=record["first_published"],
                last_changed=record["last_changed"],
                expires=record.get("expires"),
            )
            try:
                item["readable"] = readable(record["ntriples"])
                item["turtle"] = turtle_of(record["ntriples"])
            except qel.QelError as error:
                item["problem"] = str(error)
            shown.append(item)
        state = self.service.store.current
        return {
            "published": shown,
            "advertisement": state.advertisement,
            "new_identifier": new_identifier(),
        }

    async def publish(self, request: Request) -> dict[str, Any]:
        return await self._publish(await self._json(request), None)

    async def publish_file(self, request: Request, send: Send) -> None:
        """The file is the body; what to publish about it is the ``x-publish`` header (the
        same JSON as ``/api/publish``, URI-encoded). The daemon takes a copy of the file (as
        ``peer publish --file`` does); the upload is deleted either way."""
        header = request.header("x-publish") or "{}"
        try:
            description = json.loads(urllib.parse.unquote(header))
        except ValueError:
            raise Failure(400, "invalid", "the x-publish header is not JSON") from None
        if not isinstance(description, dict):
            raise Failure(400, "invalid", "the x-publish header is not a JSON object")
        upload = self.uploads / secrets.token_hex(16)
        try:
            await self._receive_file(request, upload)
            answer = await self._publish(description, upload)
        finally:
            upload.unlink(missing_ok=True)
        await respond_json(send, 200, answer)

    async def _receive_file(self, request: Request, target: Path) -> None:
        limit = self.max_upload_bytes
        declared = request.header("content-length")
        too_large = Failure(
            413, "invalid", f"the file is larger than {limit} bytes (max_upload_bytes)"
        )
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large
        size = 0
        async with await trio.open_file(target, "xb") as writer:
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    raise Failure(400, "invalid", "the upload was interrupted")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise too_large
                await writer.write(chunk)
                if not message.get("more_body", False):
                    break

    async def _publish(self, body: dict[str, Any], upload: Path | None) -> dict[str, Any]:
        change = body.get("change") or "publish"
        if "metadata" in body:
            metadata = body["metadata"]
            if not isinstance(metadata, dict):
                raise Failure(400, "invalid", "metadata is an object")
            try:
                document = metadata_document(metadata)
            except FormError as error:
                raise Failure(
                    400, "invalid", error.message, field=f"metadata.{error.field}"
                ) from None
            data_format = "turtle"
        else:
            document = _string(body, "document")
            data_format = body.get("format") or "turtle"
            if data_format not in FORMATS:
                raise Failure(400, "invalid", f"format is one of {', '.join(FORMATS)}")
        arguments = {"data": document, "format": data_format, "change": change}
        if body.get("id"):
            arguments["id"] = _string(body, "id")
        arguments.update(_expiry(body))
        if upload is not None:
            arguments["files"] = json.dumps({"": str(upload)})
        result = await self.command("publish", **arguments)
        return {**result, "document": document}

    async def retract(self, request: Request) -> dict[str, Any]:
        return await self.command("retract", id=_string(await self._json(request), "id"))

    async def advertise(self, request: Request) -> dict[str, Any]:
        """``advertisement`` (the JSON text of ``peer advertise``), or ``schemas`` and
        ``properties`` (lists) to make one of."""
        body = await self._json(request)
        text = body.get("advertisement")
        if not text:
            advertisement = {
                key: [str(v).strip() for v in body.get(key) or [] if str(v).strip()]
                for key in ("schemas", "properties")
            }
            text = json.dumps({k: v for k, v in advertisement.items() if v})
        if not isinstance(text, str):
            raise Failure(400, "invalid", "advertisement is the JSON text of an advertisement")
        result = await self.command("advertise", advertisement=text)
        return {**result, "text": text}

    # -- Status -------------------------------------------------------------------------------
    async def status(self, request: Request) -> dict[str, Any]:
        status = await self.command("status")
        client = self.service.client
        identity = client.identity
        status["identity"] = None
        if identity is not None:
            from crypto.keys import public_key_der

            digest = hashlib.sha256(public_key_der(identity.key)).hexdigest()
            status["identity"] = {
                "public_id": identity.public_id,
                "key_fingerprint": "SHA256:" + ":".join(digest[i : i + 4] for i in range(0, 64, 4)),
                "key_bits": identity.key.key_size,
            }
        resources_ = client.resources
        waiting = resources_.waiting() if resources_ is not None else []
        status["rendezvous_waiting"] = [
            {"publication": r["publication"], "owner": r["owner"], "size": r["size"]}
            for _, r in waiting
        ]
        status["desktop_notifications"] = {
            "enabled": self.settings.desktop_notifications,
            "available": self.notifier is not None,
        }
        status["now"] = time.time()
        return status

    async def change_settings(self, request: Request) -> dict[str, Any]:
        body = await self._json(request)
        enabled = body.get("desktop_notifications")
        if not isinstance(enabled, bool):
            raise Failure(400, "invalid", "desktop_notifications is true or false")
        await trio.to_thread.run_sync(self.settings.set_desktop_notifications, enabled)
        return {"desktop_notifications": enabled}


def _string(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise Failure(400, "invalid", f"{key} is missing")
    return value


def _sequence(request: Request) -> str:
    after = request.query.get("after", "0") or "0"
    if not after.isdigit():
        raise Failure(400, "invalid", f"after must be a record sequence number, not {after!r}")
    return after


def _expiry(body: dict[str, Any]) -> dict[str, str]:
    """``expires`` as the page gives it (``2h``, an ISO time) as the absolute time the daemon's
    commands take (``peer.expires``, as on the command line)."""
    text = body.get("expires")
    if not text:
        return {}
    try:
        return {"expires": repr(parse_expires(str(text), time.time()))}
    except ValueError as error:
        raise Failure(400, "invalid", str(error), field="expires") from None


def _shown(record: dict[str, Any]) -> dict[str, Any]:
    try:
        return {**record, "readable": readable(record["ntriples"])}
    except (KeyError, qel.QelError) as error:
        return {**record, "readable": None, "problem": str(error)}


def _progress(progress: dict[str, Any]) -> dict[str, Any]:
    """A fetch as the page shows it (the file's path on disk stays with the daemon)."""
    shown = {k: v for k, v in progress.items() if k != "out"}
    shown["name"] = _file_name(progress)
    return shown


def _file_name(progress: dict[str, Any]) -> str:
    """A name to save a fetched file under: the last part of the subject's IRI when it looks
    like a file name, else the publication id."""
    publication = str(progress.get("publication", "resource"))
    subject = str(progress.get("subject", ""))
    last = re.split(r"[/#:]", subject.rstrip("/"))[-1] if subject else ""
    if re.fullmatch(r"[\w.-]{1,128}\.[A-Za-z0-9]{1,8}", last):
        return last
    return re.sub(r"[^\w.-]", "_", publication)[:128] or "resource"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as reader:
        while block := reader.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()
