"""``serve_ui``: the web app inside the peer daemon.

Hypercorn with its trio worker, as the super-peer's operator endpoint (``superpeer.http``): the
server is one more task of the daemon's nursery, so the pages call the daemon's commands on the
thread that owns its state (no lock, no second loop). It listens on loopback unless the
configuration names another address (``[ui] listen``, ``peer run --ui``), at a free port by
default. At start it makes the access token (``peer.ui.guard``) and writes the app's address
with it to ``<data>/ui.url`` (mode 0600, in the user's private data directory), where
``peer ui`` finds it; the file goes when the daemon stops.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import socket
from typing import TYPE_CHECKING, Final

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from peer.config import PeerConfig, format_address
from peer.files import write_atomically
from peer.ui.app import UiApp
from peer.ui.guard import WILDCARDS, Guard
from peer.ui.notify import watch_inbox
from peer.ui.settings import UiSettings

if TYPE_CHECKING:
    from peer.daemon import PeerService

log = logging.getLogger("peer.ui")
SERVER_LOG: Final = logging.getLogger("peer.ui.server")
SERVER_LOG.setLevel(logging.WARNING)
MAX_HEADER_BYTES: Final = 16384
KEEP_ALIVE_SECONDS: Final = 5.0
NOTIFIER: Final = "notify-send"
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "::1", "localhost"})


async def serve_ui(
    config: PeerConfig,
    service: PeerService,
    *,
    notifier: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serves the app until cancelled; reports its address with the token once it listens.
    ``notifier``: the desktop notification command (default: ``notify-send`` if installed)."""
    ui = config.ui
    assert ui.listen is not None
    host, port = ui.listen
    uploads = config.data_dir / "ui-uploads"
    shutil.rmtree(uploads, ignore_errors=True)  # what an interrupted upload left
    uploads.mkdir(mode=0o700, parents=True, exist_ok=True)
    settings = UiSettings.open(
        config.data_dir / "ui-settings.json", default_notifications=ui.desktop_notifications
    )
    command = notifier or shutil.which(NOTIFIER)
    listener = _bind(host, port)
    bound_port = listener.getsockname()[1]
    token = secrets.token_urlsafe(32)
    app = UiApp(
        service,
        settings,
        Guard(token, port=bound_port, bound_host=host, allowed_hosts=ui.allowed_hosts),
        uploads=uploads,
        notifier=command,
        max_request_bytes=ui.max_request_bytes,
        max_upload_bytes=ui.max_upload_bytes,
    )
    hypercorn = Config()
    hypercorn.bind = [f"fd://{listener.detach()}"]  # Hypercorn listens on it and closes it
    hypercorn.accesslog = None
    hypercorn.errorlog = SERVER_LOG  # its warnings and errors; not "Running on ..."
    hypercorn.h11_max_incomplete_size = MAX_HEADER_BYTES
    hypercorn.keep_alive_timeout = KEEP_ALIVE_SECONDS
    hypercorn.include_server_header = False
    url_file = config.ui_url_path
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, app, hypercorn)  # type: ignore[arg-type]
            shown = "127.0.0.1" if host in WILDCARDS else host
            url = f"http://{format_address((shown, bound_port))}/?token={token}"
            write_atomically(url_file, (url + "\n").encode())
            log.info(
                "event=ui_listening address=http://%s/ notifications=%s",
                format_address((shown, bound_port)),
                "notify-send" if command else "unavailable",
            )
            if host not in LOOPBACK_HOSTS:
                log.warning(
                    "event=ui_beyond_loopback address=%s note=%r",
                    format_address((host, bound_port)),
                    "other machines can reach the web app; every request still needs the token",
                )
            inbox = service.inbox
            nursery.start_soon(
                lambda: watch_inbox(
                    wait_after=service.client.wait_for_record_after,
                    page=lambda after: app.command("inbox", after=str(after)),
                    start=inbox.last_sequence,
                    enabled=lambda: settings.desktop_notifications,
                    command=command,
                )
            )
            task_status.started(url)
    finally:
        url_file.unlink(missing_ok=True)


def _bind(host: str, port: int) -> socket.socket:
    """The app's socket, bound (Hypercorn binding it itself would leak it when the address is
    in use); ``OSError`` says why it cannot be."""
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener.bind((host, port))
    except BaseException:
        listener.close()
        raise
    return listener
