"""The daemon and the commands together, in one process: ``serve_peer`` runs in the test's event
loop, the command-line ``main`` (blocking by design) in a worker thread, the access point is the
fake one. The real-process tests (``test_process.py``) repeat the essentials across processes."""

import dataclasses
import json
import stat
import textwrap

import pytest
import trio

import wire
from peer.config import load_config
from peer.control import CONTROL_LIMITS, ControlClient
from peer.daemon import DaemonError, Running, serve_peer
from tests.peer.fake_access_point import NODE_ID, Location
from tests.peer.helpers import TITLE_QUERY, notify, publication
from wire import messages as m
from wire.framing import FrameDecoder, Link, frame

ARTICLE = """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
<http://example.org/a> dc:title "RDF in P2P networks" ; dc:creator "W. Nejdl" .
"""


async def start(nursery, tmp_path, name: str, port: int, **settings: float) -> Running:
    """A daemon on the fake access point, which is plaintext (``--no-tls``): the peer's id is its
    name. ``test_identity.py`` and the process tests run the daemon with TLS. ``settings``
    replace configuration values (``locate_timeout=0.5``)."""
    config = load_config(
        None,
        data_dir=str(tmp_path / name),
        name=name,
        superpeer=f"127.0.0.1:{port}",
        no_tls=True,
    )
    return await nursery.start(serve_peer, dataclasses.replace(config, **settings))


async def records(running: Running, count: int) -> list[dict]:
    """The inbox's records once there are ``count`` of them (the daemon's blocking inbox call)."""

    def call() -> list[dict]:
        found: list[dict] = []
        with ControlClient(running.control_path, timeout=10) as control:
            while len(found) < count:
                after = str(found[-1]["sequence"] if found else 0)
                ok, body = control.call("inbox", after=after, wait="true")
                assert ok, body
                found += body["records"]
        return found

    return await trio.to_thread.run_sync(call)


