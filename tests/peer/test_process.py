"""Real processes on 127.0.0.1: ``peer run`` daemons driven by the ``peer`` command, against the
real super-peer daemon (``superpeer run``, with TLS: a standalone super-peer trusted by its key
fingerprint, ``--pin``, or by the CA that certified it, ``--ca``) or the fake access point running
in the test process (plaintext, so those daemons run with ``--no-tls``).

Every process is started through ``Processes``, which stops it (SIGTERM, then SIGKILL if it does
not exit in time) at the end of the test whatever happens; waits are on what the daemons log or
print (read from their pipes), never on sleeps.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import crypto
import qel
import wire
from tests.peer.fake_access_point import FakeAccessPoint
from tests.peer.helpers import TITLE_QUERY, notify, publication
from wire import messages as m
from wire.framing import FrameDecoder, frame

pytestmark = pytest.mark.process
ROOT = Path(__file__).resolve().parents[2]
ARTICLE = """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
<http://example.org/{name}> a dc:article ; dc:title "RDF in P2P networks" ; dc:date 2004 .
"""


class Daemon:
    """A running process and the lines it wrote to stderr (and stdout), as they come."""

    def __init__(self, process: trio.Process, name: str) -> None:
        self.process = process
        self.name = name
        self.lines: list[str] = []
        self.closed = False
        self._changed = trio.Event()

    async def collect(self, stream: trio.abc.ReceiveStream) -> None:
        buffer = b""
        async for chunk in stream:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            self.lines += [line.decode(errors="replace") for line in complete]
            self._wake()
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, text: str, count: int = 1) -> None:
        # a deadline, not a pause: a loaded machine (a CI run beside a chaos run) made a
        # daemon's second reconnection take more than 20 s
        with trio.fail_after(60):
            while self.count(text) < count:
                if self.closed:
                    output = "\n".join(self.lines[-10:])
                    raise AssertionError(f"{self.name} ended before {text!r}:\n{output}")
                await self._changed.wait()

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)


class Processes:
    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.started: list[trio.Process] = []

    async def start(self, name: str, *argv: str) -> Daemon:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", *argv],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.started.append(process)
        daemon = Daemon(process, name)
        assert process.stdout is not None
        self.nursery.start_soon(daemon.collect, process.stdout)
        return daemon

    async def peer(self, data_dir: Path, superpeer: str, *options: str) -> Daemon:
        daemon = await self.start(
            data_dir.name,
            "peer.cli",
            "run",
            "--superpeer",
            superpeer,
            "--data-dir",
            str(data_dir),
            *options,
        )
        await daemon.wait_for(" running (access point ")
        return daemon

    async def superpeer(self, data_dir: Path, port: int) -> Daemon:
        """A TLS super-peer, node ``sp0``: on a fresh directory it creates a standalone identity
        (its key, a CA of its own and a certificate from it; 2048-bit keys to start fast)."""
        config = data_dir.parent / "superpeer.toml"
        config.write_text("[security]\nkey_bits = 2048\n")
        daemon = await self.start(
            "superpeer",
            "superpeer.cli",
            "run",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(data_dir),
            "--node-id",
            "sp0",
            "--config",
            str(config),
        )
        await daemon.wait_for(f"listening on 127.0.0.1:{port}")
        return daemon

    @staticmethod
    async def stop(daemon: Daemon, how: int = signal.SIGTERM) -> int:
        daemon.process.send_signal(how)
        with trio.move_on_after(30):
            return await daemon.process.wait()
        # what the process is doing, for whoever reads the failure (a reader asked to stop
        # with SIGINT outlived 30 s twice in the CI of stop 53, never when run alone)
        status = Path(f"/proc/{daemon.process.pid}/status")
        state = [
            line
            for line in (status.read_text().splitlines() if status.exists() else [])
            if line.startswith(("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))
        ]
        raise AssertionError(f"{daemon.name} still runs 30 s after signal {how}: {state}")

    async def stop_all(self) -> None:
        for process in self.started:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                with trio.move_on_after(10):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.fixture
async def processes():
    async with trio.open_nursery() as nursery:
        started = Processes(nursery)
        try:
            yield started
        finally:
            with trio.CancelScope(shield=True):
                await started.stop_all()


async def peer(data_dir: Path, *argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "peer.cli", *argv, "--data-dir", str(data_dir)],
            cwd=ROOT,
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def superpeer_status(data_dir: Path) -> dict:
    with trio.fail_after(30):
        done = await trio.run_process(
            [
                sys.executable,
                "-m",
                "superpeer.cli",
                "status",
                "--json",
                "--data-dir",
                str(data_dir),
            ],
            cwd=ROOT,
            capture_stdout=True,
            check=True,
        )
    return json.loads(done.stdout)


def pin_of(superpeer_dir: Path) -> str:
    """What a peer pins for a standalone super-peer: its key's fingerprint (it logs it too)."""
    return crypto.fingerprint(crypto.load_private_key(superpeer_dir / "identity" / "key.pem"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


async def follow_inbox(processes: Processes, data_dir: Path, count: int) -> list[dict]:
    """Runs ``peer inbox --follow --json`` until it has printed ``count`` records, then stops it
    with SIGINT, as a user would."""
    reader = await processes.start(
        "inbox", "peer.cli", "inbox", "--follow", "--json", "--data-dir", str(data_dir)
    )
    await reader.wait_for('"sequence": ', count)
    assert await processes.stop(reader, signal.SIGINT) == 130
    return [json.loads(line) for line in reader.lines if line.startswith("{")]


async def test_peers_publish_and_subscribe_through_the_real_superpeer(tmp_path, processes):
    port = free_port()
    superpeer = await processes.superpeer(tmp_path / "sp", port)
    pin = pin_of(tmp_path / "sp")
    assert superpeer.count(f"fingerprint={pin}") == 1, "the fingerprint to pin is logged"
    address = f"127.0.0.1:{port}"
    keys = {}
    for name in ("alice", "bob"):
        done = await peer(tmp_path / name, "keygen", "--bits", "2048")
        assert done.returncode == 0, done.stderr
        keys[name] = done.stdout.split()[2].decode()
    fast = tmp_path / "peer.toml"  # reconnect soon after the super-peer restarts
    fast.write_text("reconnect_initial = 0.1\nreconnect_max = 0.5\n")
    options = ("--pin", pin, "--config", str(fast))
    alice = await processes.peer(tmp_path / "alice", address, "--name", "alice", *options)
    bob = await processes.peer(tmp_path / "bob", address, "--name", "bob", *options)
    await alice.wait_for(
        f"event=connected access_point={address} superpeer=sp0 peer={keys['alice']}"
    )
    await bob.wait_for("registered=True")
    (tmp_path / "ad.json").write_text('{"schemas": ["dc"]}')
    (tmp_path / "a.ttl").write_text(ARTICLE.format(name="a"))
    (tmp_path / "b.ttl").write_text(ARTICLE.format(name="b"))

    done = await peer(tmp_path / "alice", "subscribe", TITLE_QUERY, "--id", "s1")
    assert (done.returncode, done.stdout) == (
        0,
        b'subscribed s1: X : t(X, dc:title, T), T contains "RDF"\n',
    )
    assert (await peer(tmp_path / "bob", "advertise", str(tmp_path / "ad.json"))).returncode == 0
    done = await peer(tmp_path / "bob", "publish", str(tmp_path / "a.ttl"), "--id", "n1")
    assert (done.returncode, done.stdout) == (0, b"published n1 <http://example.org/a>\n")
    [record] = await follow_inbox(processes, tmp_path / "alice", 1)
    assert (record["publication"], record["owner"], record["subscriptions"]) == (
        "n1",
        keys["bob"],
        ["s1"],
    )
    assert record["access_point"] == address

    # Errors from the network and from the language: one line, a non-zero exit code.
    outside = b'<http://example.org/me> <http://xmlns.com/foaf/0.1/name> "Me" .'
    done = await peer(tmp_path / "bob", "publish", "-", "--format", "nt", stdin=outside)
    assert done.returncode == 1
    assert b"the publication is outside your advertisement" in done.stderr
    done = await peer(tmp_path / "alice", "subscribe", "SELECT ?x WHERE { ?x ?p ?o }")
    assert done.returncode == 2
    assert done.stderr.startswith(b"peer: the query is outside the language: ")
    assert done.stderr.count(b"\n") == 1

    # The super-peer restarts with nothing but its identity (same key and node id, an empty
    # registry): the peers' private identifiers are unknown there, so they forget them, register
    # again and re-send their advertisement and subscriptions; publishing works as before.
    assert await processes.stop(superpeer) == 0
    shutil.copytree(tmp_path / "sp" / "identity", tmp_path / "sp-new" / "identity")
    superpeer = await processes.superpeer(tmp_path / "sp-new", port)
    await alice.wait_for("event=connected", 2)
    await bob.wait_for("event=connected", 2)
    for daemon in (alice, bob):
        assert daemon.count("code=unknown_identifier") == 1
        assert daemon.count("event=registration_forgotten issued_by=sp0") == 1
        assert daemon.count("registered=True") == 2
    done = await peer(tmp_path / "bob", "publish", str(tmp_path / "b.ttl"), "--id", "n2")
    assert done.returncode == 0, done.stderr
    records = await follow_inbox(processes, tmp_path / "alice", 2)
    assert [r["publication"] for r in records] == ["n1", "n2"]
    status = json.loads((await peer(tmp_path / "alice", "status", "--json")).stdout)
    assert status["connected"]
    assert (status["peer_id"], status["name"]) == (keys["alice"], "alice")
    assert status["counters"]["connections"] == 2
    assert (await superpeer_status(tmp_path / "sp-new"))["peers"]["attached"] == sorted(
        keys.values()
    )
    assert superpeer.count("event=violation") == 0


@pytest.mark.slow
async def test_registration_then_reidentification_after_a_daemon_restart(
    tmp_path, processes, tls_world
):
    """Trusting the CA that certified the super-peer (node id sp0 in its certificate): the peer
    registers once, identifies with its private identifier after a restart, and collects what
    the super-peer kept meanwhile. The private identifier is in its 0600 file and nowhere else."""
    port = free_port()
    superpeer = await processes.superpeer(tmp_path / "sp", port)
    ca = str(tmp_path / "sp" / "identity" / "ca.pem")
    address = f"127.0.0.1:{port}"
    alice_dir, bob_dir = tmp_path / "alice", tmp_path / "bob"
    alice_id = tls_world.install_key(alice_dir, 0)
    bob_id = tls_world.install_key(bob_dir, 1)
    first = await processes.peer(alice_dir, address, "--ca", ca, "--name", "alice")
    bob = await processes.peer(bob_dir, address, "--ca", ca, "--name", "bob")
    await first.wait_for("registered=True")
    await bob.wait_for("registered=True")
    (tmp_path / "ad.json").write_text('{"schemas": ["dc"]}')
    (tmp_path / "a.ttl").write_text(ARTICLE.format(name="a"))
    (tmp_path / "b.ttl").write_text(ARTICLE.format(name="b"))
    commands = [
        await peer(alice_dir, "subscribe", TITLE_QUERY, "--id", "s1"),
        await peer(bob_dir, "advertise", str(tmp_path / "ad.json")),
        await peer(bob_dir, "publish", str(tmp_path / "a.ttl"), "--id", "n1"),
    ]
    assert [done.returncode for done in commands] == [0, 0, 0]
    await first.wait_for("event=notification publication='n1'")
    before = await superpeer_status(tmp_path / "sp")
    assert before["peers"]["attached"] == sorted([alice_id, bob_id])

    assert await processes.stop(first) == 0
    await superpeer.wait_for(f"event=peer_detached peer={alice_id}")
    commands.append(await peer(bob_dir, "publish", str(tmp_path / "b.ttl"), "--id", "n2"))
    assert commands[-1].returncode == 0
    alice = await processes.peer(alice_dir, address, "--ca", ca)
    await alice.wait_for(f"superpeer=sp0 peer={alice_id} registered=False")
    await alice.wait_for("event=notification publication='n2'")

    commands.append(await peer(alice_dir, "inbox", "--json"))
    records = [json.loads(line) for line in commands[-1].stdout.splitlines()]
    assert [(r["publication"], r["owner"]) for r in records] == [("n1", bob_id), ("n2", bob_id)]
    commands.append(await peer(alice_dir, "status", "--json"))
    status = json.loads(commands[-1].stdout)
    assert (status["peer_id"], status["name"], status["connected"]) == (alice_id, "alice", True)
    assert status["subscriptions"] == {"s1": TITLE_QUERY}
    assert status["security"]["registered_with"] == "sp0"
    after = await superpeer_status(tmp_path / "sp")
    assert after["peers"]["attached"] == sorted([alice_id, bob_id])
    assert after["auth_failures"] == 0
    assert superpeer.count(f"event=peer_identified peer={alice_id} registered=False") == 1

    secret_file = alice_dir / "identity" / "private-id"
    assert stat_mode(secret_file) == 0o600
    secret = secret_file.read_text().strip()
    assert secret.startswith("secret1-")
    body = secret.removeprefix("secret1-")
    crypto.PrivateIdentifier.from_text(secret)
    outputs = [*first.lines, *alice.lines, *bob.lines, *superpeer.lines]
    outputs += [d.stdout.decode() + d.stderr.decode() for d in commands]
    assert not [line for line in outputs if body in line or body.upper() in line]
    for path in alice_dir.rglob("*"):
        if path.is_file() and path != secret_file:
            assert body.encode() not in path.read_bytes(), path


@pytest.mark.slow
async def test_a_peer_locates_another_while_it_is_online(tmp_path, processes, tls_world):
    """``peer locate`` through the real super-peer: online with the address the super-peer sees
    the other peer's connection come from, then not online once that peer's daemon stopped."""
    port = free_port()
    superpeer = await processes.superpeer(tmp_path / "sp", port)
    address = f"127.0.0.1:{port}"
    pin = ("--pin", pin_of(tmp_path / "sp"))
    alice_dir, bob_dir = tmp_path / "alice", tmp_path / "bob"
    tls_world.install_key(alice_dir, 0)
    bob_id = tls_world.install_key(bob_dir, 1)
    alice = await processes.peer(alice_dir, address, *pin)
    bob = await processes.peer(bob_dir, address, *pin)
    await alice.wait_for("registered=True")
    await bob.wait_for("registered=True")
    await superpeer.wait_for(f"event=peer_identified peer={bob_id} ")
    [seen] = [line for line in superpeer.lines if f"event=peer_identified peer={bob_id} " in line]
    match = re.search(r"address=(127\.0\.0\.1:\d+)$", seen)
    assert match is not None, seen
    bob_address = match.group(1)

    done = await peer(alice_dir, "locate", bob_id)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout.decode() == (
        f"{bob_id} is online at {bob_address} (super-peer sp0 at {address})\n"
    )
    done = await peer(alice_dir, "locate", bob_id.upper(), "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert {k: v for k, v in found.items() if k != "id"} == {
        "public_id": bob_id,
        "online": True,
        "address": bob_address,
        "superpeer": "sp0",
        "access_point": address,
    }
    done = await peer(alice_dir, "locate", "bob")
    assert done.returncode == 2
    assert done.stderr.startswith(b"peer: 'bob' is not a peer's public identifier (pk1-...)")

    assert await processes.stop(bob) == 0
    await superpeer.wait_for(f"event=peer_detached peer={bob_id}")
    done = await peer(alice_dir, "locate", bob_id)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"{bob_id} is not online\n".encode(),
        b"",
    )
    done = await peer(alice_dir, "locate", bob_id, "--json")
    assert json.loads(done.stdout)["online"] is False
    assert alice.count("event=located ") == 4
    assert superpeer.count("event=violation") == 0


@pytest.mark.slow
async def test_keygen_and_what_stops_peer_run(tmp_path):
    data = tmp_path / "alice"
    pin = ("--pin", "pk1-fvyrmqvxe2yeialcpsu7xlbs6xefgd5rsa6mjwycewdrpeq2jcaq")

    async def run(*options: str) -> subprocess.CompletedProcess:
        return await peer(data, "run", "--superpeer", "127.0.0.1:9", *options)

    done = await run(*pin)
    assert done.returncode == 2
    assert done.stderr.startswith(b"peer: the peer has no key at ")
    assert b"`peer keygen`" in done.stderr
    assert done.stderr.count(b"\n") == 1
    done = await peer(data, "keygen", "--bits", "2048")
    assert done.returncode == 0
    key = data / "identity" / "key.pem"
    public_id = crypto.public_identifier(crypto.load_private_key(key))
    assert done.stdout == f"public identifier {public_id} (key {key})\n".encode()
    assert stat_mode(key) == 0o600
    done = await run()
    assert done.returncode == 2
    assert b"does not know how to authenticate its access point" in done.stderr
    key.chmod(0o640)
    done = await run(*pin)
    assert done.returncode == 2
    assert f"run `chmod 600 {key}`".encode() in done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.slow
async def test_a_wrong_pin_or_a_foreign_ca_fails_clearly_and_sends_nothing(
    tmp_path, processes, tls_world
):
    port = free_port()
    await processes.superpeer(tmp_path / "sp", port)
    address = f"127.0.0.1:{port}"
    tls_world.install_key(tmp_path / "pinned", 0)
    tls_world.install_key(tmp_path / "foreign", 1)
    pinned = await processes.peer(
        tmp_path / "pinned", address, "--pin", tls_world.rogue.fingerprint
    )
    foreign = await processes.peer(tmp_path / "foreign", address, "--ca", str(tls_world.rogue.ca))
    await pinned.wait_for("level=ERROR logger=peer.client event=tls_refused", 2)
    await foreign.wait_for("level=ERROR logger=peer.client event=tls_refused", 2)

    done = await peer(tmp_path / "pinned", "status")
    assert done.returncode == 0
    assert (
        f"not connected (the access point {address}: the server's key is ".encode() in done.stdout
    )
    assert f"not the pinned {tls_world.rogue.fingerprint}".encode() in done.stdout
    done = await peer(tmp_path / "foreign", "status", "--json")
    status = json.loads(done.stdout)
    assert not status["connected"]
    assert "presented a certificate this peer does not trust" in status["last_error"]
    superpeer = await superpeer_status(tmp_path / "sp")
    assert superpeer["peers"] == {"attached": [], "detached": []}
    assert superpeer["violations"] == 0
    for directory in ("pinned", "foreign"):
        assert not (tmp_path / directory / "identity" / "private-id").exists()


@pytest.mark.slow
async def test_a_daemon_restarted_mid_run_keeps_its_inbox_and_stores_nothing_twice(
    tmp_path, processes, access_point: FakeAccessPoint
):
    data = tmp_path / "alice"
    alice = await processes.peer(data, access_point.address, "--name", "alice", "--no-tls")
    assert (await peer(data, "subscribe", TITLE_QUERY, "--id", "s1")).returncode == 0
    await access_point.deliver("alice", notify(publication(id="n1")))
    await alice.wait_for("event=notification publication='n1'")

    # Killed without warning; meanwhile its access point keeps n2, and a repeat of n1.
    assert await processes.stop(alice, signal.SIGKILL) == -signal.SIGKILL
    await access_point.wait_until(lambda: access_point.peers["alice"].connection is None)
    await access_point.deliver("alice", notify(publication(id="n2")))
    await access_point.deliver("alice", notify(publication(id="n1")))
    alice = await processes.peer(data, access_point.address, "--no-tls")
    await alice.wait_for("event=duplicate_ignored publication='n1'")

    done = await peer(data, "inbox", "--json")
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["sequence"], r["publication"]) for r in records] == [(1, "n1"), (2, "n2")]
    status = json.loads((await peer(data, "status", "--json")).stdout)
    assert status["inbox"] == {
        "records": 2,
        "duplicates_ignored": 1,
        "withdrawn_ignored": 0,
        "unreadable": 0,
        "writes": 1,
    }
    assert status["subscriptions"] == {"s1": TITLE_QUERY}
    subscribe = m.Subscribe(id="s1", subscription=qel.parse_subscription(TITLE_QUERY))
    # sent by the command, then again on the new connection
    await access_point.wait_until(lambda: access_point.requests_from("alice").count(subscribe) == 2)
    assert len(list((data / "notifications").iterdir())) == 2

    assert await processes.stop(alice) == 0
    assert not (data / "control.sock").exists()
    done = await peer(data, "status")
    assert done.returncode == 3
    assert b"no peer daemon is running" in done.stderr


