"""Attacks on a real loopback network (TLS, identification, the backbone CA), and a capture of the
bytes on the wire. Each attack is refused with a clear error and changes nothing: the victim keeps
its subscriptions and still receives everything afterwards, the attacker gets nothing."""

import os
import socket
import ssl
import subprocess
import sys
import time

import pytest
import trio

import crypto
import qel
import wire
from deploy.cluster import Cluster, free_ports
from deploy.driver import DriverError, RemotePeer, peer_key, wait_quiet
from wire import messages as m
from wire.framing import Link, Received, Violation

pytestmark = [pytest.mark.process, pytest.mark.slow]

SUBSCRIPTION = qel.parse_subscription("X : t(X, dc:title, T)")
SCHEMAS = qel.parse_advertisement({"schemas": ["dc"]})
SECRET_TITLE = "the-payload-nobody-may-read-6f1c"


def document(number: int, title: str = "Title") -> qel.Publication:
    [publication] = qel.parse_publications(
        f'<http://ex/doc{number}> <http://purl.org/dc/elements/1.1/title> "{title} {number}" .',
        "nt",
        id=f"n{number}",
    )
    return publication


class Attacker:
    """A hand-made client: TLS (unless told otherwise), then whatever frames the test sends."""

    def __init__(self, address: str, ca, *, tls: bool = True) -> None:
        self.address, self.ca, self.tls = address, ca, tls
        self.stream: trio.abc.Stream | None = None
        self.link = Link(accepting=False)

    async def open(self) -> None:
        host, _, port = self.address.rpartition(":")
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, int(port))
        if self.tls:
            stream = trio.SSLStream(
                stream, crypto.peer_client_context(ca=self.ca), server_hostname=host
            )
            await stream.do_handshake()
        self.stream = stream

    async def send(self, message: object) -> None:
        assert self.stream is not None
        await self.stream.send_all(self.link.send(message))

    async def receive(self) -> list[object]:
        """Messages until the server closes the connection (or 10 s pass)."""
        assert self.stream is not None
        got: list[object] = []
        with trio.move_on_after(10):
            while True:
                try:
                    data = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                if not data:
                    break
                for event in self.link.receive_data(data):
                    if isinstance(event, Received):
                        got.append(event.message)
                    elif isinstance(event, Violation):
                        return got
        return got

    async def close(self) -> None:
        if self.stream is not None:
            await trio.aclose_forcefully(self.stream)


async def until_challenge(attacker: Attacker) -> crypto.Challenge:
    assert attacker.stream is not None
    while True:
        data = await attacker.stream.receive_some(65536)
        assert data, "closed before the challenge"
        for event in attacker.link.receive_data(data):
            assert isinstance(event, Received)
            if isinstance(event.message, crypto.Challenge):
                return event.message


async def first(attacker: Attacker) -> object:
    """The first message after the challenge."""
    assert attacker.stream is not None
    with trio.fail_after(10):
        while True:
            data = await attacker.stream.receive_some(65536)
            assert data, "closed before an answer"
            for event in attacker.link.receive_data(data):
                assert isinstance(event, Received)
                return event.message


@pytest.fixture(scope="module")
def cluster():
    with Cluster(2, trace=True) as running:
        yield running


