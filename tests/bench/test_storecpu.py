"""bench.storecpu times the store's calls for a stream of notifications (a smoke test: the
node's sequence of calls still runs on the store, every mail acknowledged at the end)."""

from pathlib import Path

from bench.storecpu import PARTS, run, run_in


def test_the_store_takes_a_stream_of_notifications_and_their_acknowledgements() -> None:
    for subscribers in (1, 3):
        per_notification = run(72, 12, 2**20, subscribers)
        assert 0 < per_notification < 0.05


def test_a_run_in_a_process_of_its_own_on_a_checkout_with_fsync() -> None:
    """``--baseline``'s runs: this script in a new process on a checkout's packages."""
    root = Path(__file__).resolve().parents[2]
    assert 0 < run_in(root, 24, 12, 2**20, 1, "full") < 0.05


def test_the_parts_add_up_to_the_run_they_were_timed_in() -> None:
    """``--parts``: every part timed, none negative, together no more than the run's total
    (both per notification)."""
    parts: dict[str, float] = {}
    per_notification = run(72, 12, 2**20, 1, parts=parts)
    assert set(parts) == set(PARTS)
    assert all(seconds >= 0 for seconds in parts.values())
    assert parts["log entry"] > 0 and parts["commits"] > 0
    assert sum(parts.values()) <= per_notification
