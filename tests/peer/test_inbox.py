"""The notifications directory: one durable record per publication, repeats ignored and counted,
safe file names whatever the ids, reading back in receive order."""

import dataclasses
import json
import stat

import pytest

import qel
from peer.inbox import Inbox, record_key
from tests.peer.helpers import notify, publication


def store(inbox: Inbox, note, received_at: float = 100.0) -> bool:
    pending = inbox.prepare(note, received_at)
    if pending is None:
        return False
    pending.write()
    inbox.commit(pending)
    return True


def test_a_record_holds_everything_about_the_notification(tmp_path):
    inbox = Inbox.open(tmp_path / "notifications")
    note = notify(subscriptions=("s1", "s2"))
    assert store(inbox, note, received_at=1764108001.5)
    path = tmp_path / "notifications" / f"{record_key('peer-owner', 'n1')}.json"
    record = json.loads(path.read_text())
    assert record == {
        "format": 1,
        "sequence": 1,
        "publication": "n1",
        "version": 0,
        "kind": "added",
        "owner": "peer-owner",
        "subject": "http://example.org/a",
        "ntriples": note.publication.to_text(),
        "subscriptions": ["s1", "s2"],
        "access_point": "127.0.0.1:7400",
        "origin": "sp-origin",
        "hops": 2,
        "published_at": 1764108000.25,
        "received_at": 1764108001.5,
    }
    assert qel.parse_publication_text(record["ntriples"]) == note.publication
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "notifications").stat().st_mode) == 0o700


def test_a_publication_is_stored_once_and_repeats_are_counted(tmp_path):
    inbox = Inbox.open(tmp_path)
    assert store(inbox, notify())
    assert not store(inbox, notify(subscriptions=("s9",)))
    assert store(inbox, notify(owner="peer-other")), "ids are unique per owner only"
    assert store(inbox, notify(publication(id="n2")))
    assert (inbox.count, inbox.duplicates) == (3, 1)
    assert len(list(tmp_path.glob("*.json"))) == 3


@pytest.mark.parametrize("odd", ["../../etc/passwd", "a/b\\c", "ñ 💡 \x00", "x" * 5000, ""])
def test_any_publication_id_makes_a_safe_file_name(tmp_path, odd):
    inbox = Inbox.open(tmp_path / "inbox")
    assert store(inbox, notify(publication(id=odd)))
    [path] = (tmp_path / "inbox").iterdir()
    assert len(path.stem) == 32
    assert int(path.stem, 16) >= 0
    assert inbox.records_after(0, max_bytes=10**6)[0]["publication"] == odd


def test_reopening_keeps_the_records_their_order_and_the_dedup(tmp_path):
    inbox = Inbox.open(tmp_path)
    for number in range(1, 4):
        assert store(inbox, notify(publication(id=f"n{number}")), received_at=float(number))
    reopened = Inbox.open(tmp_path)
    assert (reopened.count, reopened.last_sequence) == (3, 3)
    assert not store(reopened, notify(publication(id="n2")))
    assert store(reopened, notify(publication(id="n4")))
    records = reopened.records_after(0, max_bytes=10**6)
    assert [r["publication"] for r in records] == ["n1", "n2", "n3", "n4"]
    assert [r["sequence"] for r in records] == [1, 2, 3, 4]
    assert [r["publication"] for r in reopened.records_after(2, max_bytes=10**6)] == ["n3", "n4"]


def test_an_interrupted_write_leaves_no_record_and_is_cleared(tmp_path):
    inbox = Inbox.open(tmp_path)
    pending = inbox.prepare(notify(), 1.0)
    assert pending is not None
    # What a crash between creating the temporary file and renaming it leaves behind:
    (tmp_path / f".{pending.path.name}.0badf00d.tmp").write_bytes(pending.data[:20])
    reopened = Inbox.open(tmp_path)
    assert reopened.count == 0
    assert list(tmp_path.iterdir()) == []
    assert store(reopened, notify()), "the publication was never stored, so it is not a repeat"


