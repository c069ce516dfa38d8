"""Per-peer rate limits (``superpeer.ratelimit``, issue 37): the token bucket on its own, the
node applying it to a peer's requests (publications slowed down, subscriptions and look-ups
refused with the time to ask again, nothing lost), the configuration and the counter."""

import math

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

import qel
import wire
from superpeer.actions import PauseReading, ToConnection
from superpeer.config import ConfigError, config_from_mapping
from superpeer.metrics import Metrics
from superpeer.node import NodeConfig
from superpeer.ratelimit import (
    LOOKUPS,
    PUBLICATIONS,
    SUBSCRIPTIONS,
    PeerRateLimiter,
    Rate,
    RateLimits,
    TokenBucket,
)
from superpeer.sim import Simulation
from wire import messages as m
from wire.codec import PROTOCOL_VERSION, WireError

QUERY = "X : t(X, dc:title, T)"
DC = "http://purl.org/dc/elements/1.1/"

# -- the bucket ---------------------------------------------------------------------------------


def test_a_bucket_pays_its_burst_at_once_then_its_rate():
    bucket = TokenBucket(Rate(per_second=10.0, burst=3), now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.1), "the next token in a tenth of a second"
    assert bucket.take(0.05) == pytest.approx(0.05), "a refusal takes nothing"
    assert bucket.take(0.1) == 0.0
    assert bucket.take(100.0) == 0.0 and bucket.tokens == pytest.approx(2.0), "at most burst"


def test_a_bucket_on_credit_says_how_long_the_debt_lasts():
    bucket = TokenBucket(Rate(per_second=100.0, burst=2), now=5.0)
    assert [bucket.take_on_credit(5.0) for _ in range(2)] == [0.0, 0.0]
    assert bucket.take_on_credit(5.0) == pytest.approx(0.01)
    assert bucket.take_on_credit(5.0) == pytest.approx(0.02)
    assert bucket.take_on_credit(5.03) == pytest.approx(0.0, abs=1e-9)
    assert not bucket.full(5.03) and bucket.full(5.05)


@given(
    rate=st.floats(0.5, 1000.0),
    burst=st.integers(1, 50),
    gaps=st.lists(st.floats(0.0, 0.5), min_size=1, max_size=200),
)
def test_what_a_bucket_lets_through_never_exceeds_burst_plus_rate_times_time(rate, burst, gaps):
    bucket = TokenBucket(Rate(per_second=rate, burst=burst), now=0.0)
    now, taken = 0.0, 0
    for gap in gaps:
        now += gap
        wait = bucket.take(now)
        taken += wait == 0.0
        assert wait >= 0.0 and math.isfinite(wait)
        assert taken <= burst + rate * now + 1e-6


@given(gaps=st.lists(st.floats(0.0, 0.01), min_size=1, max_size=100))
def test_a_refused_request_asked_again_after_retry_after_is_taken(gaps):
    bucket = TokenBucket(Rate(per_second=50.0, burst=1), now=0.0)
    now = 0.0
    for gap in gaps:
        now += gap
        wait = bucket.take(now)
        if wait:
            now += wait
            assert bucket.take(now) == 0.0


def test_rates_need_positive_figures():
    with pytest.raises(ValueError, match="per_second > 0"):
        Rate(per_second=0.0, burst=1)
    with pytest.raises(ValueError, match="burst >= 1"):
        Rate(per_second=1.0, burst=0)


def test_the_limiter_keeps_peers_apart_and_forgets_full_buckets():
    limiter = PeerRateLimiter(RateLimits(lookups=Rate(per_second=1.0, burst=1)))
    assert limiter.refusal("a", LOOKUPS, 0.0) == 0.0
    assert limiter.refusal("a", LOOKUPS, 0.0) == pytest.approx(1.001), "a millisecond more"
    assert limiter.refusal("b", LOOKUPS, 0.0) == 0.0, "another peer has its own bucket"
    assert limiter.limited == {PUBLICATIONS: 0, SUBSCRIPTIONS: 0, LOOKUPS: 1}
    limiter.prune(0.5)
    assert len(limiter._buckets) == 2
    limiter.prune(1.0)
    assert limiter._buckets == {}


# -- the node ------------------------------------------------------------------------------------


