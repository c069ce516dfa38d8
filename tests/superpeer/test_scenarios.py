"""The design paper's scenario (Bob, the Hannover and Crete peers) and the routing rules, on the
simulator, as readable tests."""

import json

import pytest

from superpeer.sim import Simulation
from tests.superpeer.oracle import expected_deliveries

BOB_QUERY = """
PREFIX dc: <http://purl.org/dc/elements/1.1/>
SELECT ?x WHERE { ?x a dc:article ; dc:creator ?y ; dc:date ?d .
  FILTER ((CONTAINS(?y, "Nejdl") || CONTAINS(?y, "Koubarakis")) && ?d = 2004) }
"""
DC = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"


def doc(uri: str, body: str) -> str:
    return DC + f"<{uri}> {body} ."


HANNOVER_PAPERS = {
    "pubsub04": doc(
        "http://l3s.de/pubsub04",
        'a dc:article ; dc:creator "W. Nejdl", "P. Chirita" ; dc:date 2004',
    ),
    "edutella02": doc(
        "http://l3s.de/edutella02", 'a dc:article ; dc:creator "W. Nejdl" ; dc:date 2002'
    ),
    "routing04": doc(
        "http://l3s.de/routing04", 'a dc:book ; dc:creator "W. Siberski" ; dc:date 2004'
    ),
}
CRETE_PAPERS = {
    "esws04": doc("http://tuc.gr/esws04", 'a dc:article ; dc:creator "Koubarakis" ; dc:date 2004'),
    "dias02": doc("http://tuc.gr/dias02", 'a dc:article ; dc:creator "Koubarakis" ; dc:date 2002'),
}


def scenario(superpeers: int = 8) -> tuple[Simulation, list[dict]]:
    ops = [
        {"op": "join", "peer": "bob", "superpeer": 0},
        {"op": "join", "peer": "hannover", "superpeer": 3},
        {"op": "join", "peer": "crete", "superpeer": superpeers - 1},
        {
            "op": "advertise",
            "peer": "hannover",
            "values": {"dc:creator": ["W. Nejdl", "P. Chirita", "W. Siberski"]},
        },
        {"op": "advertise", "peer": "crete", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "bob", "id": "nejdl-or-koubarakis-2004", "query": BOB_QUERY},
    ]
    ops += [
        {"op": "publish", "peer": "hannover", "id": k, "data": v}
        for k, v in HANNOVER_PAPERS.items()
    ]
    ops += [{"op": "publish", "peer": "crete", "id": k, "data": v} for k, v in CRETE_PAPERS.items()]
    simulation = Simulation(superpeers, trace_dir=None)
    for op in ops:
        simulation.apply(op)
    return simulation, ops


def test_bob_receives_exactly_the_2004_articles_by_nejdl_or_koubarakis():
    simulation, ops = scenario()
    deliveries = simulation.deliveries()
    assert deliveries["bob"] == ["esws04", "pubsub04"]
    assert deliveries["hannover"] == [] and deliveries["crete"] == []
    assert deliveries == expected_deliveries(8, ops)
    assert simulation.errors == []


def test_bob_is_told_who_owns_the_resource_and_where_to_ask():
    simulation = Simulation(4)
    for op in scenario(4)[1]:
        simulation.apply(op)
    notes = simulation.peers["bob"].notifications
    assert {(n.publication.id, n.owner, n.access_point) for n in notes} == {
        ("pubsub04", "hannover", "sp3.sim:7400"),
        ("esws04", "crete", "sp3.sim:7400"),
    }
    assert all(n.subscriptions == ("nejdl-or-koubarakis-2004",) for n in notes)


def test_a_publication_outside_the_advertisement_is_refused_with_a_reason():
    simulation, _ = scenario()
    simulation.apply(
        {
            "op": "publish",
            "peer": "hannover",
            "id": "bad",
            "data": doc("http://l3s.de/x", 'dc:creator "Someone Else"'),
        }
    )
    assert simulation.errors[-1]["peer"] == "hannover"
    assert "outside your advertisement" in simulation.errors[-1]["error"]
    assert "Someone Else" in simulation.errors[-1]["error"]
    assert "bad" not in simulation.deliveries()["bob"]


