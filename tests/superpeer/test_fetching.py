"""Resources in the simulator (issue 14, item 5): on random workloads where publications offer
files and peers fetch them while owners and requesters come and go, every fetch the oracle says
must complete holds the file, verified, and no other does. The access points' windows are a
few bytes here, so that every transfer takes several windows and frames each way."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from peer.resources import Resources
from superpeer.node import NodeConfig
from superpeer.rendezvous import RendezvousConfig
from superpeer.sim import Simulation
from superpeer.sim.workload import OperationError, Planner
from tests.strategies import EX, PREDICATES
from tests.superpeer.oracle import expected_deliveries, expected_fetches, op_file
from tests.superpeer.test_completeness import BROAD, workloads
from wire import messages as m

EVERYTHING = [f": t(?s, <{p.value}>, ?v)" for p in PREDICATES]
"""Subscriptions that together match every publication the strategies make."""
SMALL_WINDOWS = NodeConfig(
    heartbeat_seconds=0.5,
    failure_seconds=2.0,
    rendezvous=RendezvousConfig(window_bytes=7, chunk_bytes=3),
)


@st.composite
def fetching_workloads(draw: st.DrawFn) -> tuple[int, list[dict]]:
    """The completeness workloads with files on most publications, fetches mixed in (mostly of
    what the fetching peer will have been notified of, by the oracle; some of anything) and,
    sometimes, everyone attached at the end."""
    superpeers, ops = draw(workloads())
    joined = sum(1 for op in ops if op["op"] == "join")
    if draw(st.booleans()):  # some peers take everything, so that there is much to fetch
        broad = [
            {"op": "subscribe", "peer": op["peer"], "id": f"all-{k}", "query": query}
            for op in ops[:joined]
            if draw(st.booleans())
            for k, query in enumerate(EVERYTHING)
        ]
        ops = [*ops[:joined], *broad, *ops[joined:]]
    delivered = expected_deliveries(superpeers, ops)
    mixed: list[dict] = []
    published: list[str] = []
    peers = sorted({op["peer"] for op in ops if op["op"] == "join"})
    for op in ops:
        if op["op"] == "publish":
            published.append(op["id"])
        with_file = op["op"] == "publish" and draw(st.integers(0, 3)) > 0
        mixed.append({**op, "file": draw(st.text(max_size=40))} if with_file else op)
        for _ in range(draw(st.integers(0, 2))):
            likely = [(p, i) for p in peers for i in published if i in delivered.get(p, ())]
            if likely and draw(st.integers(0, 3)):
                peer, wanted = draw(st.sampled_from(likely))
            else:
                peer = draw(st.sampled_from(peers))
                wanted = draw(st.sampled_from([*published, "unknown"]))
            mixed.append({"op": "fetch", "peer": peer, "id": wanted})
    if draw(st.booleans()):
        mixed += [{"op": "attach", "peer": peer} for peer in peers]
    return superpeers, mixed


@st.composite
def moving_workloads(draw: st.DrawFn) -> tuple[int, list[dict]]:
    """``fetching_workloads`` with requesters and owners moving to other access points (a move
    also brings a detached peer back online) around their fetches, publications and absences."""
    superpeers, ops = draw(fetching_workloads())
    peers = sorted({op["peer"] for op in ops if op["op"] == "join"})
    moving: list[dict] = []
    for op in ops:
        moving.append(op)
        if op["op"] in ("fetch", "publish", "detach") and draw(st.integers(0, 2)) == 0:
            peer = draw(st.sampled_from([op["peer"], *peers]))
            target = draw(st.integers(0, superpeers - 1))
            moving.append({"op": "move", "peer": peer, "superpeer": target})
    return superpeers, moving


@st.composite
def coming_and_going(draw: st.DrawFn) -> tuple[int, list[dict]]:
    """Owners publish files that every reader subscribed to; readers fetch them while owners and
    readers detach, attach and move, so that many fetches wait for an owner that is offline and
    many readers come back to kept notifications with fetches under way (issue 38's workload: 28
    fetches, 12 while the owner was offline). Short enough to be replayed on real daemons
    (``tests/deploy/test_replay_fetches.py``)."""
    superpeers = draw(st.integers(2, 8))
    owners = [f"owner{k}" for k in range(draw(st.integers(1, 3)))]
    readers = [f"reader{k}" for k in range(draw(st.integers(1, 3)))]
    everyone = owners + readers
    ops: list[dict] = [
        {"op": "join", "peer": p, "superpeer": draw(st.integers(0, superpeers - 1))}
        for p in everyone
    ]
    ops += [{"op": "advertise", "peer": owner, **BROAD} for owner in owners]
    ops += [
        {"op": "subscribe", "peer": reader, "id": "all", "query": EVERYTHING[0]}
        for reader in readers
    ]
    published: list[str] = []
    for number in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["publish", "fetch", "fetch", "detach", "attach", "move"]))
        if kind == "publish" or not published:
            owner = draw(st.sampled_from(owners))
            text = f'<{EX}r{number}> <{PREDICATES[0].value}> "Nejdl" .\n'
            file = draw(st.text(max_size=40))
            ops.append(
                {"op": "publish", "peer": owner, "id": f"r{number}", "format": "nt",
                 "data": text, "file": file}
            )  # fmt: skip
            published.append(f"r{number}")
        elif kind == "fetch":
            reader, wanted = draw(st.sampled_from(readers)), draw(st.sampled_from(published))
            ops.append({"op": "fetch", "peer": reader, "id": wanted})
        elif kind == "move":
            peer, target = draw(st.sampled_from(everyone)), draw(st.integers(0, superpeers - 1))
            ops.append({"op": "move", "peer": peer, "superpeer": target})
        else:
            ops.append({"op": kind, "peer": draw(st.sampled_from(everyone))})
    return superpeers, [*ops, *({"op": "attach", "peer": p} for p in everyone)]


def fetches_while_the_owner_is_away(superpeers: int, ops: list[dict]) -> int:
    """How many fetches the oracle expects to complete were asked while the resource's owner
    was offline (each a rendezvous: the file waits for the owner to come back)."""
    planner = Planner(superpeers)
    owners: dict[str, str] = {}
    count = 0
    for index, op in enumerate(ops):
        owner = planner.peers.get(owners.get(str(op.get("id")), ""))
        if (
            op["op"] == "fetch"
            and owner is not None
            and not owner.attached
            and op["id"] in expected_deliveries(superpeers, ops[:index]).get(op["peer"], ())
        ):
            count += 1
        try:
            planner.plan(dict(op))
        except OperationError:
            continue
        if op["op"] == "publish":
            owners[op["id"]] = op["peer"]
    return count


@pytest.mark.slow
@settings(max_examples=40)
@given(fetching_workloads(), st.booleans(), st.integers(0, 3))
def test_every_fetch_the_oracle_expects_completes_verified(workload, interleave, seed):
    check_fetches(workload, interleave, seed)


@pytest.mark.slow
@settings(max_examples=30)
@given(moving_workloads(), st.booleans(), st.integers(0, 3))
def test_fetches_complete_when_requesters_and_owners_move(workload, interleave, seed):
    """Issue 14: a rendezvous follows a requester that moves (what its old access point held,
    its new one pulls) and an owner that moves (its forwarding address, or the network-wide
    look-up, leads to it)."""
    check_fetches(workload, interleave, seed)


@pytest.mark.slow
@settings(max_examples=40)
@given(coming_and_going(), st.booleans(), st.integers(0, 3))
def test_fetches_complete_when_owners_and_readers_come_and_go(workload, interleave, seed):
    """Issue 38: many fetches, many of them while the owner is offline, readers and owners
    detaching, attaching and moving between them."""
    event(f"fetches while the owner is away: {min(3, fetches_while_the_owner_is_away(*workload))}+")
    check_fetches(workload, interleave, seed)


def check_fetches(workload: tuple[int, list[dict]], interleave: bool, seed: int) -> None:
    superpeers, ops = workload
    simulation = Simulation(superpeers, seed=seed, interleave=interleave, node_config=SMALL_WINDOWS)
    try:
        for op in ops:
            simulation.apply(dict(op))
        assert simulation.deliveries() == expected_deliveries(superpeers, ops)
        expected = expected_fetches(superpeers, ops)
        event(f"fetches expected: {min(3, sum(map(len, expected.values())))}+")
        event(f"rendezvous messages: {simulation.messages['sp.rendezvous'] > 0}")
        assert simulation.fetched() == expected
        for name, peer in simulation.peers.items():
            for publication in simulation.fetched()[name]:
                content = op_file(ops, publication).encode()
                assert _fetched_file(peer.resources, publication) == content
    finally:
        simulation.close()


def _fetched_file(resources: Resources, publication: str) -> bytes:
    """The bytes a peer keeps for ``publication``'s resource (where ``peer fetch`` puts them)."""
    [out] = [
        record["out"]
        for path in resources.wanted_dir.glob("*.json")
        if (record := json.loads(path.read_bytes()))["publication"] == publication
    ]
    return Path(out).read_bytes()