async def test_the_commands_against_an_access_point(tmp_path, access_point, nursery, run_cli):
    alice = await start(nursery, tmp_path, "alice", access_point.port)
    await start(nursery, tmp_path, "bob", access_point.port)
    assert (alice.peer_id, alice.access_point) == ("alice", access_point.address)
    assert stat.S_IMODE(alice.control_path.stat().st_mode) == 0o600
    await access_point.wait_until(lambda: {"alice", "bob"} <= set(access_point.peers))
    await access_point.wait_until(
        lambda: all(access_point.requests_from(p) for p in ("alice", "bob"))
    )
    a = ("--data-dir", str(tmp_path / "alice"))
    b = ("--data-dir", str(tmp_path / "bob"))

    ad = tmp_path / "ad.toml"
    ad.write_text('schemas = ["dc"]\n[values]\n"dc:date" = [{min = 2004-01-01, type = "date"}]\n')
    assert await run_cli("advertise", str(ad), *b) == (
        0,
        "advertised: 1 schema, 0 properties, 1 value set\n",
        "",
    )
    query_file = tmp_path / "query.qel"
    query_file.write_text(TITLE_QUERY)
    code, out, _ = await run_cli("subscribe", str(query_file), "--id", "s1", *a)
    assert (code, out) == (0, 'subscribed s1: X : t(X, dc:title, T), T contains "RDF"\n')
    code, out, _ = await run_cli("subscribe", 'X : t(X, dc:creator, C), C contains "Nejdl"', *a)
    assert code == 0
    assert out.startswith("subscribed q-")
    code, out, _ = await run_cli("subscribe", 'X :t(X,dc:creator,C),C contains "Nejdl"', *a)
    assert (code, out.split()[:2]) == (0, ["already", "subscribed"])

    document = tmp_path / "article.ttl"
    document.write_text(ARTICLE)
    assert await run_cli("publish", str(document), "--id", "n1", *b) == (
        0,
        "published n1 <http://example.org/a>\n",
        "",
    )
    [record] = await records(alice, 1)
    assert record["publication"] == "n1"
    assert record["owner"] == "bob"
    assert sorted(record["subscriptions"])[1] == "s1"

    code, out, _ = await run_cli("inbox", "--json", *a)
    assert code == 0
    assert [json.loads(line)["publication"] for line in out.splitlines()] == ["n1"]
    code, out, _ = await run_cli("inbox", *a)
    assert "n1  <http://example.org/a>  from bob at 127.0.0.1:" in out

    code, out, _ = await run_cli("status", "--json", *a)
    status = json.loads(out)
    assert status["connected"]
    assert status["superpeer_id"] == "sp-fake"
    assert set(status["subscriptions"]) >= {"s1"}
    assert status["inbox"] == {
        "records": 1,
        "duplicates_ignored": 0,
        "withdrawn_ignored": 0,
        "unreadable": 0,
        "writes": 1,
    }
    code, out, _ = await run_cli("status", *a)
    assert code == 0
    assert "connected to sp-fake since" in out
    assert "s1: X : t(X, dc:title, T)" in out

    assert await run_cli("unsubscribe", "s1", *a) == (0, "unsubscribed s1\n", "")
    assert "s1" not in access_point.peers["alice"].subscriptions


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["subscribe", "SELECT ?x WHERE { ?x ?p ?o }"], 2, "the query is outside the language"),
        (["subscribe", TITLE_QUERY, "--id", "has space"], 2, "without spaces"),
        (["unsubscribe", "nope"], 2, "no subscription with id 'nope'"),
        (["advertise", "{FILE}"], 2, "invalid advertisement"),
        (["publish", "{FILE}"], 2, "cannot publish"),
        (["publish", "{DOC}"], 1, "the access point refused 1 of 1 publication(s)"),
        (["publish", "missing.ttl"], 2, "cannot read missing.ttl"),
        (["subscribe"], 2, "the following arguments are required: QUERY|FILE"),
        (["subscribe", "X : t(X, dc:title, T), " + "(" * 30000 + ")" * 30000], 2, "nested deeper"),
        (["advertise", "{NESTED}"], 2, "nests too deeply"),
        (["locate", "not a name"], 2, "'not a name' is not a valid peer name"),
        (["locate"], 2, "the following arguments are required: PUBLIC_ID"),
    ],
)
async def test_errors_are_one_clear_line_with_the_right_exit_code(
    tmp_path, access_point, nursery, run_cli, argv, code, message, monkeypatch
):
    alice = await start(nursery, tmp_path, "alice", access_point.port)
    await access_point.wait_until(lambda: bool(access_point.requests_from("alice")))
    bad = tmp_path / "bad.json"
    bad.write_text('{"schemas": "dc", "not": "json-ld"}')
    document = tmp_path / "article.ttl"
    document.write_text(ARTICLE)
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000)
    monkeypatch.chdir(tmp_path)
    files = {"{FILE}": str(bad), "{DOC}": str(document), "{NESTED}": str(nested)}
    argv = [files.get(a, a) for a in argv]
    got, _, err = await run_cli(*argv, "--data-dir", str(alice.control_path.parent))
    assert got == code
    assert message in err
    assert err.count("\n") == 1 + (code == 1), err  # a refusal also lists what was refused
    assert err.startswith("peer: ")
    assert "Traceback" not in err


async def test_a_subscription_while_the_access_point_is_down_fails_and_changes_nothing(
    tmp_path, closed_port, nursery, run_cli
):
    await start(nursery, tmp_path, "alice", closed_port)
    code, _, err = await run_cli("subscribe", TITLE_QUERY, "--data-dir", str(tmp_path / "alice"))
    assert code == 3
    assert f"not connected to the access point 127.0.0.1:{closed_port}" in err
    assert "nothing was sent" in err
    code, out, _ = await run_cli("status", "--json", "--data-dir", str(tmp_path / "alice"))
    assert json.loads(out)["subscriptions"] == {}
    assert not json.loads(out)["connected"]


async def test_leave_forgets_the_network_state_keeps_the_inbox_and_stops(
    tmp_path, access_point, run_cli
):
    async with trio.open_nursery() as nursery:
        alice = await start(nursery, tmp_path, "alice", access_point.port)
        await access_point.wait_until(lambda: bool(access_point.requests_from("alice")))
        data = ("--data-dir", str(tmp_path / "alice"))
        assert (await run_cli("subscribe", TITLE_QUERY, *data))[0] == 0
        code, out, _ = await run_cli("leave", *data)
        assert code == 0
        assert out.startswith("peer alice left the network")
    # serve_peer returned by itself: the nursery could close
    assert not alice.control_path.exists()
    assert "alice" not in access_point.peers
    state = json.loads((tmp_path / "alice" / "state.json").read_text())
    assert (state["peer_id"], state["subscriptions"]) == ("alice", {})


