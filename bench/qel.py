"""Single-core throughput of the language's hot operations, beside rdflib doing the same work.

    python -m bench.qel [--subscriptions 2000] [--publications 200] [--seed 1] [--json]

* ``matches``: pairs/s over every (subscription, publication) pair of a generated digital-library
  workload, subscriptions parsed once (the fast path). Baseline: rdflib evaluating the same
  subscription, prepared once as a SPARQL ASK, over each publication's graph (built once), on a
  sample of the pairs.
* ``covers``: pairs/s over random pairs of subscriptions. Baseline: the canonical-instance test done
  with rdflib, per pair: build the specific subscription's witness publication as a graph and ASK
  the general one over it. (That test is what an RDF store offers; it is only a heuristic for
  constraints, so it is a speed baseline, not a correctness one.)
* ``parse``: subscriptions/s for the QEL text form and for the SPARQL form of the same subscriptions.

Both sides run in this process, one after the other, on the same inputs.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable

import rdflib
from rdflib.plugins.sparql import prepareQuery

import qel
from qel import domains
from qel.rdf import to_rdflib
from workloads.digital_library import DigitalLibrary


def _rate(count: int, work: Callable[[], object]) -> tuple[float, float]:
    start = time.perf_counter()
    work()
    elapsed = time.perf_counter() - start
    return count / elapsed, elapsed


def _graph(publication: qel.Publication) -> rdflib.Graph:
    graph = rdflib.Graph()
    for s, p, o in publication.triples:
        graph.add((to_rdflib(s), to_rdflib(p), to_rdflib(o)))
    return graph


def _ask(subscription: qel.Subscription):  # type: ignore[no-untyped-def]
    text = subscription.to_sparql()
    if subscription.answer:
        head, _, body = text.partition("SELECT ")
        text = head + "ASK " + body.partition(" WHERE ")[2]
    return prepareQuery(text)


def _witness_graph(compiled: qel.Filter) -> rdflib.Graph:
    subject = (
        compiled.subject.term
        if isinstance(compiled.subject, domains.PointDomain)
        else qel.URI("urn:witness")
    )
    statements = {
        (predicate, domains.witness(domain) or qel.URI("urn:any"))
        for predicate, domain in compiled.patterns
    }
    return _graph(qel.Publication(subject, frozenset(statements)))


def run(subscription_count: int, publication_count: int, seed: int) -> dict[str, object]:
    library = DigitalLibrary(seed=seed)
    texts = [library.subscription() for _ in range(subscription_count)]
    documents = [library.document(n) for n in range(publication_count)]
    turtles = [library.turtle(d) for d in documents]

    qel_rate, _ = _rate(len(texts), lambda: [qel.parse_subscription(t) for t in texts])
    subscriptions = [qel.parse_subscription(t) for t in texts]
    sparql_texts = [s.to_sparql() for s in subscriptions]
    sparql_rate, _ = _rate(len(texts), lambda: [qel.parse_subscription(t) for t in sparql_texts])
    publications = [qel.parse_publications(t, id=str(n))[0] for n, t in enumerate(turtles)]

    pairs = len(subscriptions) * len(publications)
    matched = 0

    def match_all() -> None:
        nonlocal matched
        matches = qel.matches
        matched = sum(matches(s, p) for s in subscriptions for p in publications)

    match_rate, _ = _rate(pairs, match_all)

    rng = random.Random(seed)
    sample_subs = rng.sample(subscriptions, min(200, len(subscriptions)))
    sample_pubs = rng.sample(publications, min(20, len(publications)))
    prepared = [_ask(s) for s in sample_subs]
    graphs = [_graph(p) for p in sample_pubs]
    baseline_pairs = len(prepared) * len(graphs)
    rdflib_match_rate, _ = _rate(
        baseline_pairs,
        lambda: [bool(g.query(q).askAnswer) for q in prepared for g in graphs],
    )
    agree = all(
        bool(g.query(q).askAnswer) == qel.matches(s, p)
        for s, q in zip(sample_subs, prepared, strict=True)
        for p, g in zip(sample_pubs, graphs, strict=True)
    )

    cover_pairs = [(rng.choice(subscriptions), rng.choice(subscriptions)) for _ in range(50_000)]
    covered = 0

    def cover_all() -> None:
        nonlocal covered
        covered = sum(qel.covers(g, s) for g, s in cover_pairs)

    cover_rate, _ = _rate(len(cover_pairs), cover_all)
    baseline_cover_pairs = cover_pairs[:1000]
    prepared_general = {id(g): _ask(g) for g, _ in baseline_cover_pairs}

    def rdflib_cover_all() -> None:
        for general, specific in baseline_cover_pairs:
            query = prepared_general[id(general)]
            all(bool(_witness_graph(f).query(query).askAnswer) for f in specific.filters)

    rdflib_cover_rate, _ = _rate(len(baseline_cover_pairs), rdflib_cover_all)
    return {
        "workload": {
            "subscriptions": len(subscriptions),
            "publications": len(publications),
            "seed": seed,
            "matching_pairs": matched,
            "covering_pairs": covered,
        },
        "matches_pairs_per_s": round(match_rate),
        "rdflib_ask_pairs_per_s": round(rdflib_match_rate),
        "matches_speedup": round(match_rate / rdflib_match_rate, 1),
        "matches_agree_with_rdflib_on_sample": agree,
        "covers_pairs_per_s": round(cover_rate),
        "rdflib_canonical_instance_pairs_per_s": round(rdflib_cover_rate),
        "covers_speedup": round(cover_rate / rdflib_cover_rate, 1),
        "parse_qel_per_s": round(qel_rate),
        "parse_sparql_per_s": round(sparql_rate),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscriptions", type=int, default=2000)
    parser.add_argument("--publications", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.subscriptions, args.publications, args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    w = result["workload"]
    print(
        f"workload: {w['subscriptions']} subscriptions x {w['publications']} publications (seed {w['seed']})"
    )
    print(f"{'operation':<10} {'qel /s':>12} {'rdflib /s':>12} {'ratio':>8}")
    print(
        f"{'matches':<10} {result['matches_pairs_per_s']:>12,} "
        f"{result['rdflib_ask_pairs_per_s']:>12,} {result['matches_speedup']:>7}x"
    )
    print(
        f"{'covers':<10} {result['covers_pairs_per_s']:>12,} "
        f"{result['rdflib_canonical_instance_pairs_per_s']:>12,} {result['covers_speedup']:>7}x"
    )
    print(
        f"parse: QEL text {result['parse_qel_per_s']:,}/s, SPARQL {result['parse_sparql_per_s']:,}/s"
    )
    print(
        f"matches agree with rdflib on the sample: {result['matches_agree_with_rdflib_on_sample']}"
    )


if __name__ == "__main__":
    main()
