"""Real processes on 127.0.0.1: the replay tool against the simulator and the oracle, a malformed
client beside a well-behaved one, the super-peer command line. Every process is stopped."""

import json
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

import msgpack
import pytest
import trio

import crypto
import qel
import wire
from deploy import cluster as cluster_module
from deploy.chaos import SUPERPEER_SETTINGS
from deploy.cluster import Cluster
from deploy.driver import RemotePeer, wait_quiet
from deploy.replay import replay
from superpeer.sim import Simulation
from superpeer.sim.generate import generate
from tests.deploy.replaying import replayed_and_simulated
from tests.superpeer.oracle import (
    expected_changes,
    expected_deliveries,
    expected_fetches,
    expected_locations,
)
from wire import messages as m

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.mark.parametrize("seed", [1])  # one workload: a second of the same shape took a minute
def test_replay_on_eight_super_peers_gives_the_simulators_deliveries(tmp_path, seed):
    operations = list(
        generate(
            superpeers=8, peers=14, subscriptions=40, publications=30,
            churn=0.15, unsubscribe=0.1, seed=seed,
        )
    )  # fmt: skip
    # look-ups at the end, while some peers are detached: online ones found where they are
    operations += [
        {"op": "locate", "peer": f"peer{k}", "id": f"where{j}", "target": f"peer{j}"}
        for k in (0, 7)
        for j in (*range(14), "stranger")
    ]
    report, simulation = replayed_and_simulated(tmp_path, operations, 8)
    expected = expected_deliveries(8, operations)
    assert report["deliveries"] == simulation.deliveries() == expected
    assert report["errors"] == simulation.errors
    located = expected_locations(8, operations)
    assert report["locations"] == simulation.report()["locations"] == located
    assert any(where is None for found in located.values() for where in found.values())
    assert sum(where is not None for found in located.values() for where in found.values()) > 10
    backbone = {k: v["count"] for k, v in report["messages"].items() if routing(k)}
    assert backbone == {k: c for k, c in simulation.messages.items() if routing(k)}


def backbone_churn(seed: int) -> list[dict]:
    """A generated workload with the backbone changing under it: a super-peer killed (its peers
    move on by themselves), a newcomer, the killed one restarted on its data, a clean departure,
    a bounce (killed and restarted before anyone notices), a pause (``SIGSTOP``) and a cut
    (its proxy closes every connection) both longer than the failure timeout, a quarter of
    the way apart."""
    operations = list(
        generate(
            superpeers=8, peers=12, subscriptions=36, publications=40,
            churn=0.1, unsubscribe=0.1, seed=seed,
        )
    )  # fmt: skip
    q = len(operations) // 4
    return [
        *operations[:q],
        {"op": "superpeer_fail", "superpeer": 3},
        *operations[q : 2 * q],
        {"op": "superpeer_join"},
        {"op": "superpeer_restart", "superpeer": 3},
        {"op": "superpeer_pause", "superpeer": 6, "seconds": 5.0},
        *operations[2 * q : 3 * q],
        {"op": "superpeer_leave", "superpeer": 5},
        {"op": "superpeer_bounce", "superpeer": 1},
        {"op": "superpeer_cut", "superpeer": 2, "seconds": 5.0},
        *operations[3 * q :],
    ]


def test_replay_of_backbone_churn_gives_the_simulators_deliveries(tmp_path):
    """Issue 12's "Show": real daemons killed with -9, restarted on their data directory,
    joining, leaving, paused and cut off under a workload deliver what the simulator and the
    oracle say (failures detected in 3 s, as in the fault harness)."""
    operations = backbone_churn(3)
    report, simulation = replayed_and_simulated(tmp_path, operations, 8, SUPERPEER_SETTINGS)
    expected = expected_deliveries(8, operations)
    assert sum(len(ids) for ids in expected.values()) > 50
    assert report["deliveries"] == simulation.deliveries() == expected
    assert report["errors"] == simulation.errors == []


