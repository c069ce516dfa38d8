"""A super-peer killed and started again before anyone noticed (``superpeer_bounce``): its
neighbours learn it from its new incarnation, repair its place, and it rejoins, usually where it
was. Once, the routes it had lost were never sent to it again (taken for the same super-peer
returning), and two reports of the one failure started two repairs that broke a third node."""

import pytest

import qel
from superpeer.sim import Simulation
from tests.superpeer.oracle import expected_deliveries
from wire import messages as m

BROAD = {"schemas": ["dc", "rdf", "http://example.org/"]}
QUERY = "X : t(X, dc:title, T), t(X, dc:date, D), D < 2013, D > 1994"
DC = "http://purl.org/dc/elements/1.1/"
INTEGER = "http://www.w3.org/2001/XMLSchema#integer"


def document(n: int) -> str:
    subject = f"<http://example.org/d{n}>"
    return f'{subject} <{DC}title> "t{n}" .\n{subject} <{DC}date> "{2000 + n}"^^<{INTEGER}> .'


def first_publication(subscriber: int, publisher: int) -> list[dict]:
    """``sub`` at ``subscriber`` subscribed to what ``pub`` at ``publisher`` advertised, and got
    its first publication, ``before``."""
    return [
        {"op": "join", "peer": "sub", "superpeer": subscriber},
        {"op": "join", "peer": "pub", "superpeer": publisher},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "publish", "peer": "pub", "id": "before", "format": "nt", "data": document(1)},
    ]


def cases() -> list[tuple[int, int, int, int]]:
    found = []
    for superpeers in (3, 4, 6, 8):
        for bounced in range(superpeers):
            others = [k for k in range(superpeers) if k != bounced]
            found.append((superpeers, bounced, others[0], others[-1]))
            found.append((superpeers, bounced, bounced, others[-1]))
    return found


@pytest.mark.parametrize(("superpeers", "bounced", "subscriber", "publisher"), cases())
def test_a_bounced_super_peer_loses_nothing(superpeers, bounced, subscriber, publisher):
    ops = [
        *first_publication(subscriber, publisher),
        {"op": "superpeer_bounce", "superpeer": bounced},
        {"op": "publish", "peer": "pub", "id": "after", "format": "nt", "data": document(2)},
        {"op": "subscribe", "peer": "sub", "id": "s2", "query": "X : t(X, dc:title, T)"},
        {"op": "superpeer_bounce", "superpeer": bounced},
        {"op": "publish", "peer": "pub", "id": "last", "format": "nt", "data": document(3)},
    ]
    simulation = Simulation(superpeers)
    for op in ops:
        simulation.apply(dict(op))
    assert simulation.errors == []
    assert simulation.deliveries() == expected_deliveries(superpeers, ops)
    assert sorted(simulation.deliveries()["sub"]) == ["after", "before", "last"]


@pytest.mark.slow
@pytest.mark.parametrize("superpeers", [4, 8])
def test_what_is_published_while_a_relay_is_down_is_caught_up(superpeers):
    """The repairer announced the departure in the view that still had the dead node in its
    place, so the news went down a tree through the dead node: the access points below it never
    caught up on what was published while it was down. Every relay, subscriber and publisher
    placement is tried."""
    lost = []
    for bounced in range(superpeers):
        for subscriber in range(superpeers):
            for publisher in range(superpeers):
                if bounced in (subscriber, publisher):
                    continue
                simulation = Simulation(superpeers)
                for op in [
                    {"op": "join", "peer": "sub", "superpeer": subscriber},
                    {"op": "join", "peer": "pub", "superpeer": publisher},
                    {"op": "advertise", "peer": "pub", **BROAD},
                    {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
                ]:
                    simulation.apply(op)
                node = simulation.ids[bounced]
                simulation._kill(node)  # down, and nobody noticed yet
                [publication] = qel.parse_publications(document(1), "nt", publisher="pub", id="x")
                simulation._send_request(
                    simulation.peers["pub"], m.Publish(publication=publication)
                )
                simulation._advance(simulation.now + 1.0)
                simulation._start(node)
                simulation.run_until_quiet()
                if simulation.deliveries()["sub"] != ["x"]:
                    lost.append((bounced, subscriber, publisher))
    assert lost == []
