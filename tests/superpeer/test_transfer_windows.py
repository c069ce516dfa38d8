"""Resource transfers keep several windows in flight and refuse corrupted bytes (issue 37,
item 5): the requester's access point asks for the next window while the bytes of the previous
ones are on their way (``windows_in_flight``), never more than that many windows beyond what it
holds; a chunk altered on its way makes the file fail its SHA-256 check, at the access point
and at the requester, and the file is never handed over. Windows of a few bytes, as in
``test_fetching``, so that a 51-byte file takes eight windows."""

import dataclasses
import hashlib

import pytest

import wire
from peer.resources import DONE, WAITING, Resources
from superpeer.node import NodeConfig
from superpeer.rendezvous import INCOMING, MAX_WAITING_COLLECTS, RendezvousConfig
from superpeer.sim import Simulation
from tests.superpeer.test_fetching import PAPER, READY_AT_SP2, SETUP, _fetched_file, run_ops
from wire import messages as m

WINDOW = 7


def _assert_the_reader_holds_the_paper(simulation: Simulation) -> None:
    assert simulation.fetched()["reader"] == ["paper"]
    reader = simulation.peers["reader"].resources
    assert _fetched_file(reader, "paper") == PAPER["file"].encode()


def _simulation(windows_in_flight: int) -> Simulation:
    rendezvous = RendezvousConfig(
        window_bytes=WINDOW, chunk_bytes=3, windows_in_flight=windows_in_flight
    )
    config = NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0, rendezvous=rendezvous)
    return Simulation(4, node_config=config)


@pytest.mark.parametrize("windows_in_flight", [1, 2, 3])
def test_the_next_windows_are_asked_for_while_the_earlier_ones_are_on_their_way(
    windows_in_flight: int,
):
    """Each window is asked for once; with one window in flight the next is asked for only
    when the previous one is all here (stop-and-wait), with more it is asked for while bytes
    of the earlier ones are still missing, up to ``windows_in_flight`` windows beyond what the
    requester's access point (sp2) holds."""
    simulation = _simulation(windows_in_flight)
    try:
        run_ops(simulation, SETUP)
        asked: list[tuple[int, int, int]] = []
        enqueue = simulation._enqueue

        def watch(kind, sender, receiver, **fields):
            message = fields.get("message")
            if isinstance(message, m.RendezvousRequest) and sender == "sp2":
                held = simulation.nodes["sp2"].rendezvous.status()["bytes"]
                asked.append((message.offset, message.length, held))
            enqueue(kind, sender, receiver, **fields)

        simulation._enqueue = watch
        run_ops(simulation, [{"op": "fetch", "peer": "reader", "id": "paper"}])
        _assert_the_reader_holds_the_paper(simulation)
        size = len(PAPER["file"])
        assert [offset for offset, _, _ in asked] == list(range(0, size, WINDOW))
        for offset, length, held in asked:
            assert offset + length - held <= windows_in_flight * WINDOW
        ahead = [offset - held for offset, _, held in asked]
        assert max(ahead) == (windows_in_flight - 1) * WINDOW
    finally:
        simulation.close()


def test_a_chunk_corrupted_on_its_way_fails_the_fetch_and_a_new_fetch_completes():
    """A chunk of the third window is altered between the owner's access point and the
    requester's: the file does not match the notification's SHA-256 there, the requester is
    told why and holds nothing; fetching again brings the right bytes."""
    simulation = _simulation(2)
    try:
        run_ops(simulation, SETUP)
        enqueue = simulation._enqueue

        def corrupt(kind, sender, receiver, **fields):
            message = fields.get("message")
            if (
                isinstance(message, m.RendezvousChunk)
                and receiver == "sp2"  # its last hop only (two flips would undo each other)
                and message.offset == 2 * WINDOW
            ):
                altered = bytes([message.data[0] ^ 0xFF]) + message.data[1:]
                fields["message"] = dataclasses.replace(message, data=altered)
                fields["data"] = wire.encode(fields["message"], fields.get("message_id", ""))
            enqueue(kind, sender, receiver, **fields)

        simulation._enqueue = corrupt
        run_ops(simulation, [{"op": "fetch", "peer": "reader", "id": "paper"}])
        simulation._enqueue = enqueue
        reader = simulation.peers["reader"].resources
        [fetch] = reader.fetches()
        assert fetch["state"] == "failed" and "SHA-256" in fetch["reason"]
        assert simulation.fetched()["reader"] == []
        assert simulation.nodes["sp2"].rendezvous.statistics.corrupted == 1
        assert simulation.nodes["sp2"].rendezvous.status()["bytes"] == 0
        run_ops(simulation, [{"op": "fetch", "peer": "reader", "id": "paper"}])
        _assert_the_reader_holds_the_paper(simulation)
    finally:
        simulation.close()