def test_replay_of_changes_after_moves_and_a_departure_gives_the_oracles_changes(tmp_path):
    """Real daemons: a publisher moves twice and its access point leaves, and it goes on
    updating, extending and retracting what it published before (the versions follow it,
    ``superpeer._migration``); the subscriber hears of every change, as the oracle says."""
    article = '<http://example.org/{n}> <http://purl.org/dc/elements/1.1/title> "{t}" .'

    def changed(op: str, n: str, title: str) -> dict:
        data = article.format(n=n, t=title)
        return {"op": op, "peer": "pub", "id": n, "format": "nt", "data": data}

    operations = [
        {"op": "join", "peer": "sub", "superpeer": 2},
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "advertise", "peer": "pub", "schemas": ["dc", "rdf", "http://example.org/"]},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": "X : t(X, dc:title, T)",
         "on": "change"},
        changed("publish", "a", "first"),
        changed("publish", "b", "second"),
        {"op": "move", "peer": "pub", "superpeer": 1},
        changed("update", "a", "first, again"),
        changed("extend", "b", "second, more"),
        {"op": "move", "peer": "pub", "superpeer": 3},
        {"op": "superpeer_leave", "superpeer": 3},
        changed("update", "a", "first, a third time"),
        {"op": "retract", "peer": "pub", "id": "b"},
    ]  # fmt: skip
    report, simulation = replayed_and_simulated(tmp_path, operations, 4)
    expected = expected_changes(4, operations)
    assert report["errors"] == simulation.errors == []
    assert report["changes"]["sub"] == simulation.changes()["sub"] == expected["sub"]
    assert len(expected["sub"]) == 6


def test_replay_fetches_what_the_simulator_and_the_oracle_fetch(tmp_path):
    """Publications with files, fetched a few operations later (the owner online, or detached
    by the churn: a rendezvous), then everyone back online."""
    operations = list(
        generate(
            superpeers=4, peers=8, subscriptions=24, publications=16,
            churn=0.25, unsubscribe=0.0, seed=3,
        )
    )  # fmt: skip
    for index, op in enumerate(operations):
        if op["op"] == "publish":
            operations[index] = {**op, "file": f"the resource of {op['id']}\n" * (index % 5)}
    delivered = expected_deliveries(4, operations)
    later: dict[int, list[dict]] = {}
    for index, op in enumerate(operations):
        takers = [p for p, ids in delivered.items() if op["op"] == "publish" and op["id"] in ids]
        if takers:
            fetch = {"op": "fetch", "peer": takers[index % len(takers)], "id": op["id"]}
            later.setdefault(index + 6, []).append(fetch)
    operations = [
        fetch for index, op in enumerate(operations) for fetch in [op, *later.get(index, [])]
    ]
    operations += [{"op": "attach", "peer": f"peer{k}"} for k in range(8)]
    workload = tmp_path / "workload.jsonl"
    workload.write_text("".join(json.dumps(op) + "\n" for op in operations))
    report = trio.run(replay, workload, 4, None)
    simulation = Simulation(4)
    try:
        for op in operations:
            simulation.apply(dict(op))
        fetched = simulation.fetched()
    finally:
        simulation.close()
    expected = expected_fetches(4, operations)
    assert report["fetched"] == fetched == expected
    assert sum(map(len, expected.values())) >= 5
    assert report["deliveries"] == simulation.deliveries()
    assert report["errors"] == simulation.errors
    assert simulation.messages["peer.upload_wanted"] > 0


def routing(kind: str) -> bool:
    """Backbone kinds whose counts do not depend on timing (heartbeats do)."""
    return kind.startswith("sp.") and kind != "sp.heartbeat"


def raw_exchange(address: str, payload: bytes, ca=None) -> bytes:
    """Send raw bytes (inside TLS when ``ca`` is given) and read until the server closes."""
    host, _, port = address.rpartition(":")
    plain = socket.create_connection((host, int(port)), timeout=10)
    sock = (
        crypto.peer_client_context(ca=ca).wrap_socket(plain, server_hostname=host) if ca else plain
    )
    chunks = []
    with sock:
        sock.sendall(payload)
        try:
            while data := sock.recv(65536):
                chunks.append(data)
        except (ssl.SSLError, ConnectionError):
            pass
    return b"".join(chunks)


def error_reason(reply: bytes) -> str:
    (length,) = struct.unpack(">I", reply[:4])
    message, _ = wire.decode(reply[4 : 4 + length])
    assert isinstance(message, m.LinkError)
    return message.reason


