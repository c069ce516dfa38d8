"""Gap notices from the copies of a lost origin's log (``superpeer._catchup``,
``superpeer._replication`` rule 7): an access point cut off from an origin that is then lost
for good catches up from the copies of its log; when those were pruned inside the window it
asks for, its subscriber is told a gap naming that origin, counted, never silence; when they
reach back, nothing is missing and no notice is told."""

import math
from dataclasses import replace

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import qel
import wire
from superpeer.actions import ToSuperPeer
from superpeer.node import NodeConfig, SuperPeerNode
from superpeer.sim import Simulation
from superpeer.store import MemoryStore
from tests.superpeer.test_partitions import cut_while_publishing
from wire import messages as m

LOG_SECONDS = 120.0
CONFIG = replace(
    NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0, log_seconds=LOG_SECONDS),
    housekeeping_seconds=1.0,
)
TITLE = qel.URI("http://purl.org/dc/elements/1.1/title")
CUTS = pytest.mark.parametrize(
    "cut", [[[2], [0, 1, 3]], [[0, 1], [2, 3]]], ids=["access-point-alone", "halves"]
)


def lost_during_cut(publications: int, cut: list[list[int]]) -> Simulation:
    """The subscriber's access point (2) is cut off as ``cut`` says while the publisher
    publishes at the origin (0), one every half second; the origin dies for good, disk and
    all, before the heal."""
    ops = [
        {**op, "groups": cut} if op["op"] == "partition" else op
        for op in cut_while_publishing(2, publications)
    ]
    ops += [
        {"op": "wait", "seconds": 1},
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "wait", "seconds": 5},
        {"op": "heal"},
        {"op": "wait", "seconds": 60},
    ]
    simulation = Simulation(4, node_config=CONFIG, interleave=True, seed=0)
    for op in ops:
        simulation.apply(dict(op))
    return simulation


@CUTS
def test_a_cut_longer_than_the_log_with_the_origin_lost_is_told_as_a_gap_naming_it(cut):
    """160 s of cut, 120 s of log: the copies of the lost origin's log no longer reach back to
    the cut; the subscriber is told a gap naming that origin, counted at its access point,
    and what the copies still hold arrives once. (Before: told nothing of the origin, only of
    the holder's own log, whose publications were not missing.)"""
    simulation = lost_during_cut(320, cut)
    peer = simulation.peers["sub"]
    assert simulation.ids[0] in {gap.origin for gap in peer.gaps}
    assert all("may be missing" in str(gap.publication.statements) for gap in peer.gaps)
    assert simulation.nodes[simulation.ids[2]].statistics.gaps == len(peer.gaps)
    got = simulation.deliveries()["sub"]
    assert len(got) == len(set(got))
    assert "n319" in got, "what the copies still held arrived"
    assert "n10" not in got, "pruned: that is what the gap notice says"


@CUTS
def test_a_cut_shorter_than_the_log_with_the_origin_lost_tells_no_gap(cut):
    """20 s of cut: the copies reach back; every publication arrives exactly once, and no gap
    notice is told (a false one teaches users to ignore them)."""
    simulation = lost_during_cut(40, cut)
    got = simulation.deliveries()["sub"]
    assert sorted(got) == sorted(f"n{n}" for n in range(40))
    assert not simulation.peers["sub"].gaps
    assert sum(node.statistics.gaps for node in simulation.nodes.values()) == 0


def entry(origin: str, at: float, number: int = 0) -> m.Notification:
    subject = qel.URI(f"http://example.org/{origin}/{number}")
    title = qel.Literal(lexical="t", datatype=None, lang=None)
    publication = qel.Publication(subject, frozenset({(TITLE, title)}), "pub", f"{origin}-{number}")
    return m.Notification(
        origin=origin,
        origin_position=0,
        publication=publication,
        owner="pub",
        access_point="",
        hops=0,
        published_at=at,
    )


def holder() -> SuperPeerNode:
    return SuperPeerNode("sp9", "sp9.test:7400", MemoryStore(), CONFIG)


def keep(node: SuperPeerNode, *notifications: m.Notification) -> None:
    """As ``LogCopy`` keeps them (``_copy_in``), less the answer."""
    node._record_copies(notifications)
    for notification in notifications:
        node._keep_logged(notification)


def window(since: float) -> list:
    return [("sub", "s1", None, since, math.inf)]


def told(node: SuperPeerNode, since: float, of: str = "", lost: tuple = ()) -> set[str]:
    """The origins the gap notices for a window from ``since`` name."""
    return {n.origin for ns in node._gaps(window(since), of, lost).values() for n in ns}