async def test_one_daemon_per_data_directory_and_stale_sockets_are_replaced(
    tmp_path, access_point, nursery
):
    config = load_config(
        None, data_dir=str(tmp_path / "p"), superpeer=access_point.address, no_tls=True
    )
    (tmp_path / "p").mkdir()
    config.control_path.write_text("left by a killed daemon")
    await nursery.start(serve_peer, config)
    assert config.control_path.is_socket()
    with pytest.raises(DaemonError, match="already running with the data directory"):
        await serve_peer(config)
    deep = tmp_path / ("d" * 120)
    with pytest.raises(DaemonError, match="longer than the 107 bytes"):
        await serve_peer(
            load_config(None, data_dir=str(deep), superpeer=access_point.address, no_tls=True)
        )
    with pytest.raises(DaemonError, match="no access point"):
        await serve_peer(load_config(None, data_dir=str(tmp_path / "q")))


async def test_a_configured_advertisement_is_sent_on_connection(tmp_path, access_point, nursery):
    config_file = tmp_path / "peer.toml"
    config_file.write_text(
        textwrap.dedent(f"""
            superpeer = "{access_point.address}"
            data_dir = "p"
            [advertisement]
            properties = ["dc:title"]
            [security]
            tls = false
        """)
    )
    await nursery.start(serve_peer, load_config(str(config_file)))
    await access_point.wait_until(lambda: len(access_point.peers) == 1)
    [peer] = access_point.peers.values()
    await access_point.wait_until(lambda: bool(peer.advertisement.properties))
    bad_file = tmp_path / "bad.toml"
    bad_file.write_text(
        f'superpeer = "{access_point.address}"\n[advertisement]\nschemas = ["zz"]\n'
        "[security]\ntls = false\n"
    )
    with pytest.raises(DaemonError, match="the configured advertisement is invalid"):
        await serve_peer(load_config(str(bad_file), data_dir=str(tmp_path / "bad")))


async def raw_control(path) -> trio.SocketStream:
    return await trio.open_unix_socket(str(path))


