"""The design paper's scenario on a real local network (``python -m deploy.demo``).

Starts 8 super-peer daemons on 127.0.0.1 (separate processes, a 3-dimensional hypercube), connects
three peers over TCP: Bob, who wants the 2004 articles by Nejdl or Koubarakis, a Hannover peer
that advertises and publishes L3S papers, and a Crete peer for Koubarakis' group. It prints what
happens and what Bob receives (exactly the two matching papers), then stops everything.
"""

from __future__ import annotations

import sys

import trio

import qel
from deploy.cluster import Cluster
from deploy.driver import RemotePeer, wait_quiet
from wire import messages as m

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
            for publication in qel.parse_publications(PAPERS[peer.name], publisher=peer.name):
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
        for peer in everyone:
            await peer.disconnect()
        nursery.cancel_scope.cancel()
    return received


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