@pytest.mark.slow
async def test_a_daemon_stopped_says_what_its_inbox_holds_before_it_goes(
    tmp_path, processes, access_point: FakeAccessPoint
):
    """SIGTERM with a ``Delivered`` waiting (a delay of a minute here): the daemon sends it
    before its connection closes, so the access point need not send that mail again."""
    data = tmp_path / "alice"
    slow = tmp_path / "peer.toml"
    slow.write_text("ack_delay_seconds = 60\n")
    options = ("--name", "alice", "--no-tls", "--config", str(slow))
    alice = await processes.peer(data, access_point.address, *options)
    for number in (1, 2):
        numbered = dataclasses.replace(notify(publication(id=f"n{number}")), delivery=number)
        await access_point.deliver("alice", numbered)
        await alice.wait_for(f"event=notification publication='n{number}'")
    assert m.Delivered(through=2) not in access_point.requests_from("alice"), "it waits"
    assert await processes.stop(alice) == 0
    with trio.fail_after(10):
        await access_point.wait_until(
            lambda: m.Delivered(through=2) in access_point.requests_from("alice")
        )


@pytest.mark.slow
async def test_a_malformed_control_client_does_not_disturb_a_well_behaved_one(
    tmp_path, processes, access_point: FakeAccessPoint
):
    data = tmp_path / "alice"
    await processes.peer(data, access_point.address, "--no-tls")
    hello = frame(
        wire.encode(
            m.Hello(role="control", node_id="x", address="", protocol=wire.PROTOCOL_VERSION)
        )
    )
    stuck = await trio.open_unix_socket(str(data / "control.sock"))
    async with stuck:
        await stuck.send_all(hello[:5])  # and then nothing: it stays open throughout
        for garbage in (
            b"\xff" * 64,
            frame(wire.encode(m.ControlRequest(command="status", arguments={}))),
        ):
            stream = await trio.open_unix_socket(str(data / "control.sock"))
            async with stream:
                await stream.send_all(garbage)
                answer = b""
                while chunk := await stream.receive_some(65536):
                    answer += chunk
            [error] = [wire.decode(f)[0] for f in FrameDecoder().feed(answer)]
            assert isinstance(error, m.LinkError)
        done = await peer(data, "status", "--json")
        assert done.returncode == 0
        assert json.loads(done.stdout)["connected"] is True