def _requester(tmp_path, data: bytes) -> tuple[Resources, str]:
    resources = Resources(tmp_path / "resources", tmp_path / "notifications", "pk1-reader")
    record = {
        "publication": "paper",
        "owner": "pk1-owner",
        "origin": "sp1",
        "access_point": "127.0.0.1:1",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }
    key, _ = resources.want(record, tmp_path / "paper.pdf")
    return resources, key


def _chunk(key: str, offset: int, data: bytes, window_end: int) -> m.FileChunk:
    return m.FileChunk(rendezvous=key, offset=offset, data=data, window_end=window_end)


def test_the_requester_asks_for_the_next_window_when_the_first_bytes_of_one_arrive(tmp_path):
    data = bytes(range(20))
    resources, key = _requester(tmp_path, data)
    ready = m.FileReady(rendezvous=key, publication="paper", owner="pk1-owner", sha256="", size=20)
    assert resources.ready(ready) == m.Collect(rendezvous=key, offset=0, length=4 * 1024 * 1024)
    asked = resources.chunk(_chunk(key, 0, data[:4], 8))
    assert isinstance(asked, m.Collect) and asked.offset == 8  # two windows in flight
    assert resources.chunk(_chunk(key, 4, data[4:8], 8)) is None  # asked already
    asked = resources.chunk(_chunk(key, 8, data[8:12], 16))
    assert isinstance(asked, m.Collect) and asked.offset == 16
    assert resources.chunk(_chunk(key, 12, data[12:16], 16)) is None
    assert resources.chunk(_chunk(key, 16, data[16:], 20)) == m.Collected(rendezvous=key, ok=True)
    assert (tmp_path / "paper.pdf").read_bytes() == data
    assert resources.progress(key)["state"] == DONE


def test_the_requester_refuses_a_corrupted_chunk_and_collects_the_file_again(tmp_path):
    """The access point checked its copy, so bytes that do not verify here went wrong on the
    way: they are dropped, nothing is written where the user looks, and the file is collected
    again from the start."""
    data = b"the paper's text " * 3
    resources, key = _requester(tmp_path, data)
    half = len(data) // 2
    altered = data[:half] + bytes([data[half] ^ 1]) + data[half + 1 :]
    assert resources.chunk(_chunk(key, 0, altered[:half], len(data))) is None
    again = resources.chunk(_chunk(key, half, altered[half:], len(data)))
    assert again == m.Collect(rendezvous=key, offset=0, length=4 * 1024 * 1024)
    assert not (tmp_path / "paper.pdf").exists()
    progress = resources.progress(key)
    assert progress["state"] == WAITING and progress["received"] == 0
    assert resources.chunk(_chunk(key, 0, data, len(data))) == m.Collected(rendezvous=key, ok=True)
    assert (tmp_path / "paper.pdf").read_bytes() == data


