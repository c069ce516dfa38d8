"""bench.storecpu times the store's calls for a stream of notifications (a smoke test: the
node's sequence of calls still runs on the store, every mail acknowledged at the end)."""

from bench.storecpu import run


def test_the_store_takes_a_stream_of_notifications_and_their_acknowledgements() -> None:
    for subscribers in (1, 3):
        per_notification = run(72, 12, 2**20, subscribers)
        assert 0 < per_notification < 0.05
