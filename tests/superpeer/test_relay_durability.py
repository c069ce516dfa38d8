"""Relays write nothing for what they forward (README, "What is durable where"): a notification
is durable at its origin (its publication log, before the publisher's ``Ack`` and before it is
forwarded), at one neighbour of the origin (the log entry's copy, before the ``Ack``:
``superpeer._replication``) and at the subscriber's access point (its mail, which for an
attached subscriber is written only if the peer has not acknowledged it by the time that mail is
read or ``alive_at`` is written: ``superpeer._unwritten``; the keys it acknowledged are); any other
super-peer in between keeps it in memory only, so it makes no commit and no fsync for it, and a
power loss there (its store back to what was synced, every frame it held gone) loses nothing:
the origin's log covers it. So does it at the access point, which hands a notification from
another origin over before its mail is synced.

Run on the simulator with every super-peer on a real ``SqliteStore`` (committed after each
call, as the daemon's group commit does)."""

import shutil
from pathlib import Path

from bench.writes import CountingStore
from superpeer.sim import Simulation
from superpeer.sim.network import BOUNCE_SECONDS
from superpeer.sim.workload import Connect
from wire import messages as m

DC = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
SUBSCRIPTION = 'SELECT ?x WHERE { ?x dc:creator ?y . FILTER (CONTAINS(?y, "Nejdl")) }'
SUPERPEERS = 8


class CountedStore(CountingStore):
    """A real store that counts the statements that wrote and the commits that carried them
    (each one an fsync with ``[store] sync = "full"``; the tests run with ``normal``: the
    power loss is made explicitly, by reopening a copy taken at a sync)."""

    def synced_copy(self, to: Path) -> Path:
        """The store's files as a power loss now would leave them, had the last commit been
        the last sync: every commit, nothing after (sqlite's files and the redo journal)."""
        self.commit()
        for suffix in ("", "-wal", "-redo"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                shutil.copyfile(source, f"{to}{suffix}")
        return to


def network(tmp_path: Path) -> tuple[Simulation, str, str]:
    """Eight super-peers on real stores, a publisher at the first and a subscriber at the last
    (three hops away); the origin and the access point, by node id."""
    simulation = Simulation(
        SUPERPEERS, new_store=lambda node_id: CountedStore(tmp_path / f"{node_id}.sqlite")
    )
    for op in (
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "join", "peer": "sub", "superpeer": SUPERPEERS - 1},
        {"op": "advertise", "peer": "pub", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "sub", "id": "s", "query": SUBSCRIPTION},
    ):
        simulation.apply(op)
    return simulation, simulation.ids[0], simulation.ids[-1]


def publish(number: int) -> dict:
    return {
        "op": "publish",
        "peer": "pub",
        "id": f"d{number}",
        "data": DC + f'<http://l3s.de/d{number}> dc:creator "W. Nejdl {number}" .',
    }


def relays(simulation: Simulation, origin: str, access_point: str) -> list[str]:
    """The super-peers that received a notification and are neither its origin nor the
    subscriber's access point."""
    return [
        node_id
        for node_id, node in simulation.nodes.items()
        if node_id not in (origin, access_point)
        and node.core is not None
        and node.core.statistics.received[m.Notification.KIND] > 0
    ]


def counted(simulation: Simulation, node_id: str) -> tuple[int, int]:
    store = simulation.stores[node_id]
    assert isinstance(store, CountedStore)
    return store.statements, store.commits


def test_a_relay_writes_and_commits_nothing_for_the_notifications_it_forwards(tmp_path):
    simulation, origin, access_point = network(tmp_path)
    before = {node_id: counted(simulation, node_id) for node_id in simulation.ids}
    for number in range(20):
        simulation.apply(publish(number))
    assert simulation.deliveries()["sub"] == sorted(f"d{k}" for k in range(20))
    forwarding = relays(simulation, origin, access_point)
    assert forwarding, "the subscriber is three hops away: someone forwarded"
    copying = [n for n, node in simulation.nodes.items() if node.statistics.copies_kept]
    assert len(copying) == 1, "one neighbour of the origin copies its log"
    assert copying[0] in simulation.nodes[origin].core.view.neighbours()
    assert simulation.nodes[copying[0]].statistics.copies_kept == 20
    for node_id in set(forwarding) - set(copying):
        assert counted(simulation, node_id) == before[node_id], f"{node_id} wrote"
    # the two places that keep it durably did write: one commit per publication each
    for node_id in (origin, access_point):
        statements, commits = counted(simulation, node_id)
        assert commits - before[node_id][1] >= 20
        assert statements > before[node_id][0]


def power_loss_in_a_stream(simulation: Simulation, node_id: str, tmp_path: Path) -> None:
    """``node_id`` loses its power while 29 publications stream through: its frames and its
    memory are gone, and its store is as it was synced before the stream (what it wrote during
    the stream is the unsynced tail); it starts again on that, and its peers connect again."""
    synced = simulation.stores[node_id]
    assert isinstance(synced, CountedStore)
    copy = synced.synced_copy(tmp_path / f"{node_id}-at-its-last-sync.sqlite")
    for number in range(1, 30):
        for step in simulation.planner.plan(publish(number), str, simulation.now):
            simulation._step(step)
        simulation._advance(simulation.now + simulation.latency / 2)
    held = [
        p.message
        for p in simulation._queue
        if node_id in (p.sender, p.receiver) and isinstance(p.message, m.Notification)
    ]
    assert held, "the power loss must catch notifications on the super-peer's links"
    attached = [p.name for p in simulation.peers.values() if p.access_point == node_id]
    simulation._kill(node_id)
    simulation.stores[node_id].close()
    simulation.stores[node_id] = CountedStore(copy)
    simulation._advance(simulation.now + BOUNCE_SECONDS)
    simulation._start(node_id)
    simulation.run_until_quiet(until=lambda: simulation.nodes[node_id].core is not None)
    for name in attached:
        simulation._connect(Connect(name, simulation.ids.index(node_id)))
    simulation.run_until_quiet()


def test_a_power_loss_at_a_relay_loses_nothing_the_publisher_was_told(tmp_path):
    simulation, origin, access_point = network(tmp_path)
    simulation.apply(publish(0))
    (relay, *_) = relays(simulation, origin, access_point)
    power_loss_in_a_stream(simulation, relay, tmp_path)
    answers = simulation.peers["pub"].answers
    assert sum(isinstance(answer, m.Ack) for answer in answers) == 31, answers
    assert simulation.deliveries()["sub"] == sorted(f"d{k}" for k in range(30))
    assert not simulation.errors


def test_a_power_loss_at_the_access_point_loses_nothing_and_repeats_nothing_in_the_inbox(tmp_path):
    # the access point hands a notification from another origin over before its mail is
    # synced (README, "What is durable where"): the peer may hold what the store lost, and the
    # origins' logs bring back what neither holds
    simulation, _, access_point = network(tmp_path)
    simulation.apply(publish(0))
    power_loss_in_a_stream(simulation, access_point, tmp_path)
    assert simulation.deliveries()["sub"] == sorted(f"d{k}" for k in range(30))
    # what the peer had and the store lost came again (the simulated inbox, as the peer's,
    # keeps the first and counts the rest)
    assert simulation.redeliveries > 0
    assert not simulation.peers["sub"].gaps
    assert not simulation.errors
