"""Desktop notifications: ``notify-send`` (freedesktop) for each new publication in the inbox.

``watch_inbox`` follows the inbox from where it is when the daemon starts (what arrived before
was seen, or is in the inbox anyway) and, while the setting is on, runs ``notify-send`` once per
batch of records that arrive together: one record is named by its title, several are counted
(a burst after a night offline is one notification, not hundreds). Only ``added`` and ``changed``
records are news; a removal shows in the inbox. Where ``notify-send`` is not installed nothing is
shown and the Status page says so. A notifier that hangs is abandoned after
``NOTIFY_SECONDS``; one that fails is logged, and the inbox goes on.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from peer.ui.documents import readable

NOTIFY_SECONDS: Final = 5.0
APP_NAME: Final = "semantic-pubsub peer"
log = logging.getLogger("peer.ui")


def message_for(records: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The summary and body of the notification for ``records``, None if none is news."""
    news = [r for r in records if r.get("kind", "added") in ("added", "changed")]
    if not news:
        return None
    titles = []
    for record in news:
        try:
            titles.append(readable(record["ntriples"])["title"])
        except (KeyError, ValueError):
            titles.append(str(record.get("publication", "")))
    if len(news) == 1:
        verb = "New publication" if news[0].get("kind", "added") == "added" else "Changed"
        matched = ", ".join(news[0].get("subscriptions", []))
        return f"{verb}: {titles[0]}", f"matches {matched}" if matched else ""
    shown = "\n".join(titles[:3]) + ("\n…" if len(titles) > 3 else "")
    return f"{len(news)} new publications", shown


async def watch_inbox(
    *,
    wait_after: Callable[[int], Awaitable[None]],
    page: Callable[[int], Awaitable[dict[str, Any]]],
    start: int,
    enabled: Callable[[], bool],
    command: str | None,
) -> None:
    """Notifies of what arrives after record ``start``; ``wait_after(n)`` returns once there is a
    record after ``n``, ``page(n)`` gives those records (the ``inbox`` command's reply)."""
    after = start
    while True:
        await wait_after(after)
        records: list[dict[str, Any]] = []
        while True:
            body = await page(after)
            records += body["records"]
            if not body["records"]:
                break
            after = body["records"][-1]["sequence"]
        message = message_for(records)
        if message is not None and enabled() and command is not None:
            await notify(command, *message)


async def notify(command: str, summary: str, body: str) -> None:
    with trio.move_on_after(NOTIFY_SECONDS) as waiting:
        try:
            done = await trio.run_process(
                [command, "--app-name", APP_NAME, summary, body],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except OSError as error:
            log.warning("event=notify_failed command=%s error=%r", command, str(error))
            return
    if waiting.cancelled_caught:
        log.warning("event=notify_failed command=%s error=%r", command, "no answer in time")
    elif done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()
        log.warning(
            "event=notify_failed command=%s code=%d error=%s",
            command,
            done.returncode,
            json.dumps(detail),
        )