def attached(rates: RateLimits) -> Simulation:
    """One super-peer, a publisher advertising Dublin Core and a reader subscribed to titles."""
    simulation = Simulation(1, node_config=NodeConfig(rates=rates))
    for op in [
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "join", "peer": "reader", "superpeer": 0},
        {"op": "advertise", "peer": "pub", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "reader", "id": "s0", "query": QUERY},
    ]:
        simulation.apply(op)
    assert simulation.errors == []
    return simulation


def answers(outputs: list) -> list[object]:
    return [
        o.message
        for o in outputs
        if isinstance(o, ToConnection) and isinstance(o.message, m.Ack | m.Refused)
    ]


def acknowledged(outputs: list) -> list[str]:
    return [a.request for a in answers(outputs) if isinstance(a, m.Ack)]


def test_subscriptions_over_the_rate_are_refused_with_the_reason_and_when_to_ask_again():
    simulation = attached(RateLimits(subscriptions=Rate(per_second=10.0, burst=3)))
    node, now = simulation.nodes["sp0"], simulation.now
    connection = simulation.peers["reader"].connection
    query = qel.parse_subscription(QUERY)
    got, pauses = [], []
    for number in range(1, 5):
        subscribe = m.Subscribe(id=f"s{number}", subscription=query)
        outputs = node.peer_message(connection, subscribe, 100, f"r#{number}", now)
        got += answers(outputs)
        pauses += [(o.connection, o.seconds) for o in outputs if isinstance(o, PauseReading)]
    assert [type(answer) for answer in got] == [m.Ack, m.Ack, m.Refused, m.Refused]
    refused = got[2]
    assert pauses == [(connection, got[2].retry_after), (connection, got[3].retry_after)], (
        "the connection is not read until the bucket pays"
    )
    assert refused.request == "subscribe s3"
    assert "more subscriptions than 10 per second (bursts of 3)" in refused.reason
    assert 0.0 < refused.retry_after <= 0.101, "a tenth of a second per subscription"
    assert set(node.core.subscriptions_of("reader")) == {"s0", "s1", "s2"}, "refused: unchanged"
    assert node.status(now)["rate_limited"] == {PUBLICATIONS: 0, SUBSCRIPTIONS: 2, LOOKUPS: 0}
    again = m.Subscribe(id="s3", subscription=query)
    later = now + refused.retry_after
    assert acknowledged(node.peer_message(connection, again, 100, "r#5", later)) == ["subscribe s3"]
    assert "s3" in node.core.subscriptions_of("reader")


def publish(node, connection: int, number: int, now: float, publisher: str = "pub") -> list:
    document = f'<http://example.org/d{number}> <{DC}title> "t{number}" .'
    [publication] = qel.parse_publications(document, "nt", publisher=publisher, id=f"p{number}")
    return node.peer_message(connection, m.Publish(publication=publication), 100, "p#", now)


def test_publications_over_the_rate_go_on_and_pause_reading_the_publisher():
    simulation = attached(RateLimits(publications=Rate(per_second=100.0, burst=2)))
    node, now = simulation.nodes["sp0"], simulation.now
    connection = simulation.peers["pub"].connection
    publish(node, simulation.peers["reader"].connection, 99, now, "reader")  # beside another
    pauses, got = [], []
    for number in range(4):
        document = f'<http://example.org/d{number}> <{DC}title> "t{number}" .'
        [publication] = qel.parse_publications(document, "nt", publisher="pub", id=f"p{number}")
        outputs = node.peer_message(
            connection, m.Publish(publication=publication), 100, f"p#{number}", now
        )
        pauses += [o for o in outputs if isinstance(o, PauseReading)]
        got += answers(outputs)
    assert [a.request for a in got if isinstance(a, m.Ack)] == [
        f"publish p{number}" for number in range(4)
    ], "nothing refused"
    assert [p.connection for p in pauses] == [connection, connection]
    assert [p.seconds for p in pauses] == pytest.approx([0.01, 0.02])
    assert node.status(now)["rate_limited"][PUBLICATIONS] == 2


