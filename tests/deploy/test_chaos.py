"""The fault-injection harness: its plan, its oracle, its proxies, and a real 60-second run with
every fault kind on 4 super-peers (the CI size of ``python -m deploy.chaos``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from deploy.chaos import FAULTS, HOSTS_ONLY, Outcome, Run, judge, make_plan
from deploy.cluster import faketime_library
from deploy.hosts import unavailable
from deploy.proxy import Proxy

ROOT = Path(__file__).resolve().parents[2]
NETNS_UNAVAILABLE = unavailable()
DOCUMENT = (
    "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
    '<http://example.org/chaos/{id}> dc:title "t" ; dc:creator "Nejdl" ; dc:date 2004 .\n'
)


def plan(seed: int = 1) -> dict:
    """Two minutes: long enough for one fault of every kind, the partitions' longer holds too."""
    return make_plan(seed=seed, duration=120, superpeers=4, peers=4, faults=list(FAULTS), rate=4)


def test_a_plan_is_a_function_of_its_seed_and_holds_every_fault_kind() -> None:
    assert plan(1) == plan(1)
    assert plan(1) != plan(2)
    assert {fault["kind"] for fault in plan(1)["faults"]} == set(FAULTS)
    ops = plan(1)["ops"]
    assert [op["at"] for op in ops] == sorted(op["at"] for op in ops)
    assert {op["op"] for op in ops} == {"advertise", "subscribe", "unsubscribe", "publish"}


def outcome(op: dict, sent: float, done: float, result: str = "ok") -> Outcome:
    return Outcome(op, sent=sent, done=done, outcome=result)


def verdict(outcomes: list[Outcome], inbox: list[str]) -> dict:
    run = Run(
        plan={},
        settle=1.0,
        early=5.0,
        cluster=SimpleNamespace(peer_directories=[Path("p0"), Path("p1")]),  # type: ignore[arg-type]
        proxies=None,  # type: ignore[arg-type]
        outcomes=outcomes,
    )
    run.started = 0.0
    records = [{"publication": pid} for pid in inbox]
    return judge(run, {0: records, 1: []})["per_peer"]["peer0"]


def subscribe(sent: float, done: float, result: str = "ok") -> Outcome:
    query = 'X : t(X, dc:creator, C), C contains "Nejdl"'
    return outcome({"peer": 0, "op": "subscribe", "id": "s1", "query": query}, sent, done, result)


def publish(pid: str, sent: float, done: float, result: str = "ok") -> Outcome:
    op = {"peer": 1, "op": "publish", "id": pid, "document": DOCUMENT.format(id=pid)}
    return outcome(op, sent, done, result)


def test_the_oracle_owes_allows_and_counts() -> None:
    history = [
        subscribe(10.0, 10.1),
        publish("early", 1.0, 1.1),  # long before: neither owed nor allowed
        publish("margin", 8.0, 8.1),  # within the catch-up margin: allowed, not owed
        publish("settling", 10.5, 10.6),  # the subscription may not have spread yet: allowed
        publish("owed", 20.0, 20.1),
        publish("unknown", 21.0, 21.1, "unknown"),  # may or may not have gone out
        publish("failed", 22.0, 22.1, "failed"),
        outcome({"peer": 0, "op": "unsubscribe", "id": "s1"}, 30.0, 30.1),
        publish("after", 40.0, 40.1),
    ]
    clean = verdict(history, ["margin", "settling", "owed", "unknown"])
    assert clean == {
        "owed": 1, "delivered": 4, "lost": [], "unexpected": [], "duplicated": [],
    }  # fmt: skip
    assert verdict(history, [])["lost"] == ["owed"]
    assert verdict(history, ["owed", "early", "after", "failed"])["unexpected"] == [
        "after", "early", "failed",
    ]  # fmt: skip
    assert verdict(history, ["owed", "owed"])["duplicated"] == ["owed"]


def test_a_publication_whose_outcome_is_unknown_may_be_accepted_after_it_was_given_up() -> None:
    """Found on daemons in network namespaces: a peer cut from its access point published, the
    harness gave up on the answer, and the peer daemon sent the publication again once it was
    connected (it keeps requests in doubt): accepted 14 s later, it matched a subscription made
    meanwhile, within the catch-up margin of its acceptance. Allowed, never owed."""
    history = [publish("p", 5.0, 6.0, "unknown"), subscribe(20.0, 20.1)]
    assert verdict(history, ["p"])["unexpected"] == []
    assert verdict(history, [])["lost"] == []
    assert verdict([publish("p", 5.0, 6.0), subscribe(20.0, 20.1)], ["p"])["unexpected"] == ["p"]