def test_malformed_clients_are_answered_and_closed_while_others_carry_on():
    with Cluster(2, trace=False) as cluster:
        ca = cluster.ca_certificate

        async def exchange(payload: bytes) -> bytes:
            return await trio.to_thread.run_sync(raw_exchange, cluster.addresses[0], payload, ca)

        async def scenario() -> None:
            good = RemotePeer("good", cluster.addresses[0], ca=ca)
            publisher = RemotePeer("publisher", cluster.addresses[1], ca=ca)
            async with trio.open_nursery() as nursery:
                await good.connect(nursery)
                await publisher.connect(nursery)
                await publisher.request(
                    m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]}))
                )
                await good.request(
                    m.Subscribe(
                        id="all", subscription=qel.parse_subscription("X : t(X, dc:title, T)")
                    )
                )
                await wait_quiet(cluster, [good, publisher])
                bad_first = struct.pack(">I", 3) + b"\xc1\xc1\xc1"
                assert "not a msgpack message" in error_reason(await exchange(bad_first))
                huge = struct.pack(">I", 50_000_000)
                assert "max_frame_bytes" in error_reason(await exchange(huge))
                leave_first = wire.framing.frame(wire.encode(m.Leave()))
                assert "expected link.hello first" in error_reason(await exchange(leave_first))
                unknown = wire.framing.frame(
                    msgpack.packb([wire.PROTOCOL_VERSION, "peer.hack", "", {}])
                )
                assert "unknown message kind" in error_reason(await exchange(unknown))
                plaintext = wire.framing.frame(
                    wire.encode(
                        m.Hello(
                            role="peer", node_id="x", address="", protocol=wire.PROTOCOL_VERSION
                        )
                    )
                )
                assert (
                    await trio.to_thread.run_sync(raw_exchange, cluster.addresses[0], plaintext)
                    == b""
                )
                [publication] = qel.parse_publications(
                    '<http://ex/a> <http://purl.org/dc/elements/1.1/title> "T" .', "nt", id="p1"
                )
                await publisher.request(m.Publish(publication=publication))
                await wait_quiet(cluster, [good, publisher])
                assert [n.publication.id for n in good.notifications] == ["p1"]
                for peer in (good, publisher):
                    await peer.disconnect()
                nursery.cancel_scope.cancel()

        trio.run(scenario)
        deadline = time.monotonic() + 10
        status = cluster.status(0)
        while not status["peers"]["detached"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the disconnection reaches the daemon after the client is done
            status = cluster.status(0)
        assert status["violations"] == 4
        assert status["store"] == {"checkpoints_failed": 0}, "the daemon's own figures"
        assert status["auth_failures"] == 1, "the plaintext client"
        assert status["peers"]["detached"] and status["state"] == "member", "still serving"


def test_superpeer_command_line_errors_and_status(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('listen = "nowhere"\n')
    result = subprocess.run(
        [sys.executable, "-m", "superpeer.cli", "run", "--config", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and "listen must be HOST:PORT" in result.stderr
    typo = tmp_path / "typo.toml"
    typo.write_text("[limits]\nmax_frame = 5\n")
    result = subprocess.run(
        [sys.executable, "-m", "superpeer.cli", "run", "--config", str(typo)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and "unknown key(s) ['max_frame']" in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "superpeer.cli", "status", "--data-dir", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 3 and "no super-peer daemon" in result.stderr
    with Cluster(3, trace=True) as cluster:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "superpeer.cli",
                "status",
                "--data-dir",
                str(cluster.directories[2]),
                "--json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        status = json.loads(result.stdout)
        assert status["node"] == "sp2" and status["state"] == "member" and status["dimension"] == 2
        assert set(status["neighbours"]) <= {"sp0", "sp1"}
        human = subprocess.run(
            [
                sys.executable,
                "-m",
                "superpeer.cli",
                "status",
                "--data-dir",
                str(cluster.directories[0]),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "super-peer sp0" in human.stdout and "cube" in human.stdout
        assert (cluster.directories[0] / "traces" / "sp0.jsonl").exists()


def test_the_launcher_starts_peer_daemons_that_the_peer_command_line_drives(tmp_path):
    def peer(directory, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "peer.cli", *argv, "--data-dir", str(directory)],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip

    advertisement = tmp_path / "ad.json"
    advertisement.write_text(json.dumps({"schemas": ["dc"]}))
    paper = tmp_path / "paper.ttl"
    paper.write_text(
        "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
        '<http://example.org/p1> dc:title "Semantic publish/subscribe" ; dc:creator "Nejdl" .\n'
    )
    with Cluster(4, peers=2, trace=False) as cluster:
        subscriber, publisher = cluster.peer_directories
        assert peer(publisher, "advertise", str(advertisement)).returncode == 0
        subscribed = peer(subscriber, "subscribe", 'X : t(X, dc:creator, Y), Y contains "Nejdl"')
        assert subscribed.returncode == 0, subscribed.stderr
        deadline = time.monotonic() + 30
        published = peer(publisher, "publish", str(paper))
        assert published.returncode == 0, published.stderr
        inbox: list = []
        while not inbox and time.monotonic() < deadline:
            listed = peer(subscriber, "inbox", "--json").stdout
            inbox = [json.loads(line) for line in listed.splitlines()]
            time.sleep(0.1)
        assert [n["subject"] for n in inbox] == ["http://example.org/p1"], inbox
        # what the subscriber's access point holds for it, as an operator sees it
        access_point = cluster.directories[0]

        def superpeer(*argv: str) -> str:
            return subprocess.run(
                [sys.executable, "-m", "superpeer.cli", *argv, "--data-dir", str(access_point)],
                capture_output=True, text=True, check=True, timeout=60,
            ).stdout  # fmt: skip

        held = json.loads(superpeer("peers", "--json"))
        mine = [row for row in held if row["subscriptions"] == 1]
        assert len(mine) == 1 and mine[0]["state"] == "attached" and mine[0]["mail"] == 0, held
        subscriptions = json.loads(superpeer("subscriptions", "--peer", mine[0]["peer"], "--json"))
        assert len(subscriptions) == 1, subscriptions
        assert "Nejdl" in subscriptions[0]["query"]
        assert "attached" in superpeer("peers") and "sent to" in superpeer("subscriptions")
        daemons = cluster.peer_processes + cluster.processes
    assert [process.returncode for process in daemons] == [0] * 6


def test_super_peers_added_at_once_take_distinct_names(tmp_path, monkeypatch):
    """The chaos harness's fault threads add super-peers concurrently: each gets an index,
    directory, key and address of its own (two overlapping joins once took the same name, and
    one fault thread died on a key file that already existed). Finding a port is made slow,
    as making a host of its own is (``ip netns``), so that the threads overlap there."""
    found = cluster_module.free_ports

    def slowly_found(count: int) -> list[int]:
        time.sleep(0.2)
        return found(count)

    monkeypatch.setattr(cluster_module, "free_ports", slowly_found)
    with Cluster(1, directory=tmp_path) as cluster:
        added: list[int] = []
        threads = [threading.Thread(target=lambda: added.append(cluster.add())) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(added) == [1, 2, 3]
        assert len(set(cluster.listen_addresses)) == 4
        assert all(p is not None and p.poll() is None for p in cluster.processes)


def test_a_daemons_lines_are_read_until_the_deadline_even_from_a_quiet_pipe():
    """``Cluster`` waits for "listening on" at most ``READY_TIMEOUT``: a daemon that says nothing
    (a join that waits for its contacts) does not hold the harness past it."""
    script = "import sys, time; print('one'); print('two', flush=True); time.sleep(30)"
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE) as quiet:
        assert quiet.stdout is not None
        started = time.monotonic()
        lines = list(cluster_module._lines(quiet.stdout.fileno(), started + 1.0))
        waited = time.monotonic() - started
        quiet.kill()
    assert lines == [b"one", b"two"]
    assert 1.0 <= waited < 5.0, "it gave up at the deadline, not when the process ended"
    with subprocess.Popen([sys.executable, "-c", "print('last')"], stdout=subprocess.PIPE) as ended:
        assert ended.stdout is not None
        assert list(cluster_module._lines(ended.stdout.fileno(), time.monotonic() + 30)) == [
            b"last"
        ], "the pipe's end ends them"
