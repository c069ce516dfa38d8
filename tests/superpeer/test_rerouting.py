"""Routing the whole poset again in slices (``superpeer.rerouting``; issue 34, "Never hold the
loop"): with one subscription routed per step, inputs handled between slices, routing still
loses nothing (the completeness properties against the oracle), and a node holding 20,000
subscriptions whose neighbour restarts stays a member where routing them in one go did not."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import qel
from poset import SubscriptionPoset
from superpeer.core import CoreConfig
from superpeer.rerouting import Rerouting
from superpeer.sim import Simulation
from tests.superpeer.invariants import check_routing
from tests.superpeer.oracle import expected_deliveries
from tests.superpeer.test_completeness import (
    ELSEWHERE,
    NO_SKEW,
    churning_workloads,
    clocks,
    workloads,
)
from tests.superpeer.test_completeness import run as run_completeness
from tests.superpeer.test_slicing import burst_alone

DC = "http://purl.org/dc/elements/1.1/"

ONE_AT_A_TIME = CoreConfig(routings_per_step=1)
"""Every rerouting in slices of one subscription: each slice a timer call of its own."""


def run(superpeers: int, ops: list[dict], skews=NO_SKEW, **options) -> Simulation:
    return run_completeness(superpeers, ops, skews, config=ONE_AT_A_TIME, **options)


@settings(max_examples=30, deadline=None)
@given(workloads(), st.booleans(), st.integers(0, 3), clocks())
def test_routed_one_subscription_per_step_every_peer_receives_what_the_oracle_says(
    workload, interleave, seed, skews
):
    superpeers, ops = workload
    simulation = run(superpeers, ops, skews, interleave=interleave, seed=seed)
    assert simulation.deliveries() == expected_deliveries(superpeers, ops)
    assert simulation.redeliveries == 0
    check_routing(simulation)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, derandomize=True)
@given(churning_workloads(partitions=True), st.booleans(), st.integers(0, 3), clocks())
def test_routed_one_subscription_per_step_deliveries_survive_churn_and_partitions(
    workload, interleave, seed, skews
):
    """The partition property (``test_completeness``) with every rerouting in slices of one:
    the cube changes, neighbours restart, origins depart and settle windows end while the
    routes of the last change are still being sent."""
    superpeers, ops = workload
    simulation = run(superpeers, ops, skews, interleave=interleave, seed=seed)
    assume(not any(ELSEWHERE in str(error["error"]) for error in simulation.errors))
    simulation.apply({"op": "wait", "seconds": 60})
    assume(not simulation.deferred)
    assert simulation.deliveries() == expected_deliveries(superpeers, ops)
    cubes = simulation.cubes()
    assert len(cubes) == 1 and None not in cubes, cubes
    check_routing(simulation)


def test_a_node_that_joins_while_routes_are_sent_in_slices_gets_them_all():
    """Four super-peers whose subscriptions (60 at the first) are routed again one per step
    when a fifth joins: once quiet, every core holds what a network built in that shape would,
    and each slice was a timer call of its own."""
    ops: list[dict] = [
        {"op": "join", "peer": "reader", "superpeer": 0},
        {"op": "join", "peer": "press", "superpeer": 3},
        {"op": "advertise", "peer": "press", "schemas": ["dc", "rdf"]},
    ]
    ops += [
        {
            "op": "subscribe",
            "peer": "reader",
            "id": f"s{year}",
            "query": f"X : t(X, dc:date, D), D = {1900 + year}",
        }
        for year in range(60)
    ]
    ops.append({"op": "superpeer_join"})
    ops += [
        {
            "op": "publish",
            "peer": "press",
            "id": f"p{year}",
            "data": "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
            f"<http://example.org/p{year}> dc:date {1900 + year} .",
        }
        for year in range(0, 60, 7)
    ]
    simulation = run(4, ops)
    assert simulation.deliveries() == expected_deliveries(4, ops)
    check_routing(simulation)
    assert simulation.cores["sp0"].statistics.rerouted >= 60
    assert all(core.rerouting() == 0 for core in simulation.cores.values())


def _poset(count: int) -> SubscriptionPoset:
    poset = SubscriptionPoset()
    for year in range(count):
        query = f"@prefix dc: <{DC}> .\nX : t(X, dc:date, D), D = {1900 + year}"
        poset.insert(qel.parse_subscription(query), "peer:p", f"s{year}")
    return poset


def test_a_pass_goes_over_the_poset_as_it_is_when_it_starts():
    """A pass asked for takes the nodes held when it starts, most general first; a node
    removed after that is still listed (``_continue_rerouting`` skips what the poset no longer
    holds: it would route a subscription nobody holds)."""
    poset = _poset(3)
    queue = Rerouting()
    queue.ask(5.0, 0.0)
    since, first = queue.take(1, poset.general_first)
    assert since == 5.0 and [step.node for step in first] == poset.general_first()[:1]
    poset.remove("peer:p", "s1")
    _, rest = queue.take(10, poset.general_first)
    assert [poset.holds(step.node) for step in rest] == [False, True]
    assert not queue and queue.due_at is None


def test_what_is_asked_while_a_pass_runs_is_merged_into_the_next_pass():
    """However many origins announce while a pass runs, one next pass serves them all: the
    union of what each asked, since the oldest; the running pass goes on."""
    poset = _poset(4)
    first, second, third, fourth = poset.general_first()
    queue = Rerouting()
    queue.ask(1.0, 10.0, only=[first, second, third])
    queue.take(1, poset.general_first)  # the pass runs
    for number, origin in enumerate(["sp1", "sp2", "sp3"]):
        queue.ask(2.0 + number, 11.0 + number, toward=origin)
    assert queue.since == 1.0 and len(queue) == 2 + 1
    _, running = queue.take(10, poset.general_first)
    assert [step.node for step in running] == [second, third]
    since, steps = queue.take(10, poset.general_first)
    assert since == 2.0
    assert [(s.node, s.reconcile, s.toward) for s in steps] == [
        (node, False, {"sp1", "sp2", "sp3"}) for node in (first, second, third, fourth)
    ]
    assert not queue


def test_a_next_pass_that_does_all_the_running_one_does_replaces_it():
    poset = _poset(3)
    queue = Rerouting()
    queue.ask(1.0, 10.0, toward="sp1")
    queue.take(1, poset.general_first)
    queue.ask(2.0, 11.0, reconcile=True)  # every node, any origin, reconciled
    assert len(queue) == 1  # the running one is gone: only the next is left
    since, steps = queue.take(10, poset.general_first)
    assert since == 1.0  # what the replaced one had not sent yet is as late as it was
    assert [(s.node, s.reconcile, s.toward) for s in steps] == [
        (node, True, None) for node in poset.general_first()
    ]


def test_nothing_asked_of_no_subscription_is_nothing_due():
    queue = Rerouting()
    queue.ask(1.0, 10.0, only=[])
    assert not queue and queue.due_at is None


@pytest.mark.slow
def test_a_node_whose_neighbour_restarts_with_20000_subscriptions_stays_a_member():
    """The node holds 20,000 subscriptions of every shape, all going toward its neighbour,
    which restarts: every route must be sent again. In one go that took some 3.5 s of CPU in
    one call (7.5 s before a withdrawal toward a neighbour gone stopped looking through what it
    covered; 2.1 s since stop 78's look-ups), and against a failure timeout of 1 s the
    restarted neighbour declares it failed; in slices of ``routings_per_step`` (the default) it
    stays a member (its longest silence 0.23 s on a quiet machine). At 2 s, the timeout this
    test had until stop 78, the call in one go was too close to it to show anything in CI."""
    whole = burst_alone(20_000, bench="restart", routings_per_step=20_001, failure_seconds=1.0)
    assert whole.declared_failed > 0, "too fast to show anything: make it larger"
    sliced = burst_alone(
        20_000,
        bench="restart",
        routings_per_step=CoreConfig().routings_per_step,
        failure_seconds=1.0,
    )
    assert sliced.waited > 1
    assert sliced.declared_failed == 0
    assert sliced.longest_silence < 1.0