def test_a_publication_acknowledged_alone_may_be_accepted_again_later() -> None:
    """``peer.kept``: a publication its access point acknowledged with its own copy alone is
    kept by its peer daemon and sent again, maybe through another access point much later,
    where it matches a subscription made meanwhile. Owed as acknowledged, and allowed later."""
    alone = publish("p", 5.0, 6.0)
    alone.detail = "alone"
    assert verdict([subscribe(1.0, 1.1), alone], [])["lost"] == ["p"]
    late = [alone, subscribe(20.0, 20.1)]
    assert verdict(late, ["p"])["unexpected"] == []
    assert verdict([publish("p", 5.0, 6.0), subscribe(20.0, 20.1)], ["p"])["unexpected"] == ["p"]


def test_a_subscription_whose_outcome_is_unknown_is_never_owed() -> None:
    history = [subscribe(10.0, 10.1, "unknown"), publish("p", 20.0, 20.1)]
    assert verdict(history, [])["lost"] == []
    assert verdict(history, ["p"])["unexpected"] == []


async def echo_through(proxy: Proxy, nursery: trio.Nursery) -> trio.SocketStream:
    await nursery.start(proxy.serve)
    host, _, port = proxy.listen.rpartition(":")
    return await trio.open_tcp_stream(host, int(port))


async def test_the_proxy_passes_slows_stalls_and_cuts(autojump_clock) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    target = listeners[0].socket.getsockname()[1]

    async def echo(stream: trio.SocketStream) -> None:
        async for data in stream:
            await stream.send_all(data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, echo, listeners)
        probe = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = probe[0].socket.getsockname()[1]
        await probe[0].aclose()
        proxy = Proxy(f"127.0.0.1:{port}", f"127.0.0.1:{target}")
        client = await echo_through(proxy, nursery)
        await client.send_all(b"a")
        assert await client.receive_some(10) == b"a"
        proxy.set("slow", 5.0)
        started = trio.current_time()
        await client.send_all(b"b")
        assert await client.receive_some(10) == b"b"
        assert trio.current_time() - started >= 10.0  # 5 s each way
        proxy.set("stall")
        await client.send_all(b"c")
        with trio.move_on_after(30) as waited:
            await client.receive_some(10)
        assert waited.cancelled_caught
        proxy.set("pass")
        assert await client.receive_some(10) == b"c"
        proxy.set("cut")
        assert await client.receive_some(10) == b""
        again = await trio.open_tcp_stream("127.0.0.1", port)
        assert await again.receive_some(10) == b""
        with pytest.raises(ValueError, match="unknown proxy state"):
            proxy.set("teleport")
        await client.aclose()
        await again.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.slow
def test_sixty_seconds_of_every_fault_kind_lose_nothing(tmp_path) -> None:
    """Every kind that loopback can make (partitions need hosts of their own: the test below),
    ``skew`` too where Debian's faketime is installed (``.ci/run`` installs it;
    without it that one kind is left out, and ``tests/deploy/test_clocks.py`` says why)."""
    kinds = [
        kind
        for kind in FAULTS
        if kind not in HOSTS_ONLY and (kind != "skew" or faketime_library() is not None)
    ]
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "deploy.chaos", "--seed", "1", "--duration", "60",
         "--superpeers", "4", "--peers", "4", "--faults", ",".join(kinds),
         "--report", str(report), "--keep", str(tmp_path / "data")],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(report.read_text())
    assert {fault["kind"] for fault in figures["faults"]} == set(kinds)
    assert figures["totals"]["owed"] > 100
    assert figures["totals"]["lost"] == 0 and figures["crashes"] == []
    assert "lost 0, duplicated 0, unexpected 0" in done.stdout


@pytest.mark.slow
@pytest.mark.skipif(NETNS_UNAVAILABLE is not None, reason=str(NETNS_UNAVAILABLE))
def test_partitions_on_hosts_of_their_own_lose_nothing(tmp_path) -> None:
    """Each daemon in a network namespace of its own, one fault at a time: partitions (halves,
    k | N - k, a bridge), a super-peer cut off from everyone, a peer cut from its access point
    (it fails over), moves. Nothing owed is lost, nothing comes twice or unowed, and the
    super-peers are one cube after every heal."""
    report = tmp_path / "report.json"
    kinds = "partition,isolate,peer-isolate,move"
    done = subprocess.run(
        [sys.executable, "-m", "deploy.chaos", "--seed", "2", "--duration", "90",
         "--superpeers", "4", "--peers", "4", "--hosts", "netns",
         "--faults", kinds, "--report", str(report), "--keep", str(tmp_path / "data")],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(report.read_text())
    assert "partition" in {fault["kind"] for fault in figures["faults"]}
    assert figures["totals"]["owed"] > 100
    assert figures["totals"]["lost"] == 0 and figures["crashes"] == []
    healed = [f for f in figures["faults"] if f["kind"] in ("partition", "isolate")]
    assert all(f["one_cube_seconds"] is not None for f in healed), healed
