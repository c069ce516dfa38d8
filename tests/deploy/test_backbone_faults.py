"""Backbone faults on real daemons (TLS, 127.0.0.1): a relay killed mid-stream, an access point
killed and restarted under its subscriber, a super-peer joining a running network. Short failure
timeouts (0.5 s heartbeats, 2 s of silence) keep each test to a few tens of seconds; every wait is
for a condition, with a deadline."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import pytest
import trio

import qel
from deploy.cluster import Cluster, free_ports
from deploy.driver import DriverError, RemotePeer, cube_problems, quiet_problems, wait_quiet
from qel.terms import XSD_INTEGER
from wire import messages as m

pytestmark = [pytest.mark.process, pytest.mark.slow]

SETTINGS = """[limits]
heartbeat_seconds = 0.5
failure_seconds = 2.0
[recovery]
handover_seconds = 2.0
"""
TITLE = "http://purl.org/dc/elements/1.1/title"
DATE = "http://purl.org/dc/elements/1.1/date"
CREATOR = "http://purl.org/dc/elements/1.1/creator"


def publication(number: int, owner: str, creator: str = "Nejdl") -> qel.Publication:
    statements = {
        (qel.URI(TITLE), qel.Literal(f"Document {number} of {owner}")),
        (qel.URI(DATE), qel.Literal(str(2000 + number % 25), XSD_INTEGER)),
        (qel.URI(CREATOR), qel.Literal(creator)),
    }
    return qel.Publication(
        qel.URI(f"http://faults.example.org/{owner}/doc{number}"),
        frozenset(statements),
        owner,
        f"{owner}-{number}",
    )


ADVERTISEMENT = m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]}))


def subscribe_all(sid: str = "all") -> m.Subscribe:
    return m.Subscribe(id=sid, subscription=qel.parse_subscription("X : t(X, dc:title, T)"))


def counting(peer: RemotePeer) -> Counter[str]:
    """Every copy of a notification that reaches ``peer``, by publication id (before the
    peer's own de-duplication): what "exactly once" is checked against."""
    copies: Counter[str] = Counter()
    original = peer._take

    def take(notify: m.Notify) -> None:
        copies[notify.publication.id] += 1
        original(notify)

    peer._take = take  # type: ignore[method-assign]
    return copies


def node_index(cluster: Cluster, node: str) -> int:
    return int(node.removeprefix("sp"))


async def until(condition: Callable[[], object], timeout: float, what: str) -> None:
    with trio.move_on_after(timeout):
        while not condition():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"not within {timeout} s: {what}")


async def until_repaired(cluster: Cluster, dead: set[str], timeout: float = 30) -> float:
    """Wait for a whole cube without ``dead``; the monotonic time it was first seen."""
    problems: list[str] = ["not asked yet"]
    with trio.move_on_after(timeout):
        while problems := cube_problems(await cluster.statuses(), dead):
            await trio.sleep(0.02)
        return time.monotonic()
    raise AssertionError(f"the cube was not repaired within {timeout} s: {problems}")


async def quiet_but_for(cluster: Cluster, dead: str, timeout: float = 30) -> None:
    """Until nothing is left to do (``wait_quiet``) but the frames queued for ``dead``: what
    the others routed to it after it was repaired away waits for a next incarnation (the one
    that rejoins takes it), so a super-peer killed for good holds its link's queue."""
    stable, problems = 0, ["not asked yet"]
    with trio.move_on_after(timeout):
        while stable < 2:
            problems = []
            for status in await cluster.statuses():
                if not status:
                    continue
                waiting = status["backbone_in_flight"]
                waiting -= status["links"].get(dead, {}).get("unacknowledged", 0)
                if waiting:
                    problems.append(f"{status['node']} has {waiting} frames unacknowledged")
                problems += quiet_problems([{**status, "backbone_in_flight": 0}])
            stable = stable + 1 if not problems else 0
            await trio.sleep(0.02)
        return
    raise AssertionError(f"not quiet within {timeout} s: {problems}")


def corners(cluster: Cluster) -> dict[int, int]:
    """Position -> cluster index, on a 4-super-peer cube where each holds one position."""
    where = {}
    for k in cluster.live():
        [position] = cluster.status(k)["positions"]
        where[position] = k
    assert sorted(where) == [0, 1, 2, 3]
    return where


def relay_of(cluster: Cluster, origin: int, access: int) -> int:
    """The super-peer other than the publisher's and the subscriber's that sent notifications
    on (``sp.notification``): the relay, read from the statuses."""
    relays = [
        k
        for k in cluster.live()
        if k not in (origin, access)
        and cluster.status(k)["messages"]["sent"].get("sp.notification", 0) > 0
    ]
    assert len(relays) == 1, relays
    return relays[0]


async def publish_acknowledged(publisher: RemotePeer, number: int, acked: list[str]) -> None:
    item = publication(number, publisher.name)
    answer = await publisher.request(m.Publish(publication=item))
    assert isinstance(answer, m.Ack), answer
    acked.append(item.id)