def test_attacks_on_peer_identity_are_refused_and_change_nothing(cluster):
    ca = cluster.ca_certificate

    async def scenario() -> None:
        victim = RemotePeer("victim", cluster.addresses[0], ca=ca)
        publisher = RemotePeer("publisher", cluster.addresses[1], ca=ca)
        async with trio.open_nursery() as nursery:
            await victim.connect(nursery)
            await publisher.connect(nursery)
            await publisher.request(m.Advertise(advertisement=SCHEMAS))
            await victim.request(m.Subscribe(id="mine", subscription=SUBSCRIPTION))
            await wait_quiet(cluster, [victim, publisher])
            await victim.disconnect()
            victim_id = victim.network_id
            failures_before = cluster.status(0)["auth_failures"]

            # 1. Another peer's public identifier, registered with the attacker's own key.
            thief = Attacker(cluster.addresses[0], ca)
            await thief.open()
            await thief.send(
                m.Hello(role="peer", node_id=victim_id, address="", protocol=wire.PROTOCOL_VERSION)
            )
            challenge = await until_challenge(thief)
            key = peer_key("thief")
            transcript = crypto.transcript(
                purpose="register", nonce=challenge.nonce, verifier_id=challenge.verifier_id,
                verifier_fingerprint=challenge.verifier_fingerprint, public_id=victim_id, channel_binding=b"",
            )  # fmt: skip
            await thief.send(
                crypto.Register(
                    public_id=victim_id,
                    public_key=crypto.public_key_der(key),
                    signature=crypto.sign_transcript(key, transcript),
                )
            )
            [rejected] = [x for x in await thief.receive() if isinstance(x, crypto.Rejected)]
            assert rejected.code == "identifier_mismatch"
            await thief.close()

            # 2. The victim's public identifier with a wrong private identifier.
            guesser = Attacker(cluster.addresses[0], ca)
            await guesser.open()
            await guesser.send(
                m.Hello(role="peer", node_id=victim_id, address="", protocol=wire.PROTOCOL_VERSION)
            )
            challenge = await until_challenge(guesser)
            transcript = crypto.transcript(
                purpose="identify", nonce=challenge.nonce, verifier_id=challenge.verifier_id,
                verifier_fingerprint=challenge.verifier_fingerprint, public_id=victim_id, channel_binding=b"",
            )  # fmt: skip
            await guesser.send(
                crypto.Identify(
                    public_id=victim_id,
                    private_id=os.urandom(32),
                    signature=crypto.sign_transcript(key, transcript),
                )
            )
            [rejected] = [x for x in await guesser.receive() if isinstance(x, crypto.Rejected)]
            assert rejected.code == "bad_signature"
            await guesser.close()

            # 3. A replayed identification response: the victim's genuine Identify, captured from
            # a previous connection, answering a fresh challenge.
            genuine = Attacker(cluster.addresses[0], ca)
            await genuine.open()
            await genuine.send(
                m.Hello(role="peer", node_id=victim_id, address="", protocol=wire.PROTOCOL_VERSION)
            )
            challenge = await until_challenge(genuine)
            prover = crypto.Prover(
                peer_key("victim"), verifier_fingerprint=challenge.verifier_fingerprint,
                verifier_node_id="sp0", private_identifier=victim.private_identifier, issued_by="sp0",
            )  # fmt: skip
            [captured] = prover.receive(challenge)
            await genuine.close()  # the victim's connection drops before the answer arrives
            replayer = Attacker(cluster.addresses[0], ca)
            await replayer.open()
            await replayer.send(
                m.Hello(role="peer", node_id=victim_id, address="", protocol=wire.PROTOCOL_VERSION)
            )
            await until_challenge(replayer)
            await replayer.send(captured.message)
            [rejected] = [x for x in await replayer.receive() if isinstance(x, crypto.Rejected)]
            assert rejected.code == "bad_signature"
            await replayer.close()

            # 4. A Hello naming the victim, then a valid registration of the attacker's own key:
            # refused before anything is recorded, so that key can still register as itself.
            async def register_thief(hello_id: str) -> list[object]:
                attacker = Attacker(cluster.addresses[0], ca)
                await attacker.open()
                await attacker.send(
                    m.Hello(
                        role="peer", node_id=hello_id, address="", protocol=wire.PROTOCOL_VERSION
                    )
                )
                challenge = await until_challenge(attacker)
                transcript = crypto.transcript(
                    purpose="register", nonce=challenge.nonce, verifier_id=challenge.verifier_id,
                    verifier_fingerprint=challenge.verifier_fingerprint, public_id=thief_id,
                    channel_binding=b"",
                )  # fmt: skip
                await attacker.send(
                    crypto.Register(
                        public_id=thief_id,
                        public_key=crypto.public_key_der(key),
                        signature=crypto.sign_transcript(key, transcript),
                    )
                )
                got = await attacker.receive() if hello_id != thief_id else [await first(attacker)]
                await attacker.close()
                return got

            thief_id = crypto.public_identifier(key)
            assert not any(
                isinstance(x, crypto.Registered) for x in await register_thief(victim_id)
            )
            assert isinstance((await register_thief(thief_id))[0], crypto.Registered)

            status = cluster.status(0)
            assert status["auth_failures"] >= failures_before + 4
            assert victim_id in status["peers"]["detached"], "the victim's registration is intact"
            assert status["subscriptions"]["held"] >= 1

            # The victim comes back and still gets what was published in between and after.
            await publisher.request(m.Publish(publication=document(1)))
            await wait_quiet(cluster, [victim, publisher])
            await victim.connect(nursery)
            await publisher.request(m.Publish(publication=document(2)))
            await wait_quiet(cluster, [victim, publisher])
            assert sorted(n.publication.id for n in victim.notifications) == ["n1", "n2"]
            for peer in (victim, publisher):
                await peer.disconnect()
            nursery.cancel_scope.cancel()

    trio.run(scenario)
    traces = ""
    for _ in range(50):  # the daemon flushes its trace log every second
        traces = (cluster.directories[0] / "traces" / "sp0.jsonl").read_text()
        if '"event":"auth_failure"' in traces:
            break
        time.sleep(0.1)
    assert '"event":"auth_failure"' in traces
    assert "secret1-" not in traces, "no private identifier in the trace log"


