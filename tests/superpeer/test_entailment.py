"""RDFS entailment before matching in the simulator (seed 000): schemas published by peers spread
to every super-peer with the advertisements; each publication is matched under its closure at its
entry. Against the oracle, whose closure is rdflib's and owlrl's (``tests.entailment_oracle``)."""

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from superpeer.config import ConfigError, config_from_mapping
from superpeer.core import CoreConfig
from superpeer.schemas import SchemaLimits
from tests.strategies import schema_axioms, schema_text
from tests.superpeer.invariants import check_routing
from tests.superpeer.oracle import expected_changes, expected_deliveries
from tests.superpeer.test_completeness import BROAD, churning_workloads, run, workloads

EX = "http://example.org/"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
MALFORMED = [
    f'<{EX}a> <{EX}b> "not a schema statement" .\n',
    f"<{EX}p> <{RDFS}subPropertyOf> <{RDFS}subClassOf> .\n",
    "<broken",
]


@st.composite
def with_schemas(draw: st.DrawFn, base: st.SearchStrategy) -> tuple[int, list[dict]]:
    """A workload with schemas published at random moments (before and after publications, so
    some are published before a schema that would have changed them), some malformed."""
    superpeers, ops = draw(base)
    peers = sorted({op["peer"] for op in ops if op["op"] == "join"})
    mixed = list(ops)
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 5)) == 0:
            data = draw(st.sampled_from(MALFORMED))
        else:
            data = schema_text(draw(schema_axioms()))
        schema = {"op": "publish_schema", "peer": draw(st.sampled_from(peers)), "data": data}
        schema["format"] = "nt"
        mixed.insert(draw(st.integers(len(peers), len(mixed))), schema)
    return superpeers, mixed


@pytest.mark.slow
@settings(max_examples=50, deadline=None)
@given(with_schemas(workloads()), st.booleans(), st.integers(0, 3))
def test_every_peer_receives_what_the_closure_under_the_schemas_matches(workload, interleave, seed):
    superpeers, ops = workload
    simulation = run(superpeers, ops, interleave=interleave, seed=seed)
    expected = expected_deliveries(superpeers, ops)
    plain = expected_deliveries(superpeers, [op for op in ops if op["op"] != "publish_schema"])
    event(f"entailment changed the deliveries: {expected != plain}")
    assert simulation.deliveries() == expected
    assert simulation.report()["changes"] == expected_changes(superpeers, ops)
    check_routing(simulation)  # schemas included: every member knows every live origin's


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(with_schemas(churning_workloads()), st.booleans(), st.integers(0, 3))
def test_schemas_survive_backbone_churn(workload, interleave, seed):
    """Schemas ride the advertisements' catch-up: a super-peer that joins, restarts or takes
    over a departed one's positions learns them, and the peers that moved bring theirs."""
    superpeers, ops = workload
    simulation = run(superpeers, ops, interleave=interleave, seed=seed)
    assert simulation.deliveries() == expected_deliveries(superpeers, ops)
    check_routing(simulation)


ARTICLE = f"<{EX}d{{n}}> a <http://purl.org/dc/elements/1.1/article> .\n"
SUBCLASS = f"<http://purl.org/dc/elements/1.1/article> <{RDFS}subClassOf> <{EX}thesis> .\n"


def _ops(*more: dict) -> list[dict]:
    return [
        {"op": "join", "peer": "publisher", "superpeer": 0},
        {"op": "join", "peer": "reader", "superpeer": 1},
        {"op": "join", "peer": "schemer", "superpeer": 2},
        {"op": "advertise", "peer": "publisher", **BROAD},
        {
            "op": "subscribe",
            "peer": "reader",
            "id": "t",
            "query": f"X : t(X, rdf:type, <{EX}thesis>)",
        },
        *more,
    ]


def _publish(n: int) -> dict:
    data = ARTICLE.replace("{n}", str(n))
    return {"op": "publish", "peer": "publisher", "id": f"n{n}", "format": "turtle", "data": data}


def test_a_schema_reaches_a_super_peer_that_joins_later_and_one_that_restarts():
    ops = _ops(
        {"op": "publish_schema", "peer": "schemer", "data": SUBCLASS, "format": "nt"},
        {"op": "superpeer_join"},
        {"op": "join", "peer": "late", "superpeer": 3},
        {"op": "advertise", "peer": "late", **BROAD},
        {"op": "detach", "peer": "schemer"},  # its access point restores it from its store
        {"op": "superpeer_fail", "superpeer": 2},
        {"op": "superpeer_restart", "superpeer": 2},
        {"op": "publish", "peer": "late", "id": "m", "format": "turtle", "data": ARTICLE},
        _publish(1),
    )
    simulation = run(3, ops)
    assert simulation.deliveries()["reader"] == ["m", "n1"] == expected_deliveries(3, ops)["reader"]
    for core in simulation.cores.values():
        assert len(core.schemas.schema.axioms) == 1, core.node_id
    check_routing(simulation)


def test_a_publication_before_the_schema_is_not_entailed_again_and_a_leaver_takes_its_schema():
    ops = _ops(
        _publish(0),
        {"op": "publish_schema", "peer": "schemer", "data": SUBCLASS, "format": "nt"},
        _publish(1),
        {"op": "leave", "peer": "schemer"},
        _publish(2),
    )
    simulation = run(3, ops)
    assert simulation.deliveries()["reader"] == ["n1"] == expected_deliveries(3, ops)["reader"]
    for core in simulation.cores.values():
        assert not core.schemas.schema, core.node_id
    check_routing(simulation)


def test_schemas_beyond_the_limits_are_refused_with_the_reason():
    two = SUBCLASS + f"<{EX}book> <{RDFS}subClassOf> <{EX}thesis> .\n"
    limits = SchemaLimits(max_axioms_per_peer=2, max_axioms_total=3)
    config = CoreConfig(schemas=limits)
    ops = _ops(
        {"op": "publish_schema", "peer": "schemer", "data": two, "format": "nt"},
        {"op": "publish_schema", "peer": "schemer", "data": SUBCLASS, "format": "nt"},  # repeat
        {
            "op": "publish_schema",
            "peer": "schemer",
            "data": f"<{EX}a> <{RDFS}subClassOf> <{EX}b> .",
            "format": "nt",
        },
        {
            "op": "publish_schema",
            "peer": "reader",
            "data": f"<{EX}c> <{RDFS}subClassOf> <{EX}b> .",
            "format": "nt",
        },
        {
            "op": "publish_schema",
            "peer": "reader",
            "data": f"<{EX}e> <{RDFS}subClassOf> <{EX}b> .",
            "format": "nt",
        },
    )
    simulation = run(3, ops, config=config)
    reasons = [error["error"] for error in simulation.errors]
    assert len(reasons) == 2, reasons
    assert "3 axioms, more than max_axioms_per_peer (2)" in reasons[0]
    assert "would know 4 schema axioms, more than max_axioms_total (3)" in reasons[1]
    assert {len(core.schemas.schema.axioms) for core in simulation.cores.values()} == {3}


def test_the_schema_limits_are_configured_in_the_daemons_configuration():
    config = config_from_mapping({"schemas": {"max_axioms_per_peer": 5}})
    limits = config.node_config(tracing=False).routing.schemas
    assert limits == SchemaLimits(max_axioms_per_peer=5)
    with pytest.raises(ConfigError, match="unknown"):
        config_from_mapping({"schemas": {"max_axioms": 5}})
    with pytest.raises(ConfigError, match="must be positive"):
        config_from_mapping({"schemas": {"max_axioms_total": 0}})