@pytest.mark.slow
async def test_clear_failures_when_the_network_or_the_daemon_is_missing(tmp_path, processes):
    data = tmp_path / "alice"
    done = await peer(data, "subscribe", TITLE_QUERY)
    assert done.returncode == 3
    assert b"no peer daemon is running with the data directory" in done.stderr
    port = free_port()
    await processes.peer(data, f"127.0.0.1:{port}", "--no-tls")
    done = await peer(data, "subscribe", TITLE_QUERY)
    assert done.returncode == 3
    assert f"not connected to the access point 127.0.0.1:{port}".encode() in done.stderr
    assert b"nothing was sent" in done.stderr
    second = await processes.start(
        "second",
        "peer.cli",
        "run",
        "--superpeer",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data),
        "--no-tls",
    )
    with trio.fail_after(20):
        assert await second.process.wait() == 2
    assert any("already running" in line for line in second.lines)


@pytest.mark.slow
async def test_an_offline_subscriber_hears_the_update_and_the_retraction_when_it_returns(
    tmp_path, processes
):
    """``peer publish --replaces`` and ``peer retract`` on the real daemons, with the
    subscriber's daemon stopped during both: when it runs again it stores each change once, in
    order, with its kind, and its inbox keeps the resource's current state."""
    port = free_port()
    await processes.superpeer(tmp_path / "sp", port)
    address = f"127.0.0.1:{port}"
    for name in ("alice", "bob", "eve"):
        assert (await peer(tmp_path / name, "keygen", "--bits", "2048")).returncode == 0
    options = ("--pin", pin_of(tmp_path / "sp"))
    alice = await processes.peer(tmp_path / "alice", address, *options)
    await processes.peer(tmp_path / "bob", address, *options)
    await processes.peer(tmp_path / "eve", address, *options)
    (tmp_path / "ad.json").write_text('{"schemas": ["dc"]}')
    for name in ("bob", "eve"):
        done = await peer(tmp_path / name, "advertise", str(tmp_path / "ad.json"))
        assert done.returncode == 0, done.stderr
    first = tmp_path / "v1.ttl"
    first.write_text(ARTICLE.format(name="a"))
    second = tmp_path / "v2.ttl"
    second.write_text(ARTICLE.format(name="a").replace("2004", "2005"))
    assert (await peer(tmp_path / "alice", "subscribe", TITLE_QUERY, "--id", "s1")).returncode == 0
    done = await peer(tmp_path / "bob", "publish", str(first), "--id", "r")
    assert done.returncode == 0, done.stderr
    await alice.wait_for("event=notification publication='r' version=0 kind=added")

    assert await processes.stop(alice) == 0
    done = await peer(tmp_path / "bob", "publish", str(second), "--replaces", "r")
    assert (done.returncode, done.stdout) == (0, b"published r <http://example.org/a>\n")
    done = await peer(tmp_path / "eve", "retract", "r")  # not hers: refused, nothing changes
    assert done.returncode == 1
    assert b"no resource under the id 'r'" in done.stderr
    done = await peer(tmp_path / "bob", "retract", "r")
    assert (done.returncode, done.stdout) == (0, b"retracted r\n")

    alice = await processes.peer(tmp_path / "alice", address, *options)
    await alice.wait_for("event=notification publication='r' version=2 kind=removed")
    assert alice.count("event=notification") == 2
    assert alice.count("version=1 kind=changed") == 1
    done = await peer(tmp_path / "alice", "inbox", "--json")
    [record] = [json.loads(line) for line in done.stdout.splitlines()]
    assert (record["publication"], record["version"], record["kind"]) == ("r", 2, "removed")
    assert "2005" in record["ntriples"]


