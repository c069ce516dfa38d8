"""The design paper's scenario, printed readably (``python -m deploy.demo``).

Bob wants new 2004 articles by Nejdl or Koubarakis. A Hannover peer advertises and publishes L3S
papers (Nejdl), a Crete peer advertises and publishes Koubarakis' group's papers. This runs the
language layer of the scenario: which advertisements cover Bob's subscription (where a super-peer
would forward it) and which publications match (what Bob receives).
"""

from __future__ import annotations

import qel

BOB = """
PREFIX dc: <http://purl.org/dc/elements/1.1/>
SELECT ?x WHERE { ?x a dc:article ; dc:creator ?y ; dc:date ?d .
  FILTER ((CONTAINS(?y, "Nejdl") || CONTAINS(?y, "Koubarakis")) && ?d = 2004) }
"""
PEERS = {
    "hannover": {
        "advertisement": {"values": {"dc:creator": ["W. Nejdl", "P. Chirita", "W. Siberski"]}},
        "publications": """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
@prefix l3s: <http://www.l3s.de/publications/> .
l3s:pubsub04.pdf a dc:article ; dc:creator "W. Nejdl", "P. Chirita" ; dc:date 2004 .
l3s:edutella02.pdf a dc:article ; dc:creator "W. Nejdl" ; dc:date 2002 .
l3s:routing04.pdf a dc:book ; dc:creator "W. Siberski" ; dc:date 2004 .
""",
    },
    "crete": {
        "advertisement": {"schemas": ["dc"]},
        "publications": """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
@prefix isl: <http://www.intelligence.tuc.gr/publications/> .
isl:esws04.pdf a dc:article ; dc:creator "Koubarakis" ; dc:date 2004 .
isl:dias02.pdf a dc:article ; dc:creator "Koubarakis", "Tryfonopoulos" ; dc:date 2002 .
""",
    },
}


def main() -> None:
    bob = qel.parse_subscription(BOB)
    print("Bob subscribes:\n  " + bob.to_text().replace("\n", "\n  "))
    for name, peer in PEERS.items():
        advertisement = qel.parse_advertisement(peer["advertisement"])
        covered = qel.advertisement_covers(advertisement, bob)
        print(f"\n{name} advertises {advertisement.to_text()}")
        print(f"  covers Bob's subscription: {'yes' if covered else 'no'}")
        for publication in qel.parse_publications(peer["publications"], publisher=name):
            verdict = "notify Bob" if qel.matches(bob, publication) else "not for Bob"
            print(f"  publishes <{publication.subject}>: {verdict}")


if __name__ == "__main__":
    main()