def test_plaintext_and_tls12_clients_are_refused(cluster):
    async def scenario() -> None:
        plain = Attacker(cluster.addresses[0], None, tls=False)
        await plain.open()
        await plain.send(
            m.Hello(role="peer", node_id="anyone", address="", protocol=wire.PROTOCOL_VERSION)
        )
        assert await plain.receive() == []
        await plain.close()

    before = cluster.status(0)["auth_failures"]
    trio.run(scenario)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cafile=str(cluster.ca_certificate))
    host, _, port = cluster.addresses[0].rpartition(":")
    with (
        pytest.raises(ssl.SSLError),
        socket.create_connection((host, int(port))) as raw,
        context.wrap_socket(raw, server_hostname=host),
    ):
        pass
    assert cluster.status(0)["auth_failures"] >= before + 2


def test_a_super_peer_certified_by_another_ca_cannot_join(cluster, tmp_path):
    crypto.init_ca(tmp_path / "rogue-ca", name="rogue", bits=2048)
    data = tmp_path / "rogue"
    identity = data / "identity"
    identity.mkdir(parents=True)
    key = crypto.generate_private_key(2048)
    crypto.save_private_key(key, identity / "key.pem")
    crypto.save_certificate(
        crypto.issue_certificate(tmp_path / "rogue-ca", node_key=key, node_id="rogue"),
        identity / "cert.pem",
    )
    (identity / "ca.pem").write_bytes((tmp_path / "rogue-ca" / "ca-cert.pem").read_bytes())
    before = cluster.status(0)["auth_failures"]
    port = free_ports(1)[0]
    result = subprocess.run(
        [sys.executable, "-m", "superpeer.cli", "run", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data), "--node-id", "rogue", "--join", cluster.addresses[0]],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "cannot join" in result.stderr
    assert cluster.status(0)["auth_failures"] > before
    assert set(cluster.status(0)["neighbours"]) == {"sp1"}, "the backbone is unchanged"


async def relay(client: trio.SocketStream, target: str, record: list[bytes], tamper: bool) -> None:
    """A TCP relay that records every byte both ways; with ``tamper``, flips the last bit of every
    chunk the client sends after its first one (the ClientHello), i.e. inside the channel."""
    host, _, port = target.rpartition(":")
    server = await trio.open_tcp_stream(host, int(port))
    chunks_from_client = 0

    async def pump(source: trio.abc.Stream, sink: trio.abc.Stream, from_client: bool) -> None:
        nonlocal chunks_from_client
        try:
            while data := await source.receive_some(65536):
                record.append(data)
                if from_client:
                    chunks_from_client += 1
                    if tamper and chunks_from_client > 1:
                        data = data[:-1] + bytes([data[-1] ^ 1])
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        await trio.aclose_forcefully(sink)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, client, server, True)
        nursery.start_soon(pump, server, client, False)


