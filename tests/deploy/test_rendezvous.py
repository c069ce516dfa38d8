"""Resources on real daemons (seed 004, Section 5.1): ``peer publish --file``, ``peer fetch``,
a rendezvous when the owner is offline, and what must be refused. Four TLS super-peers, peer
daemons driven by the ``peer`` command; every wait is for a condition (a status, a file), never a
fixed sleep."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

import qel
from deploy.cluster import Cluster
from deploy.driver import RemotePeer, quiet_problems, wait_quiet
from qel.resources import rendezvous_key
from superpeer.sim.fetching import fetch_request, open_resources
from wire import messages as m

pytestmark = [pytest.mark.process, pytest.mark.slow]
PEER = [sys.executable, "-m", "peer.cli"]
PAPER = """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
<http://example.org/{name}> a dc:article ; dc:title "RDF in P2P networks" ; dc:date 2004 .
"""
WAIT = 60.0


def peer(cluster: Cluster, j: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*PEER, *args, "--data-dir", str(cluster.peer_directories[j])],
        capture_output=True,
        text=True,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"peer {args} exited {result.returncode}: {result.stderr}")
    return result


def wait_until(condition, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def quiet(cluster: Cluster) -> None:
    def check() -> bool:
        statuses = [cluster.status(k) for k in cluster.live()]
        return not quiet_problems(statuses)

    wait_until(check, "a quiet network")


def state(cluster: Cluster, j: int, publication: str) -> str:
    return fetch(cluster, j, publication, "--status")["state"]


def fetch(cluster: Cluster, j: int, publication: str, *extra: str) -> dict:
    result = peer(cluster, j, "fetch", publication, "--json", *extra, check=False)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def inbox_ids(cluster: Cluster, j: int) -> set[str]:
    lines = peer(cluster, j, "inbox", "--json").stdout.splitlines()
    return {json.loads(line)["publication"] for line in lines if line.strip()}


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    """Four super-peers (one cluster for the module: each test leaves both peers online where
    they started); peer 0, the owner, at sp1; peer 1, the requester, at sp2."""
    directory = tmp_path_factory.mktemp("rendezvous")
    with Cluster(4, directory=directory) as cluster:
        cluster.peer_directories = [directory / "peer0", directory / "peer1"]
        cluster.start_peer(0, 1)
        cluster.start_peer(1, 2)
        ad = directory / "ad.json"
        ad.write_text(json.dumps({"schemas": ["dc"]}))
        peer(cluster, 0, "advertise", str(ad))
        peer(cluster, 1, "subscribe", "X : t(X, dc:title, T)", "--id", "titles")
        quiet(cluster)
        yield cluster


def publish(cluster: Cluster, j: int, name: str, content: bytes, directory: Path) -> str:
    document = directory / f"{name}.ttl"
    document.write_text(PAPER.format(name=name))
    data = directory / f"{name}.pdf"
    data.write_bytes(content)
    result = peer(cluster, j, "publish", str(document), "--id", name, "--file", str(data))
    assert result.stdout.startswith(f"published {name}"), result
    wait_until(lambda: name in inbox_ids(cluster, 1), f"the notification of {name}")
    return name


def test_fetch_from_an_online_owner_then_by_rendezvous_with_the_owner_offline(network, tmp_path):
    cluster = network
    content = os.urandom(5 * 1024 * 1024 + 12345)  # more than one window
    publish(cluster, 0, "online", content, tmp_path)
    out = tmp_path / "got-online.pdf"
    found = fetch(cluster, 1, "online", "--out", str(out), "--wait", "60")
    assert found["state"] == "done", found
    assert out.read_bytes() == content
    assert found["sha256"] == hashlib.sha256(content).hexdigest()

    # owner offline: the request waits at its access point, and completes when it is back
    later = os.urandom(300_000)
    publish(cluster, 0, "offline", later, tmp_path)
    cluster.stop_peer(0)
    found = fetch(cluster, 1, "offline", "--wait", "0")
    assert found["state"] == "waiting" and found["received"] == 0
    again = fetch(cluster, 1, "offline", "--wait", "0")  # the same rendezvous, not a second one
    assert again["rendezvous"] == found["rendezvous"]
    sp1 = cluster.status(1)["rendezvous"]
    assert sp1["waiting_for_owners"] == 1, sp1
    # the requester goes offline too: the file waits in its access point's rendezvous directory
    cluster.stop_peer(1)
    cluster.start_peer(0, 1)
    wait_until(lambda: cluster.status(2)["rendezvous"]["ready"] == 1, "the rendezvous file at sp2")
    sp2 = cluster.status(2)["rendezvous"]
    assert sp2["bytes"] == len(later) and sp2["max_bytes"] > 0 and sp2["retention_seconds"] > 0
    cluster.start_peer(1, 2)
    wait_until(lambda: state(cluster, 1, "offline") == "done", "the collected file")
    stored = Path(fetch(cluster, 1, "offline", "--status")["out"])
    assert stored.read_bytes() == later and stored.parent.name == "notifications"
    wait_until(lambda: cluster.status(2)["rendezvous"]["files"] == 0, "the collected file gone")


def test_a_rendezvous_follows_a_requester_that_moved(network, tmp_path):
    cluster = network
    content = os.urandom(200_000)
    publish(cluster, 0, "moving", content, tmp_path)
    cluster.stop_peer(0)
    assert fetch(cluster, 1, "moving", "--wait", "0")["state"] == "waiting"
    cluster.stop_peer(1)
    cluster.start_peer(1, 3)  # the requester reconnects elsewhere
    quiet(cluster)
    cluster.start_peer(0, 1)
    wait_until(lambda: state(cluster, 1, "moving") == "done", "the file after the move")
    assert Path(fetch(cluster, 1, "moving", "--status")["out"]).read_bytes() == content
    cluster.stop_peer(1)
    cluster.start_peer(1, 2)  # and back


def test_a_file_ready_at_the_old_access_point_reaches_a_requester_that_moved(network, tmp_path):
    """Issue 14: the file completes at the requester's access point (sp2) while the requester is
    away; the owner goes offline for good; the requester comes back through sp3. Its new access
    point pulls the file from the old one, which deletes it only once sp3 has it all."""
    cluster = network
    content = os.urandom(5 * 1024 * 1024 + 777)  # more than one window
    publish(cluster, 0, "stranded", content, tmp_path)
    cluster.stop_peer(0)
    assert fetch(cluster, 1, "stranded", "--wait", "0")["state"] == "waiting"
    cluster.stop_peer(1)
    cluster.start_peer(0, 1)
    wait_until(lambda: cluster.status(2)["rendezvous"]["ready"] == 1, "the file ready at sp2")
    cluster.stop_peer(0)  # the owner is gone: only sp2 has the bytes
    cluster.start_peer(1, 3)
    wait_until(lambda: state(cluster, 1, "stranded") == "done", "the file at the new access point")
    assert Path(fetch(cluster, 1, "stranded", "--status")["out"]).read_bytes() == content
    wait_until(lambda: cluster.status(2)["rendezvous"]["files"] == 0, "the old copy released")
    assert cluster.status(2)["rendezvous"]["statistics"]["handed"] == 1
    assert cluster.status(3)["rendezvous"]["statistics"]["collected"] >= 1
    cluster.stop_peer(1)
    cluster.start_peer(1, 2)  # both back where they started
    cluster.start_peer(0, 1)


def test_a_corrupted_upload_is_refused_and_an_impostor_can_neither_answer_nor_collect(
    network, tmp_path
):
    cluster = network
    content = os.urandom(100_000)
    publish(cluster, 0, "corrupt", content, tmp_path)
    cluster.stop_peer(0)
    # the owner's kept copy changes behind the daemon's back: its hash no longer matches
    offered = cluster.peer_directories[0] / "resources" / "offered"
    [copy] = [
        p.with_suffix("")
        for p in offered.glob("*.json")
        if json.loads(p.read_text())["publication"] == "corrupt"
    ]
    copy.write_bytes(os.urandom(len(content)))
    assert fetch(cluster, 1, "corrupt", "--wait", "0")["state"] == "waiting"
    cluster.start_peer(0, 1)
    wait_until(lambda: state(cluster, 1, "corrupt") == "failed", "the refusal")
    found = fetch(cluster, 1, "corrupt", "--status")
    assert "SHA-256" in found["reason"]
    assert cluster.status(2)["rendezvous"]["statistics"]["corrupted"] == 1
    copy.write_bytes(content)  # repaired: fetching again retries
    wait_until(
        lambda: fetch(cluster, 1, "corrupt", "--wait", "5")["state"] == "done", "the retried fetch"
    )

    # an impostor at the owner's access point: its uploads for the owner's rendezvous are refused
    publish(cluster, 0, "guarded", os.urandom(50_000), tmp_path)
    cluster.stop_peer(0)
    assert fetch(cluster, 1, "guarded", "--wait", "0")["state"] == "waiting"
    wait_until(
        lambda: cluster.status(1)["rendezvous"]["waiting_for_owners"] == 1, "the request at sp1"
    )
    key = fetch(cluster, 1, "guarded", "--status")["rendezvous"]
    forged = m.Upload(rendezvous=key, offset=0, data=b"not the owner's bytes")
    failures = _as_impostor(cluster, 1, forged)
    wait_until(lambda: cluster.status(1)["rendezvous"]["statistics"]["refused"] == 1, "refusal")
    assert failures == [] and state(cluster, 1, "guarded") == "waiting"
    # ... nor, at the requester's access point, collect the requester's file
    cluster.stop_peer(1)
    cluster.start_peer(0, 1)
    wait_until(lambda: cluster.status(2)["rendezvous"]["ready"] == 1, "the owner's upload")
    failures = _as_impostor(cluster, 2, m.Collect(rendezvous=key, offset=0, length=1 << 20))
    assert [f.reason for f in failures] == ["no rendezvous file of yours under that key"]
    assert cluster.status(2)["rendezvous"]["statistics"]["refused"] == 1
    cluster.start_peer(1, 2)
    wait_until(lambda: state(cluster, 1, "guarded") == "done", "the requester's file")


def test_a_collection_cut_halfway_resumes_from_the_partial_file(network, tmp_path):
    """A requester collecting a three-window file loses its connection after the first bytes
    (it closes it as they arrive); it reconnects, and the access point's ``FileReady`` makes it
    ask from what its ``.part`` holds, not from 0, and it ends with the verified file."""
    cluster = network
    content = os.urandom(9 * 1024 * 1024 + 4321)

    async def run() -> None:
        requester = RemotePeer("cut", cluster.addresses[3], ca=cluster.ca_certificate)
        requester.resources = open_resources(tmp_path / "cut", requester.network_id)
        async with trio.open_nursery() as nursery:
            await requester.connect(nursery)
            titles = qel.parse_subscription("X : t(X, dc:title, T)")
            await requester.request(m.Subscribe(id="titles", subscription=titles))
            await wait_quiet(cluster, [requester])
            await trio.to_thread.run_sync(publish, cluster, 0, "cut", content, tmp_path)
            with trio.fail_after(WAIT):
                while not requester.notifications:
                    await trio.sleep(0.01)
            [notify] = requester.notifications
            fetch = fetch_request(requester.resources, notify, "cut")
            assert fetch is not None
            assert isinstance(await requester.request(fetch), m.Ack)
            key = rendezvous_key(requester.network_id, notify.owner, "cut")
            with trio.fail_after(WAIT):
                while requester.resources.progress(key)["received"] == 0:
                    await requester.wait_for_resource()
            await requester.disconnect()
            cut_at = requester.resources.progress(key)["received"]
            assert 0 < cut_at < len(content)
            events_before = len(requester.resource_events)
            await requester.connect(nursery)
            with trio.fail_after(WAIT):
                while requester.resources.progress(key)["state"] == "waiting":
                    await requester.wait_for_resource()
            resumed = [
                e for e in requester.resource_events[events_before:] if isinstance(e, m.FileChunk)
            ]
            assert resumed[0].offset == cut_at, "not collected from where it was cut"
            done = requester.resources.progress(key)
            assert done["state"] == "done", done
            assert Path(done["out"]).read_bytes() == content
            await requester.disconnect()
            nursery.cancel_scope.cancel()

    trio.run(run)


def _as_impostor(cluster: Cluster, k: int, message: object) -> list[m.FetchFailed]:
    """A peer with another key, identified at super-peer ``k``, sends ``message`` on its own
    authenticated session; the ``FetchFailed`` answers it got."""

    async def run() -> list[m.FetchFailed]:
        impostor = RemotePeer("impostor", cluster.addresses[k], ca=cluster.ca_certificate)
        async with trio.open_nursery() as nursery:
            await impostor.connect(nursery)
            await impostor.transfer(message)  # type: ignore[arg-type]
            if isinstance(message, m.Collect):
                with trio.fail_after(WAIT):
                    while not impostor.resource_events:
                        await impostor.wait_for_resource()
            else:  # not answered: a status shows the refusal
                await impostor.request(m.Advertise(advertisement=qel.parse_advertisement({})))
            await impostor.disconnect()
            nursery.cancel_scope.cancel()
        return [e for e in impostor.resource_events if isinstance(e, m.FetchFailed)]

    return trio.run(run)


def test_an_update_without_a_file_keeps_the_file(network, tmp_path):
    """``peer publish --replaces`` without ``--file``: the new version still offers the file
    (the owner's daemon carries its descriptor over), so a requester whose inbox now holds the
    new version fetches the same bytes."""
    cluster = network
    content = os.urandom(70_000)
    publish(cluster, 0, "revised", content, tmp_path)
    document = tmp_path / "revised-2.ttl"
    document.write_text(PAPER.format(name="revised").replace("2004", "2005"))
    result = peer(cluster, 0, "publish", str(document), "--replaces", "revised")
    assert f"sha256 {hashlib.sha256(content).hexdigest()}" in result.stdout, result.stdout

    def kinds() -> list[str]:
        lines = peer(cluster, 1, "inbox", "--json").stdout.splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
        return [r.get("kind") for r in records if r["publication"] == "revised"]

    wait_until(lambda: "changed" in kinds(), "the changed notification")
    found = fetch(cluster, 1, "revised", "--wait", "60")
    assert found["state"] == "done", found
    assert Path(found["out"]).read_bytes() == content
