"""Hostile connections against real super-peer daemons on 127.0.0.1, over TLS and plaintext:
malformed frames sent in the same write as a valid ``Hello``, connections that never identify
(silent after TLS, stuck inside the TLS handshake), and the per-address limit on connections not
identified yet. Each must end that connection only: well-behaved peers connected before and after
carry on, the daemon stays a member, its counters say what happened. One cluster per transport.

These found that a connection that never finished the TLS handshake was never closed (the node's
admission deadline closed it only once the writer ran, after TLS), and that the deadline of a new
connection could be enforced only at the node's next timer (up to ``housekeeping_seconds`` late).
"""

import itertools
import json
import ssl
import struct
import time
from collections.abc import Iterator

import msgpack
import pytest
import trio

import crypto
import qel
import wire
from deploy.cluster import Cluster
from deploy.driver import DriverError, RemotePeer, wait_quiet
from superpeer.cli import control
from wire import messages as m
from wire.framing import FrameDecoder, frame

pytestmark = [pytest.mark.process, pytest.mark.slow]

ADMISSION = 4.0
"""``admission_seconds`` of the hostile clusters (TLS, Hello and identification, in all): long
enough for ``SILENT`` TLS connections to be opened before the first one's deadline."""
SLACK = ADMISSION
"""How late past its deadline a busy daemon may close a connection: it is one event loop, and
the client's clock starts before its TLS handshake, which waits behind up to 1,000 others (on a
loaded 2-core machine, 2 s of slack was once 0.94 s short). Never closed would be 10 s more.
How early is checked loosely (half the deadline): the daemon times admission on the wall
clock."""
SILENT = 1000
"""Connections that never identify, opened at once (the issue's figure)."""
SETTINGS = f"[limits]\nadmission_seconds = {ADMISSION}\nmax_unidentified_per_address = 2000\n"
TITLED = "X : t(X, dc:title, T)"