@pytest.mark.slow
async def test_an_extension_is_news_only_for_subscriptions_made_with_on_change(tmp_path, processes):
    """``peer subscribe --on change`` on the real daemons: a description in two steps
    (``peer publish --extends``) is heard of once by a plain subscription (when it starts
    matching) and twice by one made with ``--on change`` (``added``, then ``changed``)."""
    port = free_port()
    await processes.superpeer(tmp_path / "sp", port)
    address = f"127.0.0.1:{port}"
    for name in ("alice", "bob", "carol"):
        assert (await peer(tmp_path / name, "keygen", "--bits", "2048")).returncode == 0
    options = ("--pin", pin_of(tmp_path / "sp"))
    alice = await processes.peer(tmp_path / "alice", address, *options)
    carol = await processes.peer(tmp_path / "carol", address, *options)
    await processes.peer(tmp_path / "bob", address, *options)
    (tmp_path / "ad.json").write_text('{"schemas": ["dc"]}')
    done = await peer(tmp_path / "bob", "advertise", str(tmp_path / "ad.json"))
    assert done.returncode == 0, done.stderr
    done = await peer(tmp_path / "alice", "subscribe", TITLE_QUERY, "--id", "s1", "--on", "change")
    assert done.returncode == 0, done.stderr
    assert (await peer(tmp_path / "carol", "subscribe", TITLE_QUERY, "--id", "s2")).returncode == 0
    first = tmp_path / "v1.ttl"
    first.write_text(ARTICLE.format(name="a"))
    more = tmp_path / "more.ttl"
    more.write_text(
        '@prefix dc: <http://purl.org/dc/elements/1.1/> .\n<http://example.org/a> dc:creator "Nejdl" .\n'
    )
    assert (await peer(tmp_path / "bob", "publish", str(first), "--id", "r")).returncode == 0
    done = await peer(tmp_path / "bob", "publish", str(more), "--extends", "r")
    assert done.returncode == 0, done.stderr
    await alice.wait_for("event=notification publication='r' version=1 kind=changed")
    await carol.wait_for("event=notification publication='r' version=0 kind=added")
    assert alice.count("event=notification") == 2
    # carol's access point had the extension before alice's second notification was written
    assert carol.count("event=notification") == 1
    done = await peer(tmp_path / "carol", "inbox", "--json")
    [record] = [json.loads(line) for line in done.stdout.splitlines()]
    assert (record["publication"], record["version"]) == ("r", 0)


