"""Matching throughput with RDFS entailment on and off, in one run.

    python -m bench.entailment [--subscriptions 10000] [--publications 500] [--seed 1] [--json]

The predicate index (``PredicateIndex.match``, as the routing core uses it) holds
``--subscriptions`` digital-library subscriptions, one in ten of them on a super-class or
super-property of the library schema below (documents under ``lib:Document`` under ``lib:Work``,
theses under reports, ``dc:creator`` under ``lib:contributor``, ``dc:subject``'s domain
``lib:Classified``), so entailment changes what matches. Timed over the same publications:

* off: ``match(publication)``;
* on: ``match(schema.entail(publication))`` (the closure computed per publication, as the access
  point does at the publication's entry);
* the closure alone, and the same closure with owlrl (``owlrl.RDFS_Semantics`` over an rdflib
  graph of the publication and the schema), the maintained library the closure could have used.

The ratio off/on is the cost of entailment per publication.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import qel
from bench.columns import aligned
from bench.rates import per_second
from poset import PredicateIndex
from workloads.digital_library import DC, LIB, DigitalLibrary

BUDGET = 5.0
"""Seconds one throughput measurement may take at most."""

RDFS = "http://www.w3.org/2000/01/rdf-schema#"
SCHEMA = f"""@prefix dc: <{DC}> . @prefix lib: <{LIB}> . @prefix rdfs: <{RDFS}> .
dc:article rdfs:subClassOf lib:Document . dc:book rdfs:subClassOf lib:Document .
lib:report rdfs:subClassOf lib:Document . lib:thesis rdfs:subClassOf lib:report .
lib:Document rdfs:subClassOf lib:Work .
dc:creator rdfs:subPropertyOf lib:contributor . dc:subject rdfs:domain lib:Classified .
"""
WIDER = (
    f"X : t(X, rdf:type, <{LIB}Document>)",
    f"X : t(X, rdf:type, <{LIB}Work>)",
    f"X : t(X, rdf:type, <{LIB}report>)",
    f"X : t(X, rdf:type, <{LIB}Classified>)",
    f'X : t(X, <{LIB}contributor>, Y), Y contains "Nejdl"',
)


def run(subscriptions: int, publications: int, seed: int) -> dict[str, object]:
    library = DigitalLibrary(seed=seed)
    schema = qel.Schema(qel.parse_schema(SCHEMA))
    index = PredicateIndex()
    parsed: dict[str, qel.Subscription] = {}
    for key in range(subscriptions):
        text = WIDER[key // 10 % len(WIDER)] if key % 10 == 0 else library.subscription()
        if text not in parsed:
            parsed[text] = qel.parse_subscription(text)
        index.add(key, parsed[text])
    documents = [
        qel.parse_publications(library.turtle(library.document(n)), id=f"n{n}")[0]
        for n in range(publications)
    ]
    index.match(documents[0])  # build the lazy structures before timing
    entailed = [schema.entail(p) for p in documents]
    off = per_second(documents * 3, index.match, BUDGET)
    on = per_second(documents * 3, lambda p: index.match(schema.entail(p)), BUDGET)
    closure = per_second(documents * 20, schema.entail, BUDGET)
    owlrl_closure = per_second(documents, _owlrl_closure(SCHEMA), BUDGET)
    return {
        "subscriptions": subscriptions,
        "publications": publications,
        "axioms": len(schema.axioms),
        "off_pubs_per_s": round(off, 1),
        "on_pubs_per_s": round(on, 1),
        "off_vs_on": round(off / on, 2),
        "closure_per_s": round(closure, 1),
        "owlrl_closure_per_s": round(owlrl_closure, 1),
        "triples_per_publication": round(
            sum(len(p.statements) for p in documents) / len(documents), 2
        ),
        "entailed_triples_per_publication": round(
            sum(len(p.statements) for p in entailed) / len(entailed), 2
        ),
        "matches_off": sum(len(index.match(p)) for p in documents),
        "matches_on": sum(len(index.match(p)) for p in entailed),
        "seed": seed,
    }


def _owlrl_closure(schema_text: str) -> Callable[[qel.Publication], object]:
    """owlrl's RDFS closure of one publication under the schema (a fresh graph each time, as
    a per-publication closure needs)."""
    import owlrl
    import rdflib

    from qel.rdf import to_rdflib

    schema = rdflib.Graph().parse(data=schema_text, format="turtle")

    def close(publication: qel.Publication) -> object:
        graph = rdflib.Graph()
        for triple in schema:
            graph.add(triple)
        subject = rdflib.URIRef(publication.subject.value)
        for predicate, obj in publication.statements:
            graph.add((subject, rdflib.URIRef(predicate.value), to_rdflib(obj)))
        owlrl.DeductiveClosure(
            owlrl.RDFS_Semantics, axiomatic_triples=False, datatype_axioms=False
        ).expand(graph)
        return graph

    return close


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--publications", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.subscriptions, args.publications, args.seed)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        aligned(
            [
                ["matching", "publications/s", "matches", "triples/publication"],
                [
                    "entailment off",
                    f"{report['off_pubs_per_s']}",
                    f"{report['matches_off']}",
                    f"{report['triples_per_publication']}",
                ],
                [
                    "entailment on",
                    f"{report['on_pubs_per_s']}",
                    f"{report['matches_on']}",
                    f"{report['entailed_triples_per_publication']}",
                ],
            ]
        )
    )
    print(f"off / on: {report['off_vs_on']}")
    print(
        f"closure alone: {report['closure_per_s']} publications/s "
        f"(owlrl: {report['owlrl_closure_per_s']} publications/s)"
    )


if __name__ == "__main__":
    main()
