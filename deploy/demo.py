"""The design paper's scenario on a real local network (``python -m deploy.demo``).

Starts 8 super-peer daemons on 127.0.0.1 (separate processes, a 3-dimensional hypercube), connects
three peers over TCP: Bob, who wants the 2004 articles by Nejdl or Koubarakis, a Hannover peer
that advertises and publishes L3S papers (with the file of one of them), and a Crete peer for
Koubarakis' group. It prints what happens and what Bob receives (exactly the two matching papers);
then Hannover goes offline, Bob asks for the paper's file, and it reaches him by rendezvous when
Hannover is back (seed 004, Section 5.1). Then it stops everything.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

import qel
from deploy.cluster import Cluster
from deploy.driver import RemotePeer, wait_quiet
from peer.resources import DONE, Resources
from qel.resources import resource_of, with_resource
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


async def scenario(cluster: Cluster) -> list[str]:
    """Runs the scenario; returns the subjects Bob received."""
    ca = cluster.ca_certificate
    bob = RemotePeer("bob", cluster.addresses[0], ca=ca)
    hannover = RemotePeer("hannover", cluster.addresses[3], ca=ca)
    crete = RemotePeer("crete", cluster.addresses[7], ca=ca)
    everyone = [bob, hannover, crete]
    for peer in (bob, hannover):
        home = cluster.root / peer.name
        peer.resources = Resources(home / "resources", home / "notifications", peer.network_id)
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
        subscription = qel.parse_subscription(BOB)
        await bob.request(m.Subscribe(id="nejdl-or-koubarakis-2004", subscription=subscription))
        print(f"bob subscribes: {subscription.to_text()}")
        await wait_quiet(cluster, everyone)
        for peer in (hannover, crete):
            for parsed in qel.parse_publications(PAPERS[peer.name], publisher=peer.name):
                publication = parsed
                if parsed.subject.value == PAPER_SUBJECT:
                    publication = offer(hannover, parsed, cluster.root)
                await peer.request(m.Publish(publication=publication))
                print(f"{peer.name} publishes <{publication.subject}>")
                await wait_quiet(cluster, everyone)
        received = []
        names = {peer.network_id: peer.name for peer in everyone}
        for note in bob.notifications:
            received.append(note.publication.subject.value)
            print(
                f"bob is notified of <{note.publication.subject}> (owner {names[note.owner]}, "
                f"access point {note.access_point}, {note.hops} super-peer hops)"
            )
        # To fetch a paper, Bob asks where its owner is now (its public identifier is all he has).
        owner = bob.notifications[0].owner if bob.notifications else hannover.network_id
        found = await bob.request(m.Locate(id="owner", public_id=owner))
        if isinstance(found, m.Located) and found.online:
            print(
                f"bob locates {names[owner]}: online at {found.address}, through super-peer "
                f"{found.superpeer} ({found.access_point})"
            )
        await rendezvous(bob, hannover, nursery, names)
        for peer in everyone:
            await peer.disconnect()
        nursery.cancel_scope.cancel()
    return received


def offer(owner: RemotePeer, publication: qel.Publication, root: Path) -> qel.Publication:
    """The owner keeps a copy of the paper's file; the publication carries its hash and size."""
    assert owner.resources is not None
    source = root / "pubsub04.pdf"
    source.write_bytes(PAPER_FILE)
    copy, resource = owner.resources.copy_in(source)
    owner.resources.offer(publication.id, copy, resource, source)
    return with_resource(publication, resource)


async def rendezvous(
    bob: RemotePeer, hannover: RemotePeer, nursery: trio.Nursery, names: dict[str, str]
) -> None:
    """Bob fetches the paper while Hannover is offline: Hannover's access point keeps the request,
    Hannover uploads the file when it reconnects, Bob's access point hands it to Bob."""
    assert bob.resources is not None
    [note] = [n for n in bob.notifications if n.publication.subject.value == PAPER_SUBJECT]
    await hannover.disconnect()
    print("hannover goes offline")
    resource = resource_of(note.publication)
    assert resource is not None
    record = {
        "publication": note.publication.id,
        "owner": note.owner,
        "origin": note.origin,
        "access_point": note.access_point,
        "sha256": resource.sha256,
        "size": resource.size,
    }
    key, wanted = bob.resources.want(record, None)
    await bob.request(bob.resources.fetch_message(wanted))
    print(
        f"bob asks for <{PAPER_SUBJECT}> ({wanted['size']} bytes, sha256 "
        f"{wanted['sha256'][:16]}...): {names[note.owner]} is offline, so its access point "
        f"{note.access_point} keeps a rendezvous"
    )
    await hannover.connect(nursery)
    print("hannover comes back and uploads the file to bob's access point")
    with trio.fail_after(60):
        while (bob.resources.progress(key) or {}).get("state") != DONE:
            await bob.wait_for_resource()
    progress = bob.resources.progress(key)
    assert progress is not None
    first = Path(progress["out"]).read_bytes()[:60]
    print(f"bob has the file, size and SHA-256 verified; it begins: {first!r}")


def main() -> int:
    print("starting 8 super-peers on 127.0.0.1 ...", flush=True)
    with Cluster(8) as cluster:
        received = trio.run(scenario, cluster)
        print("stopping the super-peers ...", flush=True)
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