async def test_run_with_log_format_json_writes_one_object_per_line(tmp_path, processes):
    port = free_port()  # nobody listens there: the peer says it is disconnected, and retries
    daemon = await processes.peer(
        tmp_path / "alice", f"127.0.0.1:{port}", "--no-tls", "--log-format", "json"
    )
    await daemon.wait_for('"event":"disconnected"')
    said = (" running (access point ", "web app: http://")  # the two lines on stdout
    logged = [line for line in daemon.lines if not any(text in line for text in said)]
    entries = [json.loads(line) for line in logged]  # every stderr line is JSON
    ready = next(entry for entry in entries if entry.get("event") == "ready")
    assert (ready["level"], ready["access_point"]) == ("INFO", f"127.0.0.1:{port}")
    assert ready["logger"].startswith("peer")
    disconnected = next(entry for entry in entries if entry.get("event") == "disconnected")
    assert disconnected["level"] == "WARNING"
    assert float(disconnected["retry_in"]) > 0


@pytest.mark.slow
async def test_expired_subscriptions_and_publications_are_not_delivered(tmp_path, processes):
    """``--expires`` on the real daemons: a subscription stops matching when it expires (its
    access point retracts it on its timer), and a publication that expires while the subscriber's
    daemon is stopped is not delivered when it runs again (what came after it is).

    Real daemons keep real time, so the test waits out short expiries (seconds)."""
    port = free_port()
    await processes.superpeer(tmp_path / "sp", port)
    address = f"127.0.0.1:{port}"
    for name in ("alice", "bob"):
        assert (await peer(tmp_path / name, "keygen", "--bits", "2048")).returncode == 0
    options = ("--pin", pin_of(tmp_path / "sp"))
    alice = await processes.peer(tmp_path / "alice", address, *options)
    await processes.peer(tmp_path / "bob", address, *options)
    (tmp_path / "ad.json").write_text('{"schemas": ["dc"]}')
    assert (await peer(tmp_path / "bob", "advertise", str(tmp_path / "ad.json"))).returncode == 0
    for name, year in (("old", "2004"), ("new", "2005")):
        (tmp_path / f"{name}.ttl").write_text(ARTICLE.format(name=name).replace("2004", year))

    async def publish(resource: str, name: str, *extra: str) -> None:
        path = str(tmp_path / f"{name}.ttl")
        done = await peer(tmp_path / "bob", "publish", path, "--id", resource, *extra)
        assert done.returncode == 0, done.stderr

    short = 8.0
    started = trio.current_time()
    done = await peer(
        tmp_path / "alice", "subscribe", TITLE_QUERY, "--id", "s1", "--expires", f"{short:g}s"
    )
    assert done.returncode == 0, done.stderr
    done = await peer(tmp_path / "alice", "subscribe", "X : t(X, dc:date, D), D = 2005")
    assert done.returncode == 0, done.stderr
    await publish("r1", "old")
    await alice.wait_for("event=notification publication='r1'")
    await trio.sleep(max(0.0, started + short + 1.0 - trio.current_time()))
    await publish("r2", "old")  # only s1 matches it, and s1 expired
    await publish("r3", "new")
    await alice.wait_for("event=notification publication='r3'")
    assert alice.count("publication='r2'") == 0

    assert await processes.stop(alice) == 0
    await publish("r4", "new", "--expires", "2s")
    await trio.sleep(3.0)
    await publish("r5", "new")
    alice = await processes.peer(tmp_path / "alice", address, *options)
    await alice.wait_for("event=notification publication='r5'")
    assert alice.count("publication='r4'") == 0