def test_a_publisher_alone_is_not_held_and_is_held_at_once_beside_another():
    """Work-conserving: no pause while no other peer published within contention_seconds; the
    bucket is emptied but not in debt, so beside another the rate holds from the next one."""
    rates = RateLimits(publications=Rate(per_second=100.0, burst=2), contention_seconds=1.0)
    simulation = attached(rates)
    node, now = simulation.nodes["sp0"], simulation.now
    pub, reader = simulation.peers["pub"].connection, simulation.peers["reader"].connection

    def paused(outputs: list) -> list[float]:
        return [o.seconds for o in outputs if isinstance(o, PauseReading)]

    alone = [paused(publish(node, pub, number, now)) for number in range(50)]
    assert alone == [[]] * 50, "alone: as fast as the super-peer takes it"
    assert node.status(now)["rate_limited"][PUBLICATIONS] == 0
    publish(node, reader, 100, now, "reader")
    assert paused(publish(node, pub, 50, now)) == pytest.approx([0.01]), "no debt carried"
    assert paused(publish(node, pub, 51, now)) == pytest.approx([0.02])
    later = now + rates.contention_seconds + 0.1  # the reader has been quiet that long
    assert paused(publish(node, pub, 52, later)) == []


def test_a_lookup_over_the_rate_is_refused_with_retry_after():
    simulation = attached(RateLimits(lookups=Rate(per_second=1.0, burst=1)))
    node, now = simulation.nodes["sp0"], simulation.now
    connection = simulation.peers["reader"].connection
    node.peer_message(connection, m.Locate(id="l1", public_id="pub"), 50, "r#1", now)
    outputs = node.peer_message(connection, m.Locate(id="l2", public_id="pub"), 50, "r#2", now)
    [refused] = answers(outputs)
    assert refused.request == "locate l2" and refused.retry_after == pytest.approx(1.001)
    assert refused.reason == "more lookups than 1 per second (bursts of 1): ask again in 1.001 s"


# -- configuration, wire, metrics -----------------------------------------------------------------


def test_the_rates_are_configured_in_limits_and_checked():
    config = config_from_mapping(
        {"limits": {"publications_per_second": 5, "publication_burst": 7, "lookup_burst": 3}}
    )
    rates = config.node_config(tracing=False).rates
    assert rates.publications == Rate(per_second=5.0, burst=7)
    assert rates.lookups == Rate(per_second=50.0, burst=3)
    assert rates.subscriptions == Rate(per_second=100.0, burst=2000)
    assert rates.contention_seconds == 1.0
    contended = config_from_mapping({"limits": {"publication_contention_seconds": 0.25}})
    assert contended.node_config(tracing=False).rates.contention_seconds == 0.25
    for bad in (
        {"lookup_burst": 0},
        {"subscriptions_per_second": -1.0},
        {"publication_burst": 1.5},
        {"publication_contention_seconds": -1.0},
    ):
        with pytest.raises(ConfigError):
            config_from_mapping({"limits": bad})


def test_a_refusal_reads_with_and_without_retry_after():
    old = msgpack.packb([PROTOCOL_VERSION, m.Refused.KIND, "", {"request": "x", "reason": "y"}])
    assert wire.decode(old)[0] == m.Refused(request="x", reason="y", retry_after=0.0)
    new = m.Refused(request="x", reason="y", retry_after=0.25)
    assert wire.decode(wire.encode(new))[0] == new
    bad = msgpack.packb(
        [PROTOCOL_VERSION, m.Refused.KIND, "", {"request": "x", "reason": "y", "retry_after": -1.0}]
    )
    with pytest.raises(WireError, match="retry_after"):
        wire.decode(bad)


def test_the_rate_limited_counter_reaches_the_exposition():
    simulation = attached(RateLimits(lookups=Rate(per_second=1.0, burst=1)))
    node, now = simulation.nodes["sp0"], simulation.now
    connection = simulation.peers["reader"].connection
    for number in range(3):
        locate = m.Locate(id=f"l{number}", public_id="pub")
        node.peer_message(connection, locate, 50, f"r#{number}", now)
    status = {**node.status(now), "uptime_seconds": 1.0}  # the daemon adds the uptime
    text = generate_latest(Metrics(lambda: status).registry()).decode()
    for line in (
        'superpeer_rate_limited_requests_total{kind="lookups"} 2.0',
        'superpeer_rate_limited_requests_total{kind="publications"} 0.0',
        'superpeer_rate_limited_requests_total{kind="subscriptions"} 0.0',
    ):
        assert line in text, line