def test_a_holder_tells_the_gap_of_an_origins_copies_it_pruned_and_only_of_those():
    """Restricted to an origin, a holder tells a gap for a window that starts before its log's
    floor if it kept a copy of that origin that old; one whose first copy came after the
    floor was pruned of nothing, and one it never held a copy of neither."""
    node = holder()
    keep(node, entry("sp0", 10.0, 0), entry("sp0", 20.0, 1), entry("sp1", 5.0))
    node.store.prune_log(15.0, 100)  # sp0's entry of 10 s and sp1's go
    keep(node, entry("sp2", 30.0))
    assert node.store.log_floor() == 10.0
    assert told(node, 8.0, "sp0") == {"sp0"}
    assert told(node, 12.0, "sp0") == set(), "everything from 12 s on is still held"
    assert told(node, 4.0, "sp1") == {"sp1"}
    assert told(node, 8.0, "sp2") == set(), "its copies all came after the floor"
    assert told(node, 8.0, "sp3") == set(), "never held one"
    (notice,) = node._gaps(window(8.0), "sp0")["sub"]
    assert notice.kind == m.GAP and notice.owner == notice.origin == "sp0"
    assert "super-peer sp0 until" in str(notice.publication.statements)


def test_an_answer_from_the_whole_log_names_the_lost_origins_whose_copies_it_pruned():
    """Unrestricted (the asker did not know the origin lost), a holder that knows it lost, or
    is told so (``CatchUp.lost``), names it as well as itself; a live origin of its cube
    answers for itself."""
    node = holder()
    keep(node, entry("sp0", 10.0), entry("sp1", 11.0))
    node.store.prune_log(15.0, 100)
    assert told(node, 8.0) == {"sp9", "sp0", "sp1"}, "no cube: nobody answers for itself"
    node.departed["sp0"] = 1
    assert node._gone("sp0")
    assert told(node, 8.0, lost=("sp1",)) >= {"sp0", "sp1"}


def test_a_leavers_hand_over_says_what_its_log_lacked():
    """``AdoptLog.floor``: an adopter whose own log was pruned of nothing vouches for the
    handed copies only after the leaver's floor; an older leaver's hand-over, which does not
    say, is taken as lacking what came before its first entry."""
    node = holder()
    node._adopt_log_in(m.AdoptLog(notifications=(entry("sp0", 50.0),), floor=40.0))
    assert node.store.log_floor() == -math.inf
    assert told(node, 30.0, "sp0") == {"sp0"}
    assert told(node, 30.0, "sp5") == {"sp5"}, (
        "an origin it held nothing of may be in what it lacked"
    )
    assert told(node, 45.0, "sp0") == set()
    older = holder()
    older._adopt_log_in(m.AdoptLog(notifications=(entry("sp0", 50.0), entry("sp0", 60.0, 1))))
    assert told(older, 45.0, "sp0") == {"sp0"} and told(older, 55.0, "sp0") == set()


def test_a_leaver_hands_over_its_floor_even_with_an_empty_log():
    """What it held was pruned: its holders' copies vouch for nothing before its floor."""
    node = holder()
    node.store.set_meta("handed_floor", repr(70.0))
    out: list = []
    node._adopt_log_out(["sp1"], 100.0, out)
    handed = [o.message for o in out if isinstance(o, ToSuperPeer)]
    assert handed == [m.AdoptLog(notifications=(), floor=70.0)]


def test_the_new_fields_read_as_their_defaults_from_an_older_version():
    adopt = msgpack.packb([5, "sp.adopt_log", "", {"notifications": []}])
    catchup = msgpack.packb([5, "sp.catchup", "", {"request": "r", "entries": []}])
    assert wire.decode(adopt)[0] == m.AdoptLog(notifications=(), floor=None)
    assert wire.decode(catchup)[0] == m.CatchUp(request="r", entries=(), origin="", lost=())


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("keep"), st.sampled_from(["a", "b", "c"]), st.integers(0, 50)),
            st.tuples(st.just("prune"), st.integers(0, 60), st.integers(0, 6)),
        ),
        max_size=30,
    ),
    st.integers(-1, 61),
)
def test_a_pruned_copy_is_never_silent(steps, since):
    """Against the copies actually pruned: for a window from ``since``, a gap is told for
    every origin of which a copy at or after ``since`` was pruned (sound), and none once the
    window starts after everything pruned (no false notice there)."""
    node = holder()
    held: dict[str, tuple[str, float]] = {}
    pruned: list[tuple[str, float]] = []
    for number, (kind, x, y) in enumerate(steps):
        if kind == "keep":
            notification = entry(x, float(y), number)
            keep(node, notification)
            held[f"pub-{x}-{number}"] = (x, float(y))
        else:
            node.store.prune_log(float(x), y)
            kept = {
                f"{n.owner}-{n.publication.id}"
                for n in map(_decoded, node.store.logged_since(-math.inf))
            }
            for key in [k for k in held if k not in kept]:
                pruned.append(held.pop(key))
    for origin in "abcd":
        missing = any(o == origin and at >= since for o, at in pruned)
        if missing:
            assert told(node, since, origin) == {origin}
        if all(at < since for _, at in pruned):
            assert told(node, since, origin) == set()


def _decoded(data: bytes) -> m.Notification:
    notification, _ = wire.decode(data)
    return notification