@pytest.mark.slow
async def test_peer_ui_opens_the_app_and_the_stop_commands_answer_in_sentences(tmp_path, processes):
    """``peer ui`` opens the running daemon's web app with ``webbrowser`` (here ``$BROWSER``, a
    script that notes what it was asked to open); ``peer stop`` and ``superpeer stop`` answer in
    a sentence, and in JSON with ``--json``."""
    port = free_port()
    superpeer = await processes.superpeer(tmp_path / "sp", port)
    alice = tmp_path / "alice"
    assert (await peer(alice, "keygen", "--bits", "2048")).returncode == 0
    daemon = await processes.peer(alice, f"127.0.0.1:{port}", "--pin", pin_of(tmp_path / "sp"))
    await daemon.wait_for("web app: http://127.0.0.1:")
    [line] = [line for line in daemon.lines if line.startswith("web app: ")]
    url = line.split()[2]
    assert (alice / "ui.url").read_text() == url + "\n"
    browser = tmp_path / "browser"
    browser.write_text('#!/bin/sh\nprintf %s "$1" > "$0.opened"\n')
    browser.chmod(0o755)
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-m", "peer.cli", "ui", "--data-dir", str(alice)],
            cwd=ROOT,
            env={**os.environ, "BROWSER": f"{browser} %s"},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert (done.returncode, done.stdout.decode()) == (0, f"opening {url} in the default browser\n")
    assert (tmp_path / "browser.opened").read_text() == url
    done = await peer(alice, "stop")
    assert done.returncode == 0
    assert done.stdout.decode().endswith("stays registered, and its access point keeps its "
                                         "subscriptions and what arrives for it until it runs again\n")  # fmt: skip
    with trio.fail_after(10):
        assert await daemon.process.wait() == 0
    assert not (alice / "ui.url").exists()

    async def superpeer_stop(*options: str) -> str:
        with trio.fail_after(30):
            done = await trio.run_process(
                [sys.executable, "-m", "superpeer.cli", "stop", *options,
                 "--data-dir", str(tmp_path / "sp")],
                cwd=ROOT, capture_stdout=True, check=True,
            )  # fmt: skip
        return done.stdout.decode()

    assert json.loads(await superpeer_stop("--json")) == {"stopping": True}
    with trio.fail_after(30):
        await superpeer.process.wait()
    await processes.superpeer(tmp_path / "sp", port)
    assert await superpeer_stop() == (
        "the super-peer is stopping: it hands its peers over, withdraws its advertisements and "
        "leaves the cube (as on SIGTERM)\n"
    )
