"""Bulk publication's pure parts (``peer.bulk``: reading and cutting a document into batches;
``peer.jobs``: what a job recorded) and, in one process against the fake access point, the
command that sends the batches and goes on where an earlier run stopped."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import qel
from peer import bulk, jobs
from peer.control import ControlClient
from peer.files import write_all_atomically
from tests.peer.test_daemon import start

PREFIX = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"


def book(n: int, vocabulary: str = "dc:title") -> str:
    return f'<http://library.example.org/b{n:04d}> {vocabulary} "Book {n}" ; dc:date {n} .\n'


def test_a_document_is_read_as_one_resource_per_subject_sorted_and_whole():
    document = PREFIX + book(2) + book(1) + '<http://library.example.org/b0001> dc:creator "X" .\n'
    reading = bulk.read(document.encode(), "turtle")
    assert [r.subject for r in reading.resources] == [
        "http://library.example.org/b0001",
        "http://library.example.org/b0002",
    ]
    assert reading.resources[0].text.count("\n") == 3, "the triples of a subject stay together"
    assert reading.refused == ()


def test_what_the_network_would_refuse_is_refused_per_resource_with_the_reason():
    many = "".join(f'<http://x.org/many> dc:p{i} "v" .\n' for i in range(300))
    document = (
        PREFIX
        + book(1)
        + '_:b dc:title "blank" .\n'
        + '<http://x.org/o> dc:creator [ dc:title "inner" ] .\n'
        + many
    )
    few = dataclasses.replace(qel.DEFAULT_LIMITS, max_triples_per_publication=299)
    reading = bulk.read(document.encode(), "turtle", limits=few)
    assert [r.subject for r in reading.resources] == ["http://library.example.org/b0001"]
    reasons = dict(reading.refused)
    assert reasons["http://x.org/o"].startswith("a blank node is an object")
    assert "max_triples_per_publication" in reasons["http://x.org/many"]
    assert any(s.startswith("_:") for s in reasons)


def test_an_unreadable_document_is_one_clear_error():
    with pytest.raises(bulk.BulkError, match="cannot read the turtle document"):
        bulk.read(b"<a> <b> .", "turtle")
    with pytest.raises(bulk.BulkError, match="no triples"):
        bulk.read(PREFIX.encode(), "turtle")
    with pytest.raises(bulk.BulkError, match="larger than 10 bytes"):
        bulk.read(PREFIX.encode(), "turtle", max_document_bytes=10)


def test_the_job_key_names_the_document_its_format_and_its_batches():
    key = bulk.document_key(b"doc", "turtle", 100, 10)
    assert key == bulk.document_key(b"doc", "turtle", 100, 10)
    others = {
        bulk.document_key(b"doc!", "turtle", 100, 10),
        bulk.document_key(b"doc", "nt", 100, 10),
        bulk.document_key(b"doc", "turtle", 101, 10),
        bulk.document_key(b"doc", "turtle", 100, 11),
    }
    assert key not in others and len(others) == 4


resources = st.lists(st.integers(min_value=1, max_value=50), max_size=60).map(
    lambda sizes: tuple(bulk.Resource(f"s{i:03d}", "x" * n) for i, n in enumerate(sizes))
)


@given(resources, st.integers(1, 120), st.integers(1, 8))
def test_batches_cut_the_resources_in_order_within_both_bounds(items, max_bytes, max_resources):
    cut = bulk.batches(items, max_bytes=max_bytes, max_resources=max_resources)
    assert [b.number for b in cut] == list(range(len(cut)))
    assert tuple(r for b in cut for r in b.resources) == items, "every resource once, in order"
    for batch in cut:
        assert 1 <= len(batch.resources) <= max_resources
        assert len(batch.text) <= max_bytes or len(batch.resources) == 1
    for before, after in itertools.pairwise(cut):  # greedy: the next one did not fit
        assert (
            len(before.resources) == max_resources
            or len(before.text) + len(after.resources[0].text) > max_bytes
        )
    assert cut == bulk.batches(items, max_bytes=max_bytes, max_resources=max_resources)


def test_a_job_counts_each_batch_once_and_keeps_the_first_subjects_per_reason():
    job = jobs.Job("ab12", batches=3, resources=30)
    assert job.remaining() == [0, 1, 2] and not job.complete
    refused = [
        (f"http://x.org/{i}", f"you already published a resource under the id 'r{i}'")
        for i in range(7)
    ]
    job = job.answered(1, published=3, refused=refused)
    assert job.answered(1, published=3, refused=refused) == job, "a batch answered again"
    assert job.remaining() == [0, 2] and job.published == 3
    [(kind, tally)] = job.refused.items()
    assert kind == "you already published a resource under the id …"
    assert tally.count == 7
    assert tally.subjects == tuple(f"http://x.org/{i}" for i in range(jobs.FIRST_SUBJECTS))
    job = job.answered(0, 10, []).answered(2, 10, [("http://x.org/z", "outside")])
    assert job.complete and job.published == 23
    assert jobs.Job.from_plain(json.loads(json.dumps(job.to_plain()))) == job
    with pytest.raises(ValueError, match="not one of the job's 3"):
        job.answered(3, 0, [])


def test_jobs_are_kept_in_files_and_an_unreadable_one_is_none(tmp_path):
    kept = jobs.Jobs.open(tmp_path / "jobs")
    assert kept.get("ab12") is None
    job = jobs.Job("ab12", 2, 5).answered(0, 3, [])
    kept.put(job)
    assert jobs.Jobs.open(tmp_path / "jobs").get("ab12") == job
    (tmp_path / "jobs" / "ab12.json").write_text("{")
    assert kept.get("ab12") is None
    with pytest.raises(ValueError, match="not a job key"):
        kept.get("../etc")


def test_files_written_together_are_whole_and_leave_no_temporaries(tmp_path):
    (tmp_path / "a").write_bytes(b"old")
    write_all_atomically(tmp_path, {"a": b"new a", "b": b"new b"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    assert (tmp_path / "a").read_bytes() == b"new a"
    assert oct((tmp_path / "b").stat().st_mode & 0o777) == "0o600"


async def test_the_command_sends_what_an_earlier_run_did_not_and_reports_refusals(
    tmp_path, access_point, nursery, run_cli
):
    bob = await start(nursery, tmp_path, "bob", access_point.port)
    await access_point.wait_until(lambda: "bob" in access_point.peers)
    b = ("--data-dir", str(tmp_path / "bob"))
    (tmp_path / "ad.json").write_text('{"schemas": ["dc"]}')
    assert (await run_cli("advertise", str(tmp_path / "ad.json"), *b))[0] == 0
    outside = [book(n, "<http://xmlns.com/foaf/0.1/name>") for n in range(100, 103)]
    document = tmp_path / "catalogue.ttl"
    document.write_text(PREFIX + "".join(book(n) for n in range(40)) + "".join(outside))
    sizes = ("--batch-bytes", "2200", "--batch-resources", "10")
    raw = document.read_bytes()
    reading = bulk.read(raw, "turtle", max_bytes=2200)
    parts = bulk.batches(reading.resources, max_bytes=2200, max_resources=10)
    assert len(parts) == 5 and len(raw) > 2200

    # an earlier run sent two batches before it was stopped (as the command sends them)
    key = bulk.document_key(raw, "turtle", 2200, 10)

    def earlier_run() -> None:  # blocking, as the command is: beside the daemon's loop
        with ControlClient(bob.control_path, timeout=10) as control:
            for batch in parts[:2]:
                ok, body = control.call(
                    "publish-batch",
                    job=key,
                    batch=str(batch.number),
                    of="5",
                    resources="43",
                    data=batch.text,
                )
                assert ok, body

    await trio.to_thread.run_sync(earlier_run)
    published = len(access_point.peers["bob"].published)
    assert published == 20

    code, out, err = await run_cli("publish", str(document), *sizes, *b)
    assert code == 1, err
    assert out.splitlines()[0].startswith(
        f"published 40 of 43 resources in 5 batches (job {key}; 23 sent now at "
    )
    assert out.splitlines()[1] == (
        "refused 3: the publication is outside your advertisement (<http://library.example.org/"
        "b0100>, <http://library.example.org/b0101>, <http://library.example.org/b0102>)"
    )
    assert err.startswith("peer: reading the document")
    assert "100% 43/43 resources" in err
    sent = [p for p, message in access_point.received if p == "bob" and hasattr(message, "change")]
    assert len(sent) == 43, "the two batches answered before were not sent again"
    assert len(access_point.peers["bob"].published) == 40

    code, out, _ = await run_cli("publish", str(document), *sizes, "--json", *b)
    report = json.loads(out)
    assert (code, report["published"], report["sent"]) == (1, 40, 0)
    code, _, err = await run_cli("publish", str(document), "--batch-bytes", "2200", "--id", "x", *b)
    assert (code, "--id, --replaces, --extends and --file take a smaller document" in err) == (
        2,
        True,
    )
