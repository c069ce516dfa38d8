"""The design paper's scenario on a real local network (``python -m deploy.demo [--stay]``).

Starts 8 super-peer daemons on 127.0.0.1 (separate processes, a 3-dimensional hypercube), connects
three peers over TCP: Bob, who wants the 2004 articles by Nejdl or Koubarakis, a Hannover peer
that advertises and publishes L3S papers (with the file of one of them), and a Crete peer for
Koubarakis' group. Bob is a desktop peer: the ``peer run`` daemon, with its web app, whose address
the demo prints first (open it to watch Bob's inbox fill); Hannover and Crete are driven over the
wire (``deploy.driver``). It prints what happens and what Bob receives (exactly the two matching
papers); then Hannover goes offline, Bob asks for the paper's file, and it reaches him by
rendezvous when Hannover is back (seed 004, Section 5.1). Then it stops everything, or with
``--stay`` keeps the network running until Ctrl-C, to look around Bob's web app.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import trio

import qel
from deploy.cluster import Cluster, wait_for_stop_signal
from deploy.driver import RemotePeer, wait_quiet
from peer.control import ControlClient
from peer.resources import DONE, Resources
from qel.resources import with_resource
from wire import messages as m

PAPER_FILE = b"%PDF-1.4\n% Designing Semantic Publish/Subscribe Networks Using Super-Peers\n" * 40
PAPER_SUBJECT = "http://www.l3s.de/publications/pubsub04.pdf"

BOB = """
PREFIX dc: <http://purl.org/dc/elements/1.1/>
SELECT ?x WHERE { ?x a dc:article ; dc:creator ?y ; dc:date ?d .
  FILTER ((CONTAINS(?y, "Nejdl") || CONTAINS(?y, "Koubarakis")) && ?d = 2004) }
"""
HANNOVER_AD = {"values": {"dc:creator": ["W. Nejdl", "P. Chirita", "W. Siberski"]}}
CRETE_AD = {"schemas": ["dc"]}
PAPERS = {
    "hannover": """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
@prefix l3s: <http://www.l3s.de/publications/> .
l3s:pubsub04.pdf a dc:article ; dc:creator "W. Nejdl", "P. Chirita" ; dc:date 2004 .
l3s:edutella02.pdf a dc:article ; dc:creator "W. Nejdl" ; dc:date 2002 .
l3s:routing04.pdf a dc:book ; dc:creator "W. Siberski" ; dc:date 2004 .
""",
    "crete": """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
@prefix isl: <http://www.intelligence.tuc.gr/publications/> .
isl:esws04.pdf a dc:article ; dc:creator "Koubarakis" ; dc:date 2004 .
isl:dias02.pdf a dc:article ; dc:creator "Koubarakis", "Tryfonopoulos" ; dc:date 2002 .
""",
}


async def scenario(cluster: Cluster, bob: Path) -> list[str]:
    """Runs the scenario with Bob's daemon (data directory ``bob``); returns the subjects Bob
    received."""
    ca = cluster.ca_certificate
    hannover = RemotePeer("hannover", cluster.addresses[3], ca=ca)
    crete = RemotePeer("crete", cluster.addresses[7], ca=ca)
    everyone = [hannover, crete]
    home = cluster.root / hannover.name
    hannover.resources = Resources(home / "resources", home / "notifications", hannover.network_id)
    status = await command(bob, "status")
    print(
        f"bob's daemon is attached to the super-peer at {status['access_point']} over TLS, "
        f"identified as {status['peer_id'][:16]}..."
    )
    async with trio.open_nursery() as nursery:
        for peer in everyone:
            await peer.connect(nursery)
            print(
                f"{peer.name} attached to the super-peer at {peer.address} over TLS, identified "
                f"as {peer.network_id[:16]}..."
            )
        for peer, ad in ((hannover, HANNOVER_AD), (crete, CRETE_AD)):
            advertisement = qel.parse_advertisement(ad)
            await peer.request(m.Advertise(advertisement=advertisement))
            print(f"{peer.name} advertises {advertisement.to_text()}")
        await wait_quiet(cluster, everyone)
        subscribed = await command(bob, "subscribe", query=BOB, id="nejdl-or-koubarakis-2004")
        print(f"bob subscribes: {subscribed['query']}")
        await wait_quiet(cluster, everyone)
        for peer in (hannover, crete):
            for parsed in qel.parse_publications(PAPERS[peer.name], publisher=peer.name):
                publication = parsed
                if parsed.subject.value == PAPER_SUBJECT:
                    publication = offer(hannover, parsed, cluster.root)
                await peer.request(m.Publish(publication=publication))
                print(f"{peer.name} publishes <{publication.subject}>")
                await wait_quiet(cluster, everyone)
        names = {peer.network_id: peer.name for peer in everyone}
        records = (await command(bob, "inbox", after="0"))["records"]
        received = []
        for record in records:
            received.append(record["subject"])
            print(
                f"bob is notified of <{record['subject']}> (owner {names[record['owner']]}, "
                f"access point {record['access_point']}, {record['hops']} super-peer hops)"
            )
        # To fetch a paper, Bob asks where its owner is now (its public identifier is all he has).
        owner = records[0]["owner"] if records else hannover.network_id
        found = await command(bob, "locate", public_id=owner)
        if found["online"]:
            print(
                f"bob locates {names[owner]}: online at {found['address']}, through super-peer "
                f"{found['superpeer']} ({found['access_point']})"
            )
        await rendezvous(bob, hannover, nursery, names)
        for peer in everyone:
            await peer.disconnect()
        nursery.cancel_scope.cancel()
    return received


async def command(bob: Path, name: str, **arguments: str) -> dict[str, Any]:
    """One command to Bob's daemon, over its control socket (what the ``peer`` command and its
    web app do)."""

    def call() -> dict[str, Any]:
        with ControlClient(bob / "control.sock", timeout=120) as control:
            ok, body = control.call(name, **arguments)
        if not ok:
            raise RuntimeError(f"bob's daemon refused {name}: {body.get('message')}")
        return body

    return await trio.to_thread.run_sync(call)


def offer(owner: RemotePeer, publication: qel.Publication, root: Path) -> qel.Publication:
    """The owner keeps a copy of the paper's file; the publication carries its hash and size."""
    assert owner.resources is not None
    source = root / "pubsub04.pdf"
    source.write_bytes(PAPER_FILE)
    copy, resource = owner.resources.copy_in(source)
    owner.resources.offer(publication.id, copy, resource, source)
    return with_resource(publication, resource)


