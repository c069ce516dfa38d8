"""Fetch workloads on real daemons (issue 38): the replay tool fetches what the simulator and the
oracle fetch when owners and readers come and go. A reader that reconnects asks again for its
fetches under way while it acknowledges the notifications kept for it: two writers on one
stream, which the driver once let happen (``trio.BusyResourceError``); it has one writer per
connection now."""

import tempfile
from pathlib import Path

import pytest
from hypothesis import Phase, assume, given, settings

from tests.deploy.replaying import replayed_and_simulated
from tests.strategies import EX, PREDICATES
from tests.superpeer.oracle import expected_deliveries, expected_fetches
from tests.superpeer.test_fetching import (
    EVERYTHING,
    coming_and_going,
    fetches_while_the_owner_is_away,
)

pytestmark = pytest.mark.process

SMALL_WINDOWS = "[rendezvous]\nwindow_bytes = 7\nchunk_bytes = 3\n"
"""As in the simulator's fetching properties: every transfer takes several windows."""


def paper(owner: str, number: int, file: str | None = None) -> dict:
    op = {
        "op": "publish",
        "peer": owner,
        "id": f"{owner}-{number}",
        "format": "nt",
        "data": f'<{EX}{owner}/{number}> <{PREDICATES[0].value}> "Nejdl {number}" .\n',
    }
    return op if file is None else {**op, "file": file}


def check(directory: Path, superpeers: int, operations: list[dict]) -> dict:
    """Replay ``operations`` and compare with the simulator and the oracle; the report."""
    report, simulation = replayed_and_simulated(directory, operations, superpeers, SMALL_WINDOWS)
    try:
        expected = expected_fetches(superpeers, operations)
        assert report["fetched"] == simulation.fetched() == expected
        assert report["deliveries"] == simulation.deliveries()
        assert report["deliveries"] == expected_deliveries(superpeers, operations)
        assert report["errors"] == simulation.errors
    finally:
        simulation.close()
    return report


@pytest.mark.slow
def test_a_reader_back_to_kept_mail_asks_its_fetches_again_as_it_acknowledges_it(tmp_path):
    """The reader asks for five files while their owner is offline and goes away; sixty
    notifications are kept for it; it comes back: its fetches go out again while the kept mail
    comes in and is acknowledged. Then the owner comes back and the files arrive."""
    operations = [
        {"op": "join", "peer": "owner", "superpeer": 0},
        {"op": "join", "peer": "other", "superpeer": 0},
        {"op": "join", "peer": "reader", "superpeer": 0},
        {"op": "advertise", "peer": "owner", "schemas": ["dc"]},
        {"op": "advertise", "peer": "other", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "reader", "id": "all", "query": EVERYTHING[0]},
        *(paper("owner", k, f"the text of paper {k}\n" * 20) for k in range(5)),
        {"op": "detach", "peer": "owner"},
        *({"op": "fetch", "peer": "reader", "id": f"owner-{k}"} for k in range(5)),
        {"op": "detach", "peer": "reader"},
        *(paper("other", k) for k in range(60)),
        {"op": "attach", "peer": "reader"},
        {"op": "attach", "peer": "owner"},
    ]
    report = check(tmp_path, 1, operations)
    assert report["fetched"]["reader"] == [f"owner-{k}" for k in range(5)]
    assert report["errors"] == []


@pytest.mark.slow
@settings(max_examples=2, phases=[Phase.generate])
@given(coming_and_going())
def test_fetches_on_real_daemons_when_owners_and_readers_come_and_go(workload):
    """The fetching property's workloads (``coming_and_going``) on real daemons: owners and
    readers detach, attach and move between the fetches; some fetches wait for an owner that is
    offline."""
    superpeers, operations = workload
    assume(fetches_while_the_owner_is_away(superpeers, operations) >= 2)
    assume(any(op["op"] == "move" for op in operations))
    with tempfile.TemporaryDirectory(prefix="replay-fetches-") as directory:
        check(Path(directory), superpeers, operations)