async def read_all(stream: trio.abc.Stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


async def test_misbehaving_control_clients_get_an_error_and_disturb_nobody(
    tmp_path, access_point, nursery, run_cli
):
    alice = await start(nursery, tmp_path, "alice", access_point.port)
    await access_point.wait_until(lambda: bool(access_point.requests_from("alice")))
    hello = m.Hello(role="control", node_id="x", address="", protocol=wire.PROTOCOL_VERSION)
    # One holds a half-sent frame open the whole time: it must not block anyone.
    stuck = await raw_control(alice.control_path)
    async with stuck:
        await stuck.send_all(frame(wire.encode(hello))[:3])
        cases = {
            b"GET / HTTP/1.1\r\n\r\n": "a frame announces",
            frame(b"\xc1garbage"): "not a msgpack message",
            frame(wire.encode(m.ControlRequest(command="status", arguments={}))): "link.hello",
            frame(
                wire.encode(
                    m.Hello(role="peer", node_id="x", address="", protocol=wire.PROTOCOL_VERSION)
                )
            ): "role",
            frame(wire.encode(hello))
            + frame(wire.encode(m.Welcome(node_id="x", address=""))): "welcome after the hand",
            frame(wire.encode(hello))
            + frame(wire.encode(m.Ack(request="x"))): "expected control.request, got peer.ack",
        }
        for data, reason in cases.items():
            stream = await raw_control(alice.control_path)
            async with stream:
                await stream.send_all(data)
                answer = messages_in(await read_all(stream))
            assert isinstance(answer[-1], m.LinkError), (data, answer)
            assert reason in answer[-1].reason
        code, out, _ = await run_cli("status", "--json", "--data-dir", str(tmp_path / "alice"))
        assert code == 0
        assert json.loads(out)["peer_id"] == "alice"


def messages_in(data: bytes) -> list[object]:
    return [wire.decode(f)[0] for f in FrameDecoder(CONTROL_LIMITS).feed(data)]


def control_handlers() -> int:
    """How many control connections the daemon in this process is serving, from trio's task
    tree: the connection tasks (``_run_handler``) below the ``serve_control`` task."""

    def below(task: trio.lowlevel.Task, inside: bool) -> int:
        inside = inside or task.name.endswith("serve_control")
        count = int(inside and task.name.endswith("_run_handler"))
        for nursery in task.child_nurseries:
            count += sum(below(child, inside) for child in nursery.child_tasks)
        return count

    return below(trio.lowlevel.current_root_task(), inside=False)


async def test_a_follower_that_goes_away_or_talks_out_of_turn_ends_its_wait(
    tmp_path, access_point, nursery
):
    alice = await start(nursery, tmp_path, "alice", access_point.port)
    link = Link(accepting=False, limits=CONTROL_LIMITS)
    hello = link.send(
        m.Hello(role="control", node_id="x", address="", protocol=wire.PROTOCOL_VERSION)
    )
    wait = link.send(m.ControlRequest(command="inbox", arguments={"after": "0", "wait": "true"}))
    async with (
        await raw_control(alice.control_path) as leaving,
        await raw_control(alice.control_path) as talking,
    ):
        await leaving.send_all(hello + wait)
        await talking.send_all(hello + wait)
        await trio.testing.wait_all_tasks_blocked()
        assert control_handlers() == 2, "both wait for a record"
        await leaving.aclose()
        await talking.send_all(wait)
        answer = messages_in(await read_all(talking))
    assert [type(message) for message in answer] == [m.Welcome, m.LinkError]
    await trio.testing.wait_all_tasks_blocked()
    assert control_handlers() == 0


# -- peer locate ------------------------------------------------------------------------------


async def connected(access_point, *names: str) -> None:
    """Until every one of ``names`` is attached and has sent its state (it accepts commands)."""
    await access_point.wait_until(lambda: all(access_point.requests_from(n) for n in names))


async def test_locate_says_where_a_peer_is_online_or_that_it_is_not(
    tmp_path, access_point, nursery, run_cli
):
    alice = await start(nursery, tmp_path, "alice", access_point.port)
    await start(nursery, tmp_path, "bob", access_point.port)
    await connected(access_point, "alice", "bob")
    access_point.known_peers["carol"] = Location("192.0.2.7:40404", "sp3", "127.0.0.1:7403")
    a = ("--data-dir", str(tmp_path / "alice"))

    bob_connection = access_point.peers["bob"].connection
    assert bob_connection is not None
    assert await run_cli("locate", "bob", *a) == (
        0,
        f"bob is online at {bob_connection.remote} "
        f"(super-peer {NODE_ID} at {access_point.address})\n",
        "",
    )
    assert await run_cli("locate", "carol", *a) == (
        0,
        "carol is online at 192.0.2.7:40404 (super-peer sp3 at 127.0.0.1:7403)\n",
        "",
    )
    assert await run_cli("locate", "dave", *a) == (0, "dave is not online\n", "")
    code, out, _ = await run_cli("locate", "carol", "--json", *a)
    assert code == 0
    found = json.loads(out)
    asked = [r for r in access_point.requests_from("alice") if isinstance(r, m.Locate)]
    assert [r.public_id for r in asked] == ["bob", "carol", "dave", "carol"]
    assert len({r.id for r in asked}) == 4, "a fresh id for every look-up"
    assert found == {
        "id": asked[-1].id,
        "public_id": "carol",
        "online": True,
        "address": "192.0.2.7:40404",
        "superpeer": "sp3",
        "access_point": "127.0.0.1:7403",
    }
    # a notification of carol's publication: the look-up names the super-peer it came from
    await access_point.deliver("alice", notify(publication(id="n1"), owner="carol"))
    await records(alice, 1)
    assert (await run_cli("locate", "carol", *a))[0] == 0
    *_, named = [r for r in access_point.requests_from("alice") if isinstance(r, m.Locate)]
    assert named.superpeer == "sp-origin" and asked[0].superpeer == ""
    code, out, _ = await run_cli("locate", "dave", "--json", *a)
    assert code == 0
    assert {k: v for k, v in json.loads(out).items() if k != "id"} == {
        "public_id": "dave",
        "online": False,
        "address": "",
        "superpeer": "",
        "access_point": "",
    }


async def test_a_refused_locate_exits_1(tmp_path, access_point, nursery, run_cli):
    await start(nursery, tmp_path, "alice", access_point.port)
    await connected(access_point, "alice")
    access_point.refuse_lookups = "16 look-ups are already waiting (max_lookups_per_peer = 16)"
    assert await run_cli("locate", "bob", "--data-dir", str(tmp_path / "alice")) == (
        1,
        "",
        "peer: refused by the access point: 16 look-ups are already waiting "
        "(max_lookups_per_peer = 16)\n",
    )
    code, out, _ = await run_cli("status", "--json", "--data-dir", str(tmp_path / "alice"))
    assert (code, json.loads(out)["counters"]["refused"]) == (0, 1)


async def test_a_locate_without_answer_times_out_and_the_connection_stays(
    tmp_path, access_point, nursery, run_cli
):
    await start(nursery, tmp_path, "alice", access_point.port, locate_timeout=0.5)
    await connected(access_point, "alice")
    a = ("--data-dir", str(tmp_path / "alice"))
    access_point.hold_lookups = True
    assert await run_cli("locate", "bob", *a) == (
        3,
        "",
        "peer: no answer from the network to the look-up of bob within 0.5 s (locate_timeout)\n",
    )
    # The answer comes too late: it is ignored, and the connection is fine.
    access_point.hold_lookups = False
    await access_point.release_lookups()
    assert await run_cli("locate", "alice", *a) == (
        0,
        f"alice is online at {access_point.peers['alice'].connection.remote} "
        f"(super-peer {NODE_ID} at {access_point.address})\n",
        "",
    )
    assert access_point.attachments["alice"] == 1


async def test_a_locate_while_not_connected_fails_at_once(tmp_path, closed_port, nursery, run_cli):
    await start(nursery, tmp_path, "alice", closed_port)
    code, out, err = await run_cli("locate", "bob", "--data-dir", str(tmp_path / "alice"))
    assert (code, out) == (3, "")
    assert err.startswith(f"peer: not connected to the access point 127.0.0.1:{closed_port} (")
    assert err.count("\n") == 1


def in_background(nursery, run_cli, *argv: str) -> dict[str, tuple[int, str, str]]:
    """Starts a command; its (code, out, err) is in the returned dict once it has ended."""
    result: dict[str, tuple[int, str, str]] = {}

    async def run() -> None:
        result["done"] = await run_cli(*argv)

    nursery.start_soon(run)
    return result


async def test_a_lost_connection_fails_the_waiting_locate(tmp_path, access_point, nursery, run_cli):
    await start(nursery, tmp_path, "alice", access_point.port)
    await connected(access_point, "alice")
    access_point.hold_lookups = True
    async with trio.open_nursery() as command:
        result = in_background(
            command, run_cli, "locate", "bob", "--data-dir", str(tmp_path / "alice")
        )
        await access_point.wait_until(lambda: bool(access_point.held_lookups))
        await access_point.drop("alice")
    code, out, err = result["done"]
    assert (code, out) == (3, "")
    assert err.startswith("peer: the connection to the access point was lost before it answered (")
    assert err.count("\n") == 1


async def test_a_locate_answer_after_notifications_and_other_answers_reaches_its_command(
    tmp_path, access_point, nursery, run_cli
):
    alice = await start(nursery, tmp_path, "alice", access_point.port)
    await start(nursery, tmp_path, "bob", access_point.port)
    await connected(access_point, "alice", "bob")
    access_point.hold_lookups = True
    async with trio.open_nursery() as command:
        result = in_background(
            command, run_cli, "locate", "bob", "--data-dir", str(tmp_path / "alice")
        )
        await access_point.wait_until(lambda: bool(access_point.held_lookups))
        await access_point.deliver("alice", notify(publication(id="n1")))
        await access_point.deliver("alice", notify(publication(id="n2")))

        def subscribe() -> tuple[bool, dict]:
            with ControlClient(alice.control_path, timeout=10) as control:
                return control.call("subscribe", query=TITLE_QUERY, id="s1")

        assert (await trio.to_thread.run_sync(subscribe))[0], "answered while the look-up waits"
        assert "done" not in result
        await access_point.release_lookups()
    bob = access_point.peers["bob"].connection
    assert result["done"] == (
        0,
        f"bob is online at {bob.remote} (super-peer {NODE_ID} at {access_point.address})\n",
        "",
    )
    assert [r["publication"] for r in await records(alice, 2)] == ["n1", "n2"]