def test_an_attached_requester_collects_while_the_file_is_still_coming():
    """The requester is online: it is told ``FileReady`` when its fetch is accepted and
    collects the first windows before its access point holds the whole file (the two relays
    overlap); it keeps the file only once all of it is here and verified."""
    simulation = _simulation(2)
    try:
        run_ops(simulation, SETUP)
        held_when_sent: list[int] = []
        enqueue = simulation._enqueue

        def watch(kind, sender, receiver, **fields):
            if isinstance(fields.get("message"), m.FileChunk):
                held_when_sent.append(simulation.nodes["sp2"].rendezvous.status()["bytes"])
            enqueue(kind, sender, receiver, **fields)

        simulation._enqueue = watch
        run_ops(simulation, [{"op": "fetch", "peer": "reader", "id": "paper"}])
        size = len(PAPER["file"])
        assert held_when_sent and min(held_when_sent) < size
        _assert_the_reader_holds_the_paper(simulation)
        assert simulation.nodes["sp2"].rendezvous.status()["files"] == 0  # collected, forgotten
    finally:
        simulation.close()


def test_collects_of_bytes_not_here_yet_are_bounded_per_rendezvous():
    """The owner is offline, so nothing comes: a requester that asks again and again for
    windows not here yet holds at most ``MAX_WAITING_COLLECTS`` of them at its access point."""
    simulation = _simulation(2)
    try:
        run_ops(
            simulation,
            [
                *SETUP,
                {"op": "detach", "peer": "owner"},
                {"op": "fetch", "peer": "reader", "id": "paper"},
            ],
        )
        reader = simulation.peers["reader"].resources
        [fetch] = reader.fetches()
        rendezvous = simulation.nodes["sp2"].rendezvous
        out: list = []
        for offset in range(0, 10 * WINDOW, WINDOW):
            collect = m.Collect(rendezvous=fetch["rendezvous"], offset=offset, length=WINDOW)
            rendezvous.collect(reader.peer_id, collect, out)
        assert out == []  # nothing to serve yet, nothing refused
        assert len(rendezvous._collectors[fetch["rendezvous"]]) == MAX_WAITING_COLLECTS
    finally:
        simulation.close()


def test_an_owner_that_reconnects_is_asked_for_the_windows_in_flight_not_the_whole_file():
    """The owner's access point extends its record with each next window, and moves its start
    to where the uploads reached: the owner, which missed the last requests (its connection
    went), is asked again from there when it comes back, not from the first byte."""
    simulation = _simulation(2)
    try:
        run_ops(simulation, SETUP)
        deliver = simulation._peer_receives

        def lose(pending, message):
            if not (isinstance(message, m.UploadWanted) and message.offset >= 4 * WINDOW):
                deliver(pending, message)

        simulation._peer_receives = lose
        run_ops(simulation, [{"op": "fetch", "peer": "reader", "id": "paper"}])
        assert simulation.nodes["sp2"].rendezvous.status()["bytes"] == 4 * WINDOW
        asked: list[tuple[int, int]] = []

        def watch(pending, message):
            if isinstance(message, m.UploadWanted):
                asked.append((message.offset, message.length))
            deliver(pending, message)

        simulation._peer_receives = watch
        run_ops(
            simulation,
            [{"op": "detach", "peer": "owner"}, {"op": "attach", "peer": "owner"}],
        )
        assert asked[0][0] >= 3 * WINDOW and asked[0][1] <= 3 * WINDOW, asked
        _assert_the_reader_holds_the_paper(simulation)
    finally:
        simulation.close()


def test_a_file_whose_bytes_the_access_point_lost_fails_with_the_reason():
    """The record says the file is complete but its bytes are gone (a data directory restored
    without its rendezvous files): the requester is told, instead of waiting for ever, and
    fetching again goes back to the owner."""
    simulation = _simulation(2)
    try:
        run_ops(simulation, READY_AT_SP2)
        rendezvous = simulation.nodes["sp2"].rendezvous
        assert rendezvous.status()["ready"] == 1
        [key] = rendezvous.store.pending(INCOMING)
        rendezvous.store.drop_chunks(key)
        run_ops(simulation, [{"op": "attach", "peer": "reader"}])
        reader = simulation.peers["reader"].resources
        [fetch] = reader.fetches()
        assert fetch["state"] == "failed" and "lost the file" in fetch["reason"]
        run_ops(
            simulation,
            [{"op": "attach", "peer": "owner"}, {"op": "fetch", "peer": "reader", "id": "paper"}],
        )
        _assert_the_reader_holds_the_paper(simulation)
    finally:
        simulation.close()