def assert_exactly_once(subscriber: RemotePeer, copies: Counter[str], acked: list[str]) -> None:
    received = [n.publication.id for n in subscriber.notifications]
    assert sorted(received) == sorted(acked), (
        f"lost {sorted(set(acked) - set(received))}, "
        f"unexpected {sorted(set(received) - set(acked))}"
    )
    duplicated = {k: c for k, c in copies.items() if c > 1}
    assert not duplicated, f"delivered more than once: {duplicated}"


def test_a_relay_killed_mid_stream_loses_and_duplicates_nothing():
    with Cluster(4, trace=False, settings=SETTINGS) as cluster:
        ca = cluster.ca_certificate
        where = corners(cluster)
        origin, access = where[0], where[3]  # opposite corners: two hops apart

        async def scenario() -> None:
            publisher = RemotePeer("publisher", cluster.addresses[origin], ca=ca)
            subscriber = RemotePeer("subscriber", cluster.addresses[access], ca=ca)
            copies = counting(subscriber)
            acked: list[str] = []
            async with trio.open_nursery() as nursery:
                await publisher.connect(nursery)
                await subscriber.connect(nursery)
                await publisher.request(ADVERTISEMENT)
                await subscriber.request(subscribe_all())
                await wait_quiet(cluster, [publisher, subscriber])
                for number in range(20):
                    await publish_acknowledged(publisher, number, acked)
                    await trio.sleep(0.02)
                await until(lambda: len(subscriber.notifications) == 20, 10, "20 delivered")
                assert {n.hops for n in subscriber.notifications} == {2}
                relay = relay_of(cluster, origin, access)
                cluster.kill(relay)
                killed = time.monotonic()
                repaired: list[float] = []

                async def watch() -> None:
                    repaired.append(await until_repaired(cluster, {f"sp{relay}"}))

                nursery.start_soon(watch)
                number = 20
                while not repaired:  # publishing on through the failure and the repair ...
                    await publish_acknowledged(publisher, number, acked)
                    number += 1
                    await trio.sleep(0.02)
                for extra in range(40):  # ... and after it
                    await publish_acknowledged(publisher, number + extra, acked)
                    await trio.sleep(0.02)
                assert repaired[0] - killed < 15
                await until(
                    lambda: len(subscriber.notifications) == len(acked), 30, "every one delivered"
                )
                await quiet_but_for(cluster, f"sp{relay}")
                assert_exactly_once(subscriber, copies, acked)
                assert len(acked) > 60
                for peer in (publisher, subscriber):
                    await peer.disconnect()
                nursery.cancel_scope.cancel()

        trio.run(scenario)


async def reconnect(peer: RemotePeer, nursery: trio.Nursery, timeout: float = 30) -> str:
    """Connect ``peer`` to its access point again, retrying while it is down or rejoining."""
    with trio.move_on_after(timeout):
        while True:
            try:
                return await peer.connect(nursery)
            except (OSError, DriverError, trio.BrokenResourceError, trio.TooSlowError):
                await trio.sleep(0.2)
    raise AssertionError(f"{peer.name} could not connect to {peer.address} within {timeout} s")


def test_an_access_point_killed_and_restarted_under_its_subscriber_loses_nothing():
    with Cluster(4, trace=False, settings=SETTINGS) as cluster:
        ca = cluster.ca_certificate
        where = corners(cluster)
        origin, access = where[0], where[3]

        async def scenario() -> None:
            publisher = RemotePeer("publisher", cluster.addresses[origin], ca=ca)
            subscriber = RemotePeer("subscriber", cluster.addresses[access], ca=ca)
            copies = counting(subscriber)
            acked: list[str] = []
            async with trio.open_nursery() as nursery:
                await publisher.connect(nursery)
                await subscriber.connect(nursery)
                await publisher.request(ADVERTISEMENT)
                await subscriber.request(subscribe_all())
                await wait_quiet(cluster, [publisher, subscriber])
                publishing = trio.Event()
                stop = trio.Event()

                async def publish() -> None:
                    number = 0
                    while not stop.is_set():
                        await publish_acknowledged(publisher, number, acked)
                        number += 1
                        if number == 20:
                            publishing.set()
                        await trio.sleep(0.02)

                nursery.start_soon(publish)
                await publishing.wait()
                cluster.kill(access)
                await until(lambda: not subscriber.connected, 10, "the subscriber sees it die")
                before = len(acked)
                await trio.to_thread.run_sync(cluster.restart, access)
                assert await reconnect(subscriber, nursery) == f"sp{access}"
                await until_repaired(cluster, set())
                await until(lambda: len(acked) >= before + 60, 30, "publications meanwhile")
                stop.set()
                with trio.move_on_after(30):
                    while not set(acked) <= set(copies):
                        await trio.sleep(0.05)
                missing = [int(k.rpartition("-")[2]) for k in acked if k not in copies]
                assert not missing, f"lost {missing}: killed after {before} acknowledged"
                await wait_quiet(cluster, [publisher, subscriber])
                received = [n.publication.id for n in subscriber.notifications]
                assert sorted(received) == sorted(acked)
                # what the access point sent before it died and the peer's acknowledgement did
                # not reach it is sent again, and the peer keeps one copy: nothing else is twice
                again = {k: c for k, c in copies.items() if c > 1}
                assert len(again) <= before, again
                assert cluster.status(access)["state"] == "member"
                for peer in (publisher, subscriber):
                    await peer.disconnect()
                nursery.cancel_scope.cancel()

        trio.run(scenario)