def test_a_requester_that_moved_gets_the_file_at_its_new_access_point_and_the_old_forgets():
    """The owner offline, the requester asks, moves, and the owner comes back: the file goes to
    the new access point; the old one keeps no record that would ask the owner again."""
    ops = [
        {"op": "join", "peer": "owner", "superpeer": 1},
        {"op": "join", "peer": "reader", "superpeer": 2},
        {"op": "advertise", "peer": "owner", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "reader", "id": "all", "query": EVERYTHING[0]},
        {
            "op": "publish",
            "peer": "owner",
            "id": "paper",
            "format": "nt",
            "data": f'<{EX}paper> <{PREDICATES[0].value}> "Nejdl" .\n',
            "file": "the paper's text " * 3,
        },
        {"op": "detach", "peer": "owner"},
        {"op": "fetch", "peer": "reader", "id": "paper"},
        {"op": "move", "peer": "reader", "superpeer": 3},
        {"op": "attach", "peer": "owner"},
    ]
    simulation = Simulation(4, node_config=SMALL_WINDOWS)
    try:
        for op in ops:
            simulation.apply(dict(op))
        assert simulation.errors == []
        assert simulation.fetched() == {"owner": [], "reader": ["paper"]}
        old, new = (simulation.nodes[f"sp{k}"].rendezvous.status() for k in (2, 3))
        assert old["files"] == 0 and old["statistics"]["completed"] == 0
        assert new["statistics"]["completed"] == 1
    finally:
        simulation.close()