@pytest.fixture(scope="module", params=["tls", "plaintext"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two super-peers; the tests attack the first, a publisher sits on the second."""
    with Cluster(2, trace=False, tls=request.param == "tls", settings=SETTINGS) as running:
        yield running


def ca_of(cluster: Cluster):
    return cluster.ca_certificate if cluster.tls else None


async def status(cluster: Cluster, k: int = 0) -> dict:
    return json.loads((await control(cluster.directories[k], "status")).body)


async def idle(cluster: Cluster, k: int = 0) -> dict:
    """Super-peer ``k``'s status once no peer is attached to it (a previous test's peers may
    have hung up a moment ago)."""
    with trio.fail_after(10):
        while (report := await status(cluster, k))["peers"]["attached"]:
            await trio.sleep(0.02)
    return report


async def open_connection(address: str, ca) -> trio.abc.Stream:
    """TCP, then the whole TLS handshake when ``ca`` is given."""
    host, _, port = address.rpartition(":")
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, int(port))
    if ca is None:
        return stream
    secure = trio.SSLStream(stream, crypto.peer_client_context(ca=ca), server_hostname=host)
    try:
        await secure.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return secure


async def read_to_end(stream: trio.abc.Stream, timeout: float) -> bytes:
    """Everything the daemon sends until it closes (``TooSlowError`` if it does not)."""
    chunks = []
    with trio.fail_after(timeout):
        try:
            while data := await stream.receive_some(65536):
                chunks.append(data)
        except trio.BrokenResourceError:  # TLS closed without close_notify, or a reset
            pass
    return b"".join(chunks)


def messages(data: bytes) -> list[object]:
    return [wire.decode(payload)[0] for payload in FrameDecoder().feed(data)]


def hello(name: str) -> bytes:
    return frame(
        wire.encode(m.Hello(role="peer", node_id=name, address="", protocol=wire.PROTOCOL_VERSION))
    )


def subscribe(sid: str) -> bytes:
    return frame(wire.encode(m.Subscribe(id=sid, subscription=qel.parse_subscription(TITLED))))


MALFORMED = {
    # what follows a valid Hello in the same write; the LinkError's reason (None: no error, the
    # client closes)
    "not_msgpack": (struct.pack(">I", 8) + b"\xc1" * 8, "not a msgpack message"),
    "oversized_length": (struct.pack(">I", 50_000_000) + b"x" * 64, "max_frame_bytes"),
    "unknown_kind": (
        frame(msgpack.packb([wire.PROTOCOL_VERSION, "peer.hack", "", {}])),
        "unknown message kind 'peer.hack'",
    ),
    "kind_not_allowed_now": (hello("mallory-again"), "link.hello "),
    "truncated_then_close": (subscribe("cut")[:-7], None),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_a_malformed_frame_after_a_valid_hello_ends_that_connection_only(cluster, kind):
    ca, address = ca_of(cluster), cluster.addresses[0]
    tail, reason = MALFORMED[kind]
    before = RemotePeer(f"before-{kind}", address, ca=ca)
    after = RemotePeer(f"after-{kind}", address, ca=ca)
    publisher = RemotePeer(f"publisher-{kind}", cluster.addresses[1], ca=ca)
    await idle(cluster)
    async with trio.open_nursery() as nursery:
        await before.connect(nursery)
        await publisher.connect(nursery)
        await publisher.request(
            m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]}))
        )
        start = await status(cluster)

        hostile = await open_connection(address, ca)
        try:
            await hostile.send_all(hello(f"mallory-{kind}") + tail)
            if reason is not None:
                received = messages(await read_to_end(hostile, 10))
                assert isinstance(received[-1], m.LinkError), received
                assert reason in received[-1].reason
            else:  # the daemon answered the Hello and waits for the rest of the frame: hang up
                with trio.fail_after(10):
                    got = b""
                    while not any(isinstance(x, m.Welcome) for x in messages(got)):
                        got += await hostile.receive_some(65536)
                received = messages(got)
        finally:
            await trio.aclose_forcefully(hostile)
        # (a plaintext access point measures the peer's clock as soon as it is established)
        assert {type(x) for x in received[:-1]} <= {m.Welcome, crypto.Challenge, m.Clock}, received

        await after.connect(nursery)
        for peer in (before, after):
            answer = await peer.request(
                m.Subscribe(id="titled", subscription=qel.parse_subscription(TITLED))
            )
            assert not isinstance(answer, m.LinkError), answer
        [publication] = qel.parse_publications(
            '<http://ex/a> <http://purl.org/dc/elements/1.1/title> "T" .', "nt", id=f"p-{kind}"
        )
        await publisher.request(m.Publish(publication=publication))
        await wait_quiet(cluster, [before, after, publisher])
        for peer in (before, after):
            assert [n.publication.id for n in peer.notifications] == [f"p-{kind}"], peer.name

        end = await status(cluster)
        assert end["state"] == "member" and cluster.processes[0].poll() is None
        assert end["violations"] == start["violations"] + (reason is not None)
        assert end["auth_failures"] == start["auth_failures"]
        assert end["connections"] == start["connections"] + 1, "the hostile one is gone"
        for peer in (before, after, publisher):
            await peer.disconnect()
        nursery.cancel_scope.cancel()


def client_hello_start(ca) -> bytes:
    """The first bytes of a TLS ClientHello, as a real client would send them."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = crypto.peer_client_context(ca=ca).wrap_bio(
        incoming, outgoing, server_hostname="127.0.0.1"
    )
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    data = outgoing.read()
    return data[: len(data) // 2]


async def test_connections_that_never_identify_are_closed_at_the_admission_deadline(cluster):
    """``SILENT`` connections: most complete TLS (or connect, in plaintext) and say nothing; some
    stop inside the TLS handshake (nothing sent, or half a ClientHello; half a frame header in
    plaintext). Every one is closed by the daemon ``admission_seconds`` after it was accepted."""
    ca, address = ca_of(cluster), cluster.addresses[0]
    host, _, port = address.rpartition(":")
    stuck = SILENT // 10
    partial = client_hello_start(ca) if ca is not None else b"\x00\x00"
    start = await idle(cluster)
    opened: list[float] = [0.0] * SILENT
    closed: list[float] = [0.0] * SILENT
    said: list[bytes] = [b""] * SILENT
    limiter = trio.CapacityLimiter(64)

    async def silent(index: int) -> None:
        async with limiter:
            opened[index] = time.monotonic()
            if index < stuck:  # inside the handshake, or before it
                stream: trio.abc.Stream = await trio.open_tcp_stream(host, int(port))
                if index % 2:
                    await stream.send_all(partial)
            else:
                stream = await open_connection(address, ca)
        try:
            said[index] = await read_to_end(stream, ADMISSION + SLACK + 10)
        finally:
            await trio.aclose_forcefully(stream)
        closed[index] = time.monotonic()

    began = time.monotonic()
    async with trio.open_nursery() as nursery:
        for index in range(SILENT):
            nursery.start_soon(silent, index)
    last_opened = max(opened)
    lived = [c - o for o, c in zip(opened, closed, strict=True)]
    assert min(lived) > ADMISSION / 2, f"closed early: {min(lived):.2f} s"
    assert max(lived) < ADMISSION + SLACK, f"closed late: {max(lived):.2f} s"
    changes = sorted([(t, 1) for t in opened] + [(t, -1) for t in closed])
    peak = max(itertools.accumulate(change for _, change in changes))
    assert peak >= SILENT // 2, f"only {peak} were open at once"
    for index in range(SILENT):
        if ca is not None and index < stuck:  # no TLS to say why through
            assert said[index] == b""
            continue
        [error] = messages(said[index])
        assert isinstance(error, m.LinkError) and "admission_seconds" in error.reason

    with trio.fail_after(10):  # the daemon's side of the last closes may lag the client's
        while (end := await status(cluster))["connections"] != start["connections"]:
            await trio.sleep(0.02)
    assert end["violations"] == start["violations"] + SILENT, "each one is counted"
    assert end["state"] == "member" and cluster.processes[0].poll() is None
    good = RemotePeer("good-after-silence", address, ca=ca)
    async with trio.open_nursery() as nursery:
        await good.connect(nursery)
        answer = await good.request(
            m.Subscribe(id="titled", subscription=qel.parse_subscription(TITLED))
        )
        assert not isinstance(answer, m.LinkError), answer
        await good.disconnect()
        nursery.cancel_scope.cancel()
    print(
        f"{SILENT} silent connections opened in {last_opened - began:.2f} s, {peak} at once,"
        f" closed after {min(lived):.2f}..{max(lived):.2f} s (admission_seconds={ADMISSION})"
    )


LIMIT = 4
LIMITED_ADMISSION = 2.0


@pytest.fixture
def limited() -> Iterator[Cluster]:
    settings = (
        f"[limits]\nadmission_seconds = {LIMITED_ADMISSION}\n"
        f"max_unidentified_per_address = {LIMIT}\n"
        "[logging]\nrepeat_seconds = 3600.0\n"  # every refusal of the test within one interval
    )
    with Cluster(1, trace=False, settings=settings) as running:
        yield running


async def test_the_per_address_limit_refuses_extra_unidentified_connections_at_once(limited):
    """``max_unidentified_per_address`` connections from 127.0.0.1 that say nothing take every
    slot of the address until their admission deadline; meanwhile further connections from it,
    a good peer's included, are closed at once (by design: the limit is per address; the refusal
    is in the daemon's log, once, the repeats held back, and every one in its
    ``refused_connections``, as the client gets no TLS to hear a reason through). Once the silent
    ones are closed, the good peer connects."""
    ca, address = limited.ca_certificate, limited.addresses[0]
    host, _, port = address.rpartition(":")
    start = await idle(limited)
    holders: list[trio.abc.Stream] = []
    opened: list[float] = []
    for index in range(LIMIT):  # half complete TLS, half stop before it
        opened.append(time.monotonic())
        if index % 2:
            holders.append(await open_connection(address, ca))
        else:
            holders.append(await trio.open_tcp_stream(host, int(port)))
    with trio.fail_after(10):
        while (await status(limited))["connections"] < LIMIT:
            await trio.sleep(0.01)

    extras = 3
    for _ in range(extras):
        asked = time.monotonic()
        extra = await trio.open_tcp_stream(host, int(port))
        try:
            assert await read_to_end(extra, LIMITED_ADMISSION / 2) == b""
        finally:
            await trio.aclose_forcefully(extra)
        assert time.monotonic() - asked < LIMITED_ADMISSION / 2, (
            "refused at once, not at the deadline"
        )
    good = RemotePeer("good-beside-the-limit", address, ca=ca)
    async with trio.open_nursery() as nursery:
        with pytest.raises((trio.BrokenResourceError, DriverError)):
            await good.connect(nursery)
        refused = await status(limited)
        assert refused["refused_connections"] == start["refused_connections"] + extras + 1
        log = (limited.directories[0] / "stderr.log").read_text()
        assert log.count("event=connection_refused") == 1
        assert "reason='max_unidentified_per_address'" in log
        assert refused["connections"] == LIMIT, "those within the limit wait for their deadline"

        for index, stream in enumerate(holders):
            try:
                said = await read_to_end(stream, LIMITED_ADMISSION + SLACK + 5)
            finally:
                await trio.aclose_forcefully(stream)
            lived = time.monotonic() - opened[index]
            assert LIMITED_ADMISSION / 2 < lived < LIMITED_ADMISSION + SLACK, (index, lived)
            if index % 2:
                [error] = messages(said)
                assert isinstance(error, m.LinkError) and "admission_seconds" in error.reason
            else:
                assert said == b"", "no TLS to say why through"

        await good.connect(nursery)
        answer = await good.request(
            m.Subscribe(id="titled", subscription=qel.parse_subscription(TITLED))
        )
        assert not isinstance(answer, m.LinkError), answer
        end = await status(limited)
        assert end["state"] == "member" and end["violations"] == start["violations"] + LIMIT
        await good.disconnect()
        nursery.cancel_scope.cancel()