async def rendezvous(
    bob: Path, hannover: RemotePeer, nursery: trio.Nursery, names: dict[str, str]
) -> None:
    """Bob fetches the paper while Hannover is offline: Hannover's access point keeps the request,
    Hannover uploads the file when it reconnects, Bob's access point hands it to Bob."""
    [record] = [
        r
        for r in (await command(bob, "inbox", after="0"))["records"]
        if r["subject"] == PAPER_SUBJECT
    ]
    await hannover.disconnect()
    print("hannover goes offline")
    wanted = await command(bob, "fetch", publication=record["publication"], wait="0")
    print(
        f"bob asks for <{PAPER_SUBJECT}> ({wanted['size']} bytes, sha256 "
        f"{wanted['sha256'][:16]}...): {names[record['owner']]} is offline, so its access point "
        f"{record['access_point']} keeps a rendezvous"
    )
    await hannover.connect(nursery)
    print("hannover comes back and uploads the file to bob's access point")
    progress = await command(bob, "fetch", publication=record["publication"], wait="60")
    if progress["state"] != DONE:
        raise RuntimeError(f"the rendezvous did not complete: {json.dumps(progress)}")
    first = Path(progress["out"]).read_bytes()[:60]
    print(f"bob has the file, size and SHA-256 verified; it begins: {first!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--stay",
        action="store_true",
        help="keep the network running after the scenario (Ctrl-C stops it), to look around "
        "Bob's web app",
    )
    args = parser.parse_args(argv)
    print("starting 8 super-peers on 127.0.0.1 ...", flush=True)
    with Cluster(8) as cluster:
        bob = cluster.root / "bob"
        cluster.peer_directories.append(bob)
        cluster.start_peer(0, 0)
        url = (bob / "ui.url").read_text().strip()
        print(f"bob's web app (open it in a browser while the demo runs): {url}", flush=True)
        received = trio.run(scenario, cluster, bob)
        if args.stay:
            print(f"the network keeps running; bob's web app: {url}", flush=True)
            print("Ctrl-C stops everything", flush=True)
            wait_for_stop_signal()
        print("stopping the peers and the super-peers ...", flush=True)
    expected = {
        "http://www.l3s.de/publications/pubsub04.pdf",
        "http://www.intelligence.tuc.gr/publications/esws04.pdf",
    }
    if set(received) == expected and len(received) == 2:
        print("Bob received exactly the two 2004 articles by Nejdl or Koubarakis.")
        return 0
    print(f"unexpected notifications: {sorted(received)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