def test_a_late_joiner_serves_old_publishers_and_reaches_old_subscribers():
    with Cluster(3, trace=False, settings=SETTINGS) as cluster:
        ca = cluster.ca_certificate

        async def scenario() -> None:
            old_publisher = RemotePeer("old-publisher", cluster.addresses[0], ca=ca)
            old_subscriber = RemotePeer("old-subscriber", cluster.addresses[1], ca=ca)
            async with trio.open_nursery() as nursery:
                await old_publisher.connect(nursery)
                await old_subscriber.connect(nursery)
                await old_publisher.request(ADVERTISEMENT)
                await old_subscriber.request(subscribe_all())
                await wait_quiet(cluster, [old_publisher, old_subscriber])
                new = await trio.to_thread.run_sync(cluster.add)
                await until_repaired(cluster, set())
                assert len(cluster.live()) == 4
                new_publisher = RemotePeer("new-publisher", cluster.addresses[new], ca=ca)
                new_subscriber = RemotePeer("new-subscriber", cluster.addresses[new], ca=ca)
                assert await new_publisher.connect(nursery) == f"sp{new}"
                assert await new_subscriber.connect(nursery) == f"sp{new}"
                await new_publisher.request(ADVERTISEMENT)
                nejdl = 'X : t(X, dc:creator, Y), Y contains "Nejdl"'
                await new_subscriber.request(
                    m.Subscribe(id="nejdl", subscription=qel.parse_subscription(nejdl))
                )
                peers = [old_publisher, old_subscriber, new_publisher, new_subscriber]
                await wait_quiet(cluster, peers)
                expected_new: list[str] = []
                expected_old: list[str] = []
                for number in range(20):
                    for publisher in (old_publisher, new_publisher):
                        creator = "Nejdl" if number % 2 else "Koubarakis"
                        item = publication(number, publisher.name, creator)
                        answer = await publisher.request(m.Publish(publication=item))
                        assert isinstance(answer, m.Ack), answer
                        expected_old.append(item.id)
                        if creator == "Nejdl":
                            expected_new.append(item.id)
                await until(
                    lambda: (
                        len(old_subscriber.notifications) == 40
                        and len(new_subscriber.notifications) == 20
                    ),
                    30,
                    "the matching publications delivered",
                )
                await wait_quiet(cluster, peers)
                for subscriber, expected in (
                    (old_subscriber, expected_old),
                    (new_subscriber, expected_new),
                ):
                    received = [n.publication.id for n in subscriber.notifications]
                    assert sorted(received) == sorted(expected), subscriber.name
                    assert subscriber.redeliveries == subscriber.filtered == 0
                for peer in peers:
                    await peer.disconnect()
                nursery.cancel_scope.cancel()

        trio.run(scenario)


def test_a_super_peer_started_while_no_member_answers_joins_when_one_does():
    """Every member it names is silent at its start (here paused; in a chaos run, all of them
    rejoining at once): it asks again, says so, and joins once one answers, rather than exit
    with "cannot join" and leave its peers without an access point."""
    with Cluster(1, trace=False, settings=SETTINGS) as cluster:
        cluster.pause(0)

        async def scenario() -> None:
            async with trio.open_nursery() as nursery:
                added: list[int] = []

                async def add() -> None:
                    added.append(await trio.to_thread.run_sync(cluster.add))

                nursery.start_soon(add)
                log = cluster.root / "sp1" / "stderr.log"
                with trio.fail_after(30):
                    while not log.exists() or "join_contacts_unanswered" not in log.read_text():
                        await trio.sleep(0.05)
                assert "no answer in 5 s" in log.read_text()
                cluster.resume(0)
            assert added == [1]
            await until_repaired(cluster, set())
            assert list(cluster.status(1)["neighbours"]) == ["sp0"]

        trio.run(scenario)


def test_a_super_peer_still_asking_its_join_addresses_stops_on_sigterm(tmp_path):
    """Nobody listens at its join address: it keeps asking (``join_contact_seconds``), and an
    operator's SIGTERM meanwhile stops it at once (it is no member: nothing to hand over),
    rather than wait until it joins or gives up."""
    closed, port = free_ports(2)
    log = tmp_path / "stderr.log"
    command = [
        sys.executable, "-m", "superpeer.cli", "run", "--no-tls", "--listen", f"127.0.0.1:{port}",
        "--data-dir", str(tmp_path / "sp"), "--node-id", "sp9", "--join", f"127.0.0.1:{closed}",
    ]  # fmt: skip
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 30
        while "join_contacts_unanswered" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert "event=stopped_while_starting node=sp9" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