def test_a_damaged_record_is_skipped_but_still_blocks_repeats(tmp_path, caplog):
    inbox = Inbox.open(tmp_path)
    assert store(inbox, notify())
    assert store(inbox, notify(publication(id="n2")))
    (tmp_path / f"{record_key('peer-owner', 'n1')}.json").write_text("{garbage")
    reopened = Inbox.open(tmp_path)
    assert (reopened.count, reopened.unreadable) == (1, 1)
    assert "unreadable_record" in caplog.text
    assert not store(reopened, notify())
    assert reopened.last_sequence == 2


def test_pages_are_bounded_but_never_empty(tmp_path):
    inbox = Inbox.open(tmp_path)
    for number in range(1, 6):
        assert store(inbox, notify(publication(id=f"n{number}")))
    size = len((tmp_path / f"{record_key('peer-owner', 'n1')}.json").read_bytes())
    assert len(inbox.records_after(0, max_bytes=2 * size + 10)) == 2
    assert len(inbox.records_after(0, max_bytes=1)) == 1
    assert inbox.records_after(5, max_bytes=10**6) == []


def test_a_newer_version_replaces_the_record_and_older_ones_are_repeats(tmp_path):
    """One record per resource, its latest change, listed once under its latest sequence."""
    inbox = Inbox.open(tmp_path / "notifications")
    first = notify()
    assert store(inbox, first)
    assert store(inbox, notify(publication(id="n2")))
    assert store(inbox, dataclasses.replace(first, version=2, kind="removed"))
    assert not store(inbox, dataclasses.replace(first, version=1, kind="changed"))
    assert not store(inbox, dataclasses.replace(first, version=2, kind="removed"))
    assert inbox.duplicates == 2
    listed = [
        (r["publication"], r["version"], r["kind"])
        for r in inbox.records_after(0, max_bytes=1 << 20)
    ]
    assert listed == [("n2", 0, "added"), ("n1", 2, "removed")]
    reopened = Inbox.open(tmp_path / "notifications")
    assert not store(reopened, dataclasses.replace(first, version=1, kind="changed"))
    assert reopened.count == 2


def test_the_latest_origin_of_each_owner_is_kept_and_read_back_on_reopening(tmp_path):
    """``peer locate`` asks first where the owner's latest notification here came from."""
    inbox = Inbox.open(tmp_path)
    assert inbox.last_origin("peer-owner") == ""
    store(inbox, dataclasses.replace(notify(publication(id="n1")), origin="sp1"))
    store(inbox, dataclasses.replace(notify(publication(id="n2")), origin="sp6"))
    store(inbox, dataclasses.replace(notify(publication(id="n3"), owner="other"), origin="sp2"))
    assert inbox.last_origin("peer-owner") == "sp6"
    assert Inbox.open(tmp_path).last_origin("peer-owner") == "sp6"
    assert Inbox.open(tmp_path).last_origin("other") == "sp2"


def test_a_group_is_written_together_and_a_resource_twice_in_it_keeps_its_newer_version(
    tmp_path,
):
    """``Inbox.write`` of a group (one pair of syncs for all: ``write_all_atomically``): every
    record is on disk and read back when the inbox opens again, a resource changed twice in
    the group as its newer version, under the later sequence number."""
    inbox = Inbox.open(tmp_path / "notifications")
    first = inbox.prepare(notify(publication(id="n1")), 1.0)
    second = inbox.prepare(notify(publication(id="n2")), 1.0)
    changed = inbox.prepare(
        dataclasses.replace(notify(publication(id="n1", title="changed")), version=1), 1.0
    )
    assert first is not None and second is not None and changed is not None
    inbox.write([first, second, changed])
    for record in (first, second, changed):
        inbox.commit(record)
    reopened = Inbox.open(tmp_path / "notifications")
    records = reopened.records_after(0, max_bytes=10**6)
    assert [(r["publication"], r["version"], r["sequence"]) for r in records] == [
        ("n2", 0, 2),
        ("n1", 1, 3),
    ]
    assert [(r["publication"], r["version"]) for r in inbox.records_after(0, max_bytes=10**6)] == [
        ("n2", 0),
        ("n1", 1),
    ]
    assert not list((tmp_path / "notifications").glob(".*")), "no temporary file left"