def test_the_wire_carries_no_secret_and_no_payload_in_clear_and_tampering_is_detected(cluster):
    captured: list[bytes] = []

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]

            async def handler(stream: trio.SocketStream) -> None:
                await relay(stream, cluster.addresses[0], captured, tamper=False)

            nursery.start_soon(trio.serve_listeners, handler, listeners)
            subscriber = RemotePeer("capture-sub", f"127.0.0.1:{port}", ca=cluster.ca_certificate)
            publisher = RemotePeer("capture-pub", cluster.addresses[1], ca=cluster.ca_certificate)
            await subscriber.connect(nursery)
            await publisher.connect(nursery)
            await publisher.request(m.Advertise(advertisement=SCHEMAS))
            await subscriber.request(m.Subscribe(id="all", subscription=SUBSCRIPTION))
            await wait_quiet(cluster, [subscriber, publisher])
            await publisher.request(m.Publish(publication=document(7, SECRET_TITLE)))
            await wait_quiet(cluster, [subscriber, publisher])
            assert [n.publication.id for n in subscriber.notifications] == ["n7"]
            secret = subscriber.private_identifier.reveal()
            wire_bytes = b"".join(captured)
            assert len(wire_bytes) > 2000
            assert secret not in wire_bytes
            assert SECRET_TITLE.encode() not in wire_bytes
            assert b"capture" not in wire_bytes and b"dc/elements" not in wire_bytes

            # A flipped bit inside the channel: TLS drops that connection, nothing is applied.
            captured.clear()

            async def tampering(stream: trio.SocketStream) -> None:
                await relay(stream, cluster.addresses[0], captured, tamper=True)

            tamper_listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            tamper_port = tamper_listeners[0].socket.getsockname()[1]
            nursery.start_soon(trio.serve_listeners, tampering, tamper_listeners)
            victim = RemotePeer(
                "capture-sub",
                f"127.0.0.1:{tamper_port}",
                ca=cluster.ca_certificate,
                registration=subscriber.registration,
            )
            await subscriber.disconnect()
            with pytest.raises((DriverError, trio.BrokenResourceError, ssl.SSLError)):
                await victim.connect(nursery)
            assert victim.notifications == []
            await subscriber.connect(nursery)
            await publisher.request(m.Publish(publication=document(8)))
            await wait_quiet(cluster, [subscriber, publisher, victim])
            assert [n.publication.id for n in subscriber.notifications][-1] == "n8", (
                "still subscribed"
            )
            for peer in (subscriber, publisher):
                await peer.disconnect()
            nursery.cancel_scope.cancel()

    trio.run(scenario)
    assert wire.PROTOCOL_VERSION == 13


def forget(cluster, public_id: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "superpeer.cli", "forget-peer", public_id,
         "--data-dir", str(cluster.directories[0])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_lost_private_identifier_needs_the_operator_and_a_leave_frees_the_identity(cluster):
    ca = cluster.ca_certificate

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            roamer = RemotePeer("roamer", cluster.addresses[0], ca=ca)
            await roamer.connect(nursery)
            await roamer.request(m.Subscribe(id="mine", subscription=SUBSCRIPTION))
            assert forget(cluster, roamer.network_id).returncode == 2, "refused while connected"
            await roamer.disconnect()
            await wait_quiet(cluster, [roamer])

            # The same key without its private identifier (a reinstalled machine): refused ...
            amnesiac = RemotePeer("roamer", cluster.addresses[0], ca=ca)
            with pytest.raises(DriverError, match="already_registered"):
                await amnesiac.connect(nursery)
            # ... until the operator forgets the registration; the subscription was kept.
            result = forget(cluster, roamer.network_id)
            assert result.returncode == 0, result.stderr
            assert forget(cluster, roamer.network_id).returncode == 2, "nothing left to forget"
            await amnesiac.connect(nursery)
            assert amnesiac.private_identifier not in (None, roamer.private_identifier)
            assert roamer.network_id in cluster.status(0)["peers"]["attached"]
            assert cluster.status(0)["subscriptions"]["held"] >= 1

            # A peer that leaves for good frees its identity: the key registers afresh.
            await amnesiac.request(m.Leave())
            await amnesiac.disconnect()
            again = RemotePeer("roamer", cluster.addresses[0], ca=ca)
            await again.connect(nursery)
            await again.disconnect()
            nursery.cancel_scope.cancel()

    trio.run(scenario)
