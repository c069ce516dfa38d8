"""The journal of what a peer published (``peer.published``): each acknowledged change, kept per
resource as what the network now says about it."""

from __future__ import annotations

import qel
from peer.published import Published

A = '@prefix dc: <http://purl.org/dc/elements/1.1/> .\n<http://e/a> dc:title "{title}" .\n'
MORE = "<http://e/a> <http://purl.org/dc/elements/1.1/date> 2004 ."


def publication(text: str, id: str = "r", format: str = "turtle") -> qel.Publication:
    [item] = qel.parse_publications(text, format, publisher="me", id=id)
    return item


def statements(record: dict) -> set[str]:
    return set(record["ntriples"].splitlines()[1:])


def test_a_resource_is_published_changed_extended_and_withdrawn(tmp_path):
    journal = Published.open(tmp_path / "published")
    journal.record(publication(A.format(title="one")), "publish", 2000.0, now=10.0)
    journal.record(publication(A.format(title="one")), "publish", None, now=11.0)
    first = journal.get("r")
    assert first is not None
    assert (first["changes"], first["first_published"], first["expires"]) == (1, 10.0, 2000.0)
    assert first["last_changed"] == 10.0, "the same content again changes nothing"
    journal.record(publication(A.format(title="two")), "update", None, now=20.0)
    journal.record(publication(MORE), "extend", None, now=30.0)
    record = journal.get("r")
    assert record is not None
    assert (record["changes"], record["first_published"], record["expires"]) == (3, 10.0, 2000.0)
    assert statements(record) == {
        '<http://e/a> <http://purl.org/dc/elements/1.1/date> "2004"^^<http://www.w3.org/2001/XMLSchema#integer> .',
        '<http://e/a> <http://purl.org/dc/elements/1.1/title> "two" .',
    }
    journal.record(publication(A.format(title="other"), id="s"), "publish", None, now=40.0)
    assert [r["id"] for r in journal.records()] == ["s", "r"], "the latest change first"
    journal.retracted("r", now=50.0)
    journal.retracted("r", now=60.0)
    record = journal.get("r")
    assert record is not None and record["retracted"] and record["last_changed"] == 50.0
    journal.record(publication(A.format(title="again")), "publish", None, now=70.0)
    record = journal.get("r")
    assert record is not None
    assert (record["retracted"], record["changes"], record["first_published"]) == (False, 1, 70.0)
    journal.clear()
    assert journal.records() == []
    assert journal.get("r") is None


def test_a_damaged_record_is_skipped_and_an_id_is_never_a_path(tmp_path):
    journal = Published.open(tmp_path / "published")
    journal.record(publication(A.format(title="x"), id="../../escape"), "publish", None, now=1.0)
    assert [p.parent for p in (tmp_path / "published").iterdir()] == [tmp_path / "published"]
    (tmp_path / "published" / "junk.json").write_text("{")
    assert [r["id"] for r in journal.records()] == ["../../escape"]