def test_an_update_without_a_file_keeps_the_resources_file():
    """A new description of a resource does not take its file away: the update that says nothing
    about the file keeps it (and, with the same triples, is no change at all); a reader that hears
    of the resource only after the update still fetches the file. Found by the property above:
    the update dropped the file's descriptor, so the reader's current version offered nothing."""
    paper = f'<{EX}paper> <{PREDICATES[0].value}> "Nejdl" .\n'
    ops = [
        {"op": "join", "peer": "owner", "superpeer": 0},
        {"op": "join", "peer": "early", "superpeer": 1},
        {"op": "join", "peer": "late", "superpeer": 2},
        {"op": "advertise", "peer": "owner", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "early", "id": "all", "query": EVERYTHING[0]},
        {
            "op": "publish",
            "peer": "owner",
            "id": "paper",
            "format": "nt",
            "data": paper,
            "file": "the paper's text",
        },
        {"op": "update", "peer": "owner", "id": "paper", "format": "nt", "data": paper},
        {"op": "subscribe", "peer": "late", "id": "all", "query": EVERYTHING[0]},
        {
            "op": "update",
            "peer": "owner",
            "id": "paper",
            "format": "nt",
            "data": paper + f'<{EX}paper> <{PREDICATES[0].value}> "Siberski" .\n',
        },
        {"op": "fetch", "peer": "early", "id": "paper"},
        {"op": "fetch", "peer": "late", "id": "paper"},
    ]
    simulation = Simulation(3, node_config=SMALL_WINDOWS)
    try:
        for op in ops:
            simulation.apply(dict(op))
        assert simulation.errors == []
        assert simulation.changes()["early"] == [["paper", "added"], ["paper", "changed"]]
        assert simulation.fetched() == {"owner": [], "early": ["paper"], "late": ["paper"]}
        for name in ("early", "late"):
            assert _fetched_file(simulation.peers[name].resources, "paper") == b"the paper's text"
    finally:
        simulation.close()


