"""bench.inbox on real daemons (a smoke test of the peer's group commits end to end): two
subscribers' daemons take a catalogue their access point kept for them while they were away,
one storing each notification alone, the other the notifications of a read together."""

import pytest

from bench.inbox import measure


@pytest.mark.slow
def test_a_subscriber_stores_what_it_was_kept_in_groups_and_the_baseline_one_by_one() -> None:
    baseline, grouped = measure(400, 64)
    assert (baseline.group, grouped.group) == (1, 64)
    assert baseline.writes == 400, "one write, a pair of syncs, per notification"
    assert 400 / 64 <= grouped.writes < 400 / 4, "groups of up to 64 (the access point's window)"
