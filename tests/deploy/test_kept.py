"""On daemons, each on a host of its own: a super-peer cut off alone acknowledges publications
with its own copy alone (``Ack.alone``) and is then lost for good, disk and all, before the cut
heals. Its publisher's daemon kept them (``peer.kept``), fails over to another super-peer of
its list and sends them again there: the subscriber receives every one, once. Without the
publisher's copies they were lost (stop 61's chaos run: 45 of 4,666). Needs root, ``ip`` and
``nft`` (skipped otherwise, with the reason)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from deploy.chaos import PEER_SETTINGS, SUPERPEER_SETTINGS, inbox_of
from deploy.cluster import Cluster
from deploy.hosts import NetnsHosts, unavailable
from peer.control import ControlClient
from tests.deploy.test_hosts import run_name

REASON = unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=str(REASON))]
DOCUMENT = (
    "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
    '<http://example.org/kept/{id}> dc:title "t" ; dc:creator "Nejdl" ; dc:date 2004 .\n'
)


def call(directory: Path, command: str, **arguments: str) -> dict:
    with ControlClient(directory / "control.sock", timeout=60.0) as control:
        ok, body = control.call(command, **arguments)
    assert ok, body
    return body


def until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.2)


def received(directory: Path) -> list[str]:
    return [record["publication"] for record in inbox_of(directory)]


def test_what_a_super_peer_cut_off_alone_acknowledged_survives_its_loss_for_good(tmp_path):
    with (
        NetnsHosts(run_name("k")) as hosts,
        Cluster(
            4,
            directory=tmp_path,
            peers=2,
            hosts=hosts,
            settings=SUPERPEER_SETTINGS,
            peer_settings=PEER_SETTINGS,
            peer_fallbacks=True,
        ) as cluster,
    ):
        publisher, subscriber = cluster.peer_directories  # at sp0 and sp1
        call(publisher, "advertise", advertisement='{"schemas": ["dc"]}')
        call(subscriber, "subscribe", id="s1", query='X : t(X, dc:creator, C), C contains "Nejdl"')
        call(publisher, "publish", data=DOCUMENT.format(id="p0"), id="p0")
        until(lambda: received(subscriber) == ["p0"], 30, "the first publication delivered")

        # sp0 from the other super-peers (peers reach both sides)
        peers = ["peer0", "peer1"]
        cut = hosts.partition([["sp0", *peers], ["sp1", "sp2", "sp3", *peers]])
        alone: list[str] = []
        for n in range(1, 40):
            pid = f"p{n}"
            [result] = call(publisher, "publish", data=DOCUMENT.format(id=pid), id=pid)["results"]
            if result.get("alone"):
                alone.append(pid)
            if len(alone) == 5:
                break
        assert len(alone) == 5, "sp0 cut off alone says it holds them alone"
        assert call(publisher, "status")["kept"]["publications"] == 5
        cluster.kill(0)  # lost for good before any neighbour answered it again
        hosts.heal(cut)

        published = [f"p{n}" for n in range(int(alone[-1][1:]) + 1)]
        until(
            lambda: sorted(received(subscriber)) == sorted(published),
            120,
            f"every acknowledged publication delivered: {sorted(set(published) - set(received(subscriber)))} missing",
        )
        assert len(received(subscriber)) == len(published), "each once"
        until(
            lambda: call(publisher, "status")["kept"] == {"publications": 0, "forgotten": 0},
            60,
            "the publisher forgets them once another access point acknowledged them",
        )