PAPER = {
    "op": "publish",
    "peer": "owner",
    "id": "paper",
    "format": "nt",
    "data": f'<{EX}paper> <{PREDICATES[0].value}> "Nejdl" .\n',
    "file": "the paper's text " * 3,
}
SETUP = [
    {"op": "join", "peer": "owner", "superpeer": 1},
    {"op": "join", "peer": "reader", "superpeer": 2},
    {"op": "advertise", "peer": "owner", "schemas": ["dc"]},
    {"op": "subscribe", "peer": "reader", "id": "all", "query": EVERYTHING[0]},
    PAPER,
]
READY_AT_SP2 = [
    *SETUP,
    {"op": "detach", "peer": "owner"},
    {"op": "fetch", "peer": "reader", "id": "paper"},
    {"op": "detach", "peer": "reader"},
    {"op": "attach", "peer": "owner"},  # uploads: the file waits, complete, at sp2
    {"op": "detach", "peer": "owner"},  # and stays offline from now on
]
"""The reader's file complete at its access point sp2 while the reader is away; the owner
offline from then on."""


def run_ops(simulation: Simulation, ops: list[dict]) -> None:
    for op in ops:
        simulation.apply(dict(op))


def test_a_file_ready_at_the_old_access_point_follows_a_requester_that_moved():
    """Issue 14: the owner is offline for good; the file that completed at the requester's
    access point while it was away reaches it at the access point it moved to (pulled from the
    old one, which deletes it only once the new one has it all)."""
    simulation = Simulation(4, node_config=SMALL_WINDOWS)
    try:
        run_ops(simulation, READY_AT_SP2)
        assert simulation.nodes["sp2"].rendezvous.status()["ready"] == 1
        run_ops(simulation, [{"op": "move", "peer": "reader", "superpeer": 3}])
        assert simulation.errors == []
        assert simulation.fetched() == {"owner": [], "reader": ["paper"]}
        assert (
            _fetched_file(simulation.peers["reader"].resources, "paper") == PAPER["file"].encode()
        )
        old, new = (simulation.nodes[f"sp{k}"].rendezvous.status() for k in (2, 3))
        assert old["files"] == 0 and old["statistics"]["handed"] == 1
        assert new["files"] == 0 and new["statistics"]["collected"] == 1
    finally:
        simulation.close()


def test_a_pull_cut_off_leaves_the_file_at_the_old_access_point_until_it_is_asked_again():
    """The new access point's pull is lost on the way (its chunks dropped): the old access point
    still holds the file; the new one asks again after ``retry_seconds`` and the file arrives."""
    simulation = Simulation(4, node_config=SMALL_WINDOWS)
    try:
        run_ops(simulation, READY_AT_SP2)
        enqueue = simulation._enqueue

        def lossy(kind, sender, receiver, **fields):
            if isinstance(fields.get("message"), m.RendezvousChunk):
                return  # the link to the new access point loses every chunk
            enqueue(kind, sender, receiver, **fields)

        simulation._enqueue = lossy
        run_ops(simulation, [{"op": "move", "peer": "reader", "superpeer": 3}])
        assert simulation.fetched()["reader"] == []
        assert simulation.nodes["sp2"].rendezvous.status()["handed"] == 1, "deleted unconfirmed"
        simulation._enqueue = enqueue
        retry = SMALL_WINDOWS.rendezvous.retry_seconds
        run_ops(simulation, [{"op": "wait", "seconds": retry + 1}])
        assert simulation.fetched()["reader"] == ["paper"]
        assert simulation.nodes["sp2"].rendezvous.status()["files"] == 0
    finally:
        simulation.close()


