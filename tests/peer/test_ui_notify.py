"""Desktop notifications (``peer.ui.notify``): what a batch of records says, and that the
setting decides, batch by batch. ``watch_inbox`` is driven step by step here: it waits for the
next batch only once it has finished the previous one (its ``wait_after`` meets the test on an
unbuffered channel), so the test knows exactly which batches arrived while the setting was
off."""

from __future__ import annotations

import os

import pytest
import trio

import qel
from peer.ui.notify import message_for, watch_inbox
from peer.ui.settings import UiSettings

ARTICLE = '<http://e/{n}> <http://purl.org/dc/elements/1.1/title> "Paper {n}" .'


def record(n: int, kind: str = "added") -> dict:
    [item] = qel.parse_publications(ARTICLE.format(n=n), "nt", publisher="o", id=f"n{n}")
    return {
        "sequence": n,
        "publication": f"n{n}",
        "kind": kind,
        "ntriples": item.to_text(),
        "subscriptions": ["papers"],
    }


def test_one_record_is_named_several_are_counted_and_removals_are_no_news():
    assert message_for([record(1)]) == ("New publication: Paper 1", "matches papers")
    assert message_for([record(1, "changed")]) == ("Changed: Paper 1", "matches papers")
    assert message_for([record(1, "removed")]) is None
    summary, body = message_for([record(n) for n in range(1, 6)] + [record(6, "removed")])
    assert summary == "5 new publications"
    assert body.splitlines() == ["Paper 1", "Paper 2", "Paper 3", "…"]


@pytest.fixture
def notifier(tmp_path):
    script = tmp_path / "notify-send"
    script.write_text('#!/bin/sh\nprintf \'%s\\n\' "$@" >> "$0.log"\n')
    script.chmod(0o755)
    return script


async def test_the_setting_decides_for_each_batch_as_it_arrives(notifier, nursery):
    batches = [[record(1)], [record(2)], [record(3), record(4)]]
    enabled = [False]
    send, receive = trio.open_memory_channel[list[dict]](0)
    ready_send, ready_receive = trio.open_memory_channel[None](0)
    pages: dict[int, list[dict]] = {}

    async def wait_after(sequence: int) -> None:
        await ready_send.send(None)  # the watcher is done with everything up to ``sequence``
        pages[sequence] = await receive.receive()

    async def page(after: int) -> dict:
        return {"records": pages.pop(after, [])}

    nursery.start_soon(
        lambda: watch_inbox(
            wait_after=wait_after,
            page=page,
            start=0,
            enabled=lambda: enabled[0],
            command=str(notifier),
        )
    )
    log = notifier.with_name("notify-send.log")
    for batch, on in zip(batches, (False, True, True), strict=True):
        await ready_receive.receive()
        enabled[0] = on
        await send.send(batch)
    await ready_receive.receive()
    assert log.read_text().splitlines() == [
        "--app-name", "semantic-pubsub peer", "New publication: Paper 2", "matches papers",
        "--app-name", "semantic-pubsub peer", "2 new publications", "Paper 3", "Paper 4",
    ]  # fmt: skip
    assert "Paper 1" not in log.read_text(), "it came while the setting was off"


def test_the_pages_choice_is_kept_and_wins_over_the_configured_default(tmp_path):
    path = tmp_path / "ui-settings.json"
    assert UiSettings.open(path, default_notifications=False).desktop_notifications is False
    settings = UiSettings.open(path, default_notifications=True)
    assert settings.desktop_notifications is True
    settings.set_desktop_notifications(False)
    assert UiSettings.open(path, default_notifications=True).desktop_notifications is False
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    path.write_text("not json")
    assert UiSettings.open(path, default_notifications=True).desktop_notifications is True
