"""A super-peer killed and started again before anyone noticed (``superpeer_bounce``): its
neighbours learn it from its new incarnation, repair its place, and it rejoins, usually where it
was. Once, the routes it had lost were never sent to it again (taken for the same super-peer
returning), and two reports of the one failure started two repairs that broke a third node."""

import pytest

from superpeer.sim import Simulation
from tests.superpeer.oracle import expected_deliveries

BROAD = {"schemas": ["dc", "rdf", "http://example.org/"]}
QUERY = "X : t(X, dc:title, T), t(X, dc:date, D), D < 2013, D > 1994"
DC = "http://purl.org/dc/elements/1.1/"
INTEGER = "http://www.w3.org/2001/XMLSchema#integer"


def document(n: int) -> str:
    subject = f"<http://example.org/d{n}>"
    return f'{subject} <{DC}title> "t{n}" .\n{subject} <{DC}date> "{2000 + n}"^^<{INTEGER}> .'


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
        {"op": "join", "peer": "sub", "superpeer": subscriber},
        {"op": "join", "peer": "pub", "superpeer": publisher},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "publish", "peer": "pub", "id": "before", "format": "nt", "data": document(1)},
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
