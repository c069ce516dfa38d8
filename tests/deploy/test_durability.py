"""Group commit on a real daemon: what a super-peer acknowledged is in its store when it is
killed, and a group never passes ``[store] max_inputs_per_commit``. (That the fsync comes before
the acknowledgement, which a killed process cannot show since the kernel keeps what was written,
is ``tests/superpeer/test_group_commit.py``'s.)"""

import pytest
import trio

import qel
import wire
from deploy.cluster import Cluster
from deploy.driver import DriverError, RemotePeer, wait_quiet
from superpeer.store import SqliteStore
from wire import messages as m

pytestmark = pytest.mark.process

SUBSCRIPTION = 'X : t(X, dc:subject, S), S = "durability"'
DC = "http://purl.org/dc/elements/1.1/"


def publication(number: int) -> qel.Publication:
    return qel.Publication(
        qel.URI(f"http://example.org/doc{number}"),
        frozenset(
            {
                (qel.URI(DC + "subject"), qel.Literal("durability")),
                (qel.URI(DC + "description"), qel.Literal(f"document {number} " + "x" * 500)),
            }
        ),
        "publisher",
        f"n{number}",
    )


async def attach(cluster: Cluster, nursery: trio.Nursery) -> tuple[RemotePeer, RemotePeer]:
    publisher = RemotePeer("publisher", cluster.addresses[0])
    subscriber = RemotePeer("subscriber", cluster.addresses[0])
    for peer in (publisher, subscriber):
        await peer.connect(nursery)
    await publisher.request(m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]})))
    await subscriber.request(m.Subscribe(id="s", subscription=qel.parse_subscription(SUBSCRIPTION)))
    await wait_quiet(cluster, [publisher, subscriber])
    return publisher, subscriber


async def test_every_publication_acknowledged_before_a_kill_is_in_the_store(tmp_path):
    with Cluster(1, trace=False, tls=False, directory=tmp_path) as cluster:
        async with trio.open_nursery() as nursery:
            publisher, _ = await attach(cluster, nursery)
            before = publisher.received[m.Ack.KIND]  # the advertisement's

            def answered() -> int:
                return publisher.received[m.Ack.KIND] - before

            async def publish() -> None:
                # as fast as taken, fewer unanswered than a connection may have queued (1,000):
                # groups of inputs are still being applied when the first answers leave
                for number in range(2000):
                    await publisher.wait_until(lambda number=number: number - answered() < 900)
                    try:
                        await publisher.request_nowait(m.Publish(publication=publication(number)))
                    except DriverError:
                        if killed:
                            return  # the kill's EOF reached the driver before the cancel did
                        raise

            killed = False
            nursery.start_soon(publish)
            with trio.fail_after(60):
                await publisher.wait_until(lambda: answered() >= 150)
            # one connection's answers come in the order of its requests: these many first ones
            acknowledged = {f"n{k}" for k in range(answered())}
            killed = True
            cluster.kill(0)
            nursery.cancel_scope.cancel()
        assert 150 <= len(acknowledged) < 2000
        assert set(publisher.received) <= {m.Ack.KIND}, publisher.received
    store = SqliteStore(cluster.directories[0] / "state.sqlite")
    try:
        logged = set()
        for data in store.logged_since(0.0):
            notification, _ = wire.decode(data)
            logged.add(notification.publication.id)  # type: ignore[attr-defined]
    finally:
        store.close()
    assert set(acknowledged) <= logged, sorted(set(acknowledged) - logged)[:10]


