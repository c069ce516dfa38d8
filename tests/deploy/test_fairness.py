"""Rate limits on a real daemon (``superpeer.ratelimit``): a publisher over its rate is read more
slowly (``PauseReading``), the rest of a read it sent waiting for the rate too, and loses nothing;
a subscription over its rate is refused on the wire with the time to ask again. One peer's read
takes turns with the other connections (``read_slice_seconds``)."""

import time

import pytest
import trio

import qel
from deploy.cluster import Cluster
from deploy.driver import RemotePeer, wait_quiet
from wire import messages as m

pytestmark = pytest.mark.process

DC = "http://purl.org/dc/elements/1.1/"
RATE, BURST, COUNT = 200.0, 10, 300
SIZE = 1000
SETTINGS = f"""[limits]
publications_per_second = {RATE}
publication_burst = {BURST}
publication_contention_seconds = 3600.0
subscriptions_per_second = 1.0
subscription_burst = 1
"""


def publication(number: int) -> qel.Publication:
    statements = {(qel.URI(DC + "title"), qel.Literal(f"document {number} " + "x" * SIZE))}
    return qel.Publication(
        qel.URI(f"http://example.org/doc{number}"), frozenset(statements), "publisher", f"n{number}"
    )


QUERY = qel.parse_subscription("X : t(X, dc:title, T)")


async def _publisher_and_subscriber(
    cluster: Cluster, nursery: trio.Nursery
) -> tuple[RemotePeer, RemotePeer]:
    """A publisher that advertised and a subscriber to all it publishes, both connected."""
    publisher = RemotePeer("publisher", cluster.addresses[0])
    subscriber = RemotePeer("subscriber", cluster.addresses[0])
    for peer in (publisher, subscriber):
        await peer.connect(nursery)
    await publisher.request(m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]})))
    await subscriber.request(m.Subscribe(id="s1", subscription=QUERY))
    return publisher, subscriber


async def test_a_publisher_over_its_rate_is_slowed_and_loses_nothing(tmp_path):
    with Cluster(1, trace=False, tls=False, directory=tmp_path, settings=SETTINGS) as cluster:
        async with trio.open_nursery() as nursery:
            publisher, subscriber = await _publisher_and_subscriber(cluster, nursery)
            # another peer publishes (something nobody subscribed to): the publisher is held to
            # its rate only beside others (alone it goes as fast as the daemon takes it)
            statements = {(qel.URI(DC + "creator"), qel.Literal("someone else"))}
            other = qel.Publication(
                qel.URI("http://example.org/other"), frozenset(statements), "subscriber", "o1"
            )
            await subscriber.request(m.Publish(publication=other))
            await wait_quiet(cluster, [publisher, subscriber])
            start = time.perf_counter()
            for number in range(COUNT):
                await publisher.request_nowait(m.Publish(publication=publication(number)))
            with trio.fail_after(30):
                await subscriber.wait_until(lambda: len(subscriber.notifications) >= COUNT)
            elapsed = time.perf_counter() - start
            refused = [await subscriber.request(m.Subscribe(id=f"s{k}", subscription=QUERY))
                       for k in (2, 3)]  # fmt: skip
            status = cluster.status(0)
            limited, turns = status["rate_limited"], status["read_turns"]
            nursery.cancel_scope.cancel()
    assert publisher.received[m.Refused.KIND] == 0, "a publication is never refused for its rate"
    # the rest of one read waits for the rate as the next read does (before, a read's 60 or so
    # publications went through at once)
    assert elapsed >= 0.9 * (COUNT - BURST) / RATE, elapsed
    assert turns > 0
    assert limited["publications"] > 0
    assert isinstance(refused[0], m.Ack), "the bucket refilled while the publisher published"
    assert isinstance(refused[1], m.Refused) and refused[1].retry_after > 0
    assert "more subscriptions than 1 per second" in refused[1].reason
    assert limited["subscriptions"] == 1


@pytest.mark.parametrize(("slice_seconds", "sliced"), [(0.000001, True), (60.0, False)])
async def test_a_peers_read_takes_turns_with_the_other_connections(tmp_path, slice_seconds, sliced):
    # a publisher alone is not held to its rate: only ``read_slice_seconds`` makes the rest of a
    # read it sent wait (a pass through the scheduler, the other connections' reads between)
    settings = f"[limits]\nread_slice_seconds = {slice_seconds}\n"
    with Cluster(1, trace=False, tls=False, directory=tmp_path, settings=settings) as cluster:
        async with trio.open_nursery() as nursery:
            publisher, subscriber = await _publisher_and_subscriber(cluster, nursery)
            for number in range(COUNT):
                await publisher.request_nowait(m.Publish(publication=publication(number)))
            with trio.fail_after(30):
                await subscriber.wait_until(lambda: len(subscriber.notifications) >= COUNT)
            status = cluster.status(0)
            nursery.cancel_scope.cancel()
    assert status["rate_limited"]["publications"] == 0, "alone: not held to its rate"
    assert (status["read_turns"] > 0) is sliced, status["read_turns"]