def test_a_request_follows_an_owner_that_moved_and_later_windows_go_straight_to_it():
    """The notification names sp1; the owner moved to sp6 since: the request reaches sp1 over
    the cube (at most log2 N hops), follows the forwarding address, and the next windows go to
    sp6 directly (each at most log2 N hops)."""
    superpeers, dimension = 8, 3
    simulation = Simulation(superpeers, node_config=SMALL_WINDOWS)
    try:
        run_ops(simulation, [*SETUP, {"op": "move", "peer": "owner", "superpeer": 6}])
        run_ops(simulation, [{"op": "fetch", "peer": "reader", "id": "paper"}])
        assert simulation.fetched()["reader"] == ["paper"]
        windows = math.ceil(len(PAPER["file"]) / SMALL_WINDOWS.rendezvous.window_bytes)
        requests = simulation.messages["sp.rendezvous"]
        assert requests <= windows * dimension + dimension, requests
        assert simulation.nodes["sp1"].rendezvous.statistics.forwarded == 1
        assert simulation.messages["sp.locate"] == 0
    finally:
        simulation.close()


def test_without_a_forwarding_address_the_owner_is_looked_up_network_wide():
    """The owner moved long ago: its old access point forgot the forwarding address and answers
    "not here"; the requester's access point looks the owner up (at most 2(N - 1) messages)
    and asks
    the access point it is online at."""
    config = dataclasses.replace(SMALL_WINDOWS, retention_seconds=60.0)
    simulation = Simulation(4, node_config=config)
    try:
        run_ops(
            simulation,
            [
                *SETUP,
                {"op": "move", "peer": "owner", "superpeer": 3},
                {"op": "wait", "seconds": 61.0},
                {"op": "fetch", "peer": "reader", "id": "paper"},
            ],
        )
        assert simulation.fetched()["reader"] == ["paper"]
        assert simulation.nodes["sp1"].rendezvous.statistics.not_here == 1
        assert simulation.nodes["sp2"].rendezvous.statistics.looked_up == 1
        # at most 2(N - 1): a subtree where the owner is found answers without going further
        assert 0 < simulation.messages["sp.locate"] == simulation.messages["sp.located"] <= 3
    finally:
        simulation.close()


def test_a_part_received_at_the_old_access_point_is_pulled_and_the_owner_sends_the_rest():
    """The owner's upload stops after two windows (the rest is lost, and the owner goes
    offline); the requester moves: its new access point pulls the two windows from the old one,
    which then deletes them, and asks the owner, when it is back, only for the rest."""
    simulation = Simulation(4, node_config=SMALL_WINDOWS)
    window = SMALL_WINDOWS.rendezvous.window_bytes
    try:
        run_ops(simulation, SETUP)
        enqueue = simulation._enqueue

        def cut(kind, sender, receiver, **fields):
            message = fields.get("message")
            if not (isinstance(message, m.RendezvousChunk) and message.offset >= 2 * window):
                enqueue(kind, sender, receiver, **fields)

        simulation._enqueue = cut
        run_ops(simulation, [{"op": "fetch", "peer": "reader", "id": "paper"}])
        simulation._enqueue = enqueue
        assert simulation.nodes["sp2"].rendezvous.status()["bytes"] == 2 * window
        run_ops(
            simulation,
            [
                {"op": "detach", "peer": "owner"},
                {"op": "move", "peer": "reader", "superpeer": 3},
            ],
        )
        old, new = (simulation.nodes[f"sp{k}"].rendezvous.status() for k in (2, 3))
        assert old["files"] == 0 and old["statistics"]["handed"] == 1
        assert new["bytes"] == 2 * window and simulation.fetched()["reader"] == []
        asked: list[int] = []
        deliver = simulation._peer_receives

        def watch(pending, message):
            if isinstance(message, m.UploadWanted):
                asked.append(message.offset)
            deliver(pending, message)

        simulation._peer_receives = watch
        run_ops(simulation, [{"op": "attach", "peer": "owner"}])
        assert asked and min(asked) == 2 * window, "the owner was asked for what was held"
        assert simulation.fetched()["reader"] == ["paper"]
        assert (
            _fetched_file(simulation.peers["reader"].resources, "paper") == PAPER["file"].encode()
        )
    finally:
        simulation.close()