@pytest.mark.slow
async def test_no_group_passes_the_configured_bound(tmp_path):
    settings = "[store]\nmax_inputs_per_commit = 4\n"
    with Cluster(1, trace=False, tls=False, directory=tmp_path, settings=settings) as cluster:
        async with trio.open_nursery() as nursery:
            publisher, subscriber = await attach(cluster, nursery)
            for number in range(200):
                await publisher.request_nowait(m.Publish(publication=publication(number)))
            with trio.fail_after(60):
                await subscriber.wait_until(lambda: len(subscriber.notifications) >= 200)
                await publisher.wait_until(lambda: publisher.received[m.Ack.KIND] >= 201)
            commits = cluster.status(0)["commits"]
            nursery.cancel_scope.cancel()
    assert commits["largest"] <= 4 and commits["bounded"] > 0, commits
    # the 200 publications at least (the subscriber acknowledges what one read brings at once)
    assert commits["inputs"] > 200, commits


@pytest.mark.slow
async def test_a_notification_from_another_origin_reaches_its_subscriber_before_the_mail_fsync(
    tmp_path,
):
    # README, "What is durable where": the origin's log is synced before the notification
    # leaves it; the subscriber's access point hands it over without waiting for its own fsync,
    # while a notification it is the origin of waits for its log's
    with Cluster(2, trace=False, tls=False, directory=tmp_path) as cluster:
        async with trio.open_nursery() as nursery:
            publisher = RemotePeer("publisher", cluster.addresses[0])
            near = RemotePeer("near", cluster.addresses[0])
            far = RemotePeer("far", cluster.addresses[1])
            for peer in (publisher, near, far):
                await peer.connect(nursery)
            await publisher.request(
                m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]}))
            )
            for subscriber in (near, far):
                subscription = qel.parse_subscription(SUBSCRIPTION)
                await subscriber.request(m.Subscribe(id="s", subscription=subscription))
            await wait_quiet(cluster, [publisher, near, far])
            for number in range(50):
                await publisher.request(m.Publish(publication=publication(number)))
            with trio.fail_after(60):
                for subscriber in (near, far):
                    await subscriber.wait_until(
                        lambda subscriber=subscriber: len(subscriber.notifications) >= 50
                    )
            origin, access_point = cluster.status(0)["commits"], cluster.status(1)["commits"]
            nursery.cancel_scope.cancel()
    assert origin["unsynced"] == 0, origin
    # all of them (50 in the runs so far), but for one that came behind something its
    # connection still held
    assert access_point["unsynced"] >= 40, access_point


@pytest.mark.slow
async def test_a_relay_forwards_without_waiting_for_its_fsync_of_the_origins_log_copy(tmp_path):
    # README, "What is durable where": a relay promises nothing by forwarding another origin's
    # notification, so it does not wait for its group's fsync, even when that group writes
    # (the relay that keeps the origin's log copies fsyncs them)
    with Cluster(4, trace=False, tls=False, directory=tmp_path) as cluster:
        async with trio.open_nursery() as nursery:
            publisher = RemotePeer("publisher", cluster.addresses[0])
            far = RemotePeer("far", cluster.addresses[3])
            for peer in (publisher, far):
                await peer.connect(nursery)
            await publisher.request(
                m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]}))
            )
            await far.request(
                m.Subscribe(id="s", subscription=qel.parse_subscription(SUBSCRIPTION))
            )
            await wait_quiet(cluster, [publisher, far])
            for number in range(50):
                await publisher.request(m.Publish(publication=publication(number)))
            with trio.fail_after(60):
                await far.wait_until(lambda: len(far.notifications) >= 50)
            statuses = [cluster.status(k) for k in range(4)]
            nursery.cancel_scope.cancel()
    origin, relay, access_point = statuses[0], statuses[1], statuses[3]
    received = relay["messages"]["received"]
    assert received.get(m.Notification.KIND) == 50, "the origin's tree to sp3 runs through sp1"
    assert relay["log_copies"]["kept"] == 50, "sp1, the origin's first neighbour, keeps its copies"
    assert origin["commits"]["unsynced"] == 0, origin["commits"]
    # all of them (50 in the runs so far), but for one that came behind a frame its link to
    # sp3 still held (a heartbeat)
    assert relay["commits"]["unsynced"] >= 40, relay["commits"]
    assert access_point["commits"]["unsynced"] >= 40, access_point["commits"]
