"""bench.writes counts what a notification writes (a smoke test, and the figures' shape: the
kilobyte once, whatever the subscribers)."""

from bench.writes import run


def test_a_notification_writes_its_kilobyte_once_for_every_subscriber() -> None:
    one, ten = run(1, 20), run(10, 20)
    # five statements for the publication and its subscriber, one more per further subscriber
    # (the keys it acknowledged): an online subscriber's mail is held unwritten and, once it is
    # acknowledged, never written (``superpeer._unwritten``; three statements each before)
    assert one["statements"] == 5 and ten["statements"] == 5 + 9
    # the body once: nine more subscribers add their shells and keys, not nine kilobytes
    assert 1_000 < one["argument_bytes"] < 2_000
    assert ten["argument_bytes"] - one["argument_bytes"] < 9 * 500
    # a commit is a frame of the statements, a few kilobytes, not the pages they changed (87.8
    # KiB of write-ahead log per notification when each commit was sqlite's)
    assert 1 < one["journal_kib"] < 4 and one["wal_kib"] < 16
    # an acknowledgement with nothing waiting in the mail reads nothing back (one read per
    # subscriber and notification when each refilled the window from the store); the two reads
    # are the log's look-ups by hash (is the key logged, is its body in: with the tables keyed
    # by text, a unique index made both part of the inserts); and one per subscriber, the
    # check that its mail repeats nothing it acknowledged (part of the mail's insert before)
    assert 3 <= one["reads"] < 3.5 and 12 <= ten["reads"] < 13