def test_offline_notifications_are_kept_and_delivered_on_return():
    simulation, _ = scenario()
    simulation.apply({"op": "detach", "peer": "bob"})
    simulation.apply(
        {
            "op": "publish",
            "peer": "crete",
            "id": "late04",
            "data": doc(
                "http://tuc.gr/late04", 'a dc:article ; dc:creator "Koubarakis" ; dc:date 2004'
            ),
        }
    )
    assert simulation.kept("bob") == {"late04"}
    assert "late04" in simulation.deliveries()["bob"]  # kept for him
    simulation.apply({"op": "attach", "peer": "bob"})
    assert simulation.kept("bob") == set()  # acknowledged, so forgotten
    assert simulation.peers["bob"].received[("crete", "late04", 0)] == 1


def test_unsubscribed_and_departed_peers_get_nothing_more():
    simulation, _ = scenario()
    simulation.apply({"op": "unsubscribe", "peer": "bob", "id": "nejdl-or-koubarakis-2004"})
    simulation.apply(
        {
            "op": "publish",
            "peer": "crete",
            "id": "after04",
            "data": doc(
                "http://tuc.gr/after04", 'a dc:article ; dc:creator "Koubarakis" ; dc:date 2004'
            ),
        }
    )
    assert "after04" not in simulation.deliveries()["bob"]
    before = simulation.messages["sp.notification"]
    simulation.apply(
        {
            "op": "publish",
            "peer": "crete",
            "id": "after05",
            "data": doc(
                "http://tuc.gr/after05", 'a dc:article ; dc:creator "Koubarakis" ; dc:date 2004'
            ),
        }
    )
    assert simulation.messages["sp.notification"] == before, "no subscription left to route it"


def test_a_leaving_publisher_withdraws_its_elements_and_subscriptions_stop_going_there():
    simulation, _ = scenario()
    sent_before = simulation.messages["sp.forward"]
    simulation.apply({"op": "leave", "peer": "crete"})
    simulation.apply(
        {
            "op": "subscribe",
            "peer": "bob",
            "id": "koubarakis",
            "query": 'X : t(X, dc:creator, Y), Y = "Koubarakis"',
        }
    )
    # Only Hannover's super-peer (creator values do not include Koubarakis) and nobody else:
    # the subscription stays at Bob's access point.
    assert simulation.messages["sp.forward"] == sent_before


def test_errors_for_bad_operations_are_reported_not_raised():
    simulation = Simulation(2)
    simulation.apply({"op": "join", "peer": "a", "superpeer": 5})
    simulation.apply({"op": "join", "peer": "b", "superpeer": 1})
    simulation.apply(
        {"op": "subscribe", "peer": "b", "id": "x", "query": "SELECT ?x WHERE { ?x ?p ?o }"}
    )
    simulation.apply({"op": "unsubscribe", "peer": "b", "id": "nope"})
    simulation.apply(
        {"op": "subscribe", "peer": "ghost", "id": "x", "query": "X : t(X, dc:title, T)"}
    )
    messages = [e["error"] for e in simulation.errors]
    assert "there is no super-peer 5" in messages[0]
    assert "in predicate position" in messages[1]
    assert "no subscription with id 'nope'" in messages[2]
    assert "peer ghost has not joined" in messages[3]


@pytest.mark.parametrize("superpeers", [1, 2, 3, 5, 8, 13])
def test_the_scenario_on_every_shape_of_cube(superpeers):
    simulation, ops = scenario(superpeers)
    assert simulation.deliveries() == expected_deliveries(superpeers, ops)
    assert json.loads(json.dumps(simulation.report()))["totals"]["redeliveries"] == 0
