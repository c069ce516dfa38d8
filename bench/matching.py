"""Matching and routing-index throughput at 10^3, 10^4 and 10^5 subscriptions, in one run.

    python -m bench.matching [--subscriptions N] [--publications 200] [--seed 1] [--json]
    python -m bench.matching --workload listings [--sizes 10000 100000] [--json]

The second form measures the poset at scale on mostly distinct subscriptions (``bench.poset_scale``
says what and how); what follows is the first.

On the generated digital-library workload (equality, ranges, ``contains``, DNF; a share of broad
subscriptions that cover others; Zipf-distributed authors and topics, so many subscriptions repeat):

* publications/s for: brute force (``qel.matches`` over every subscription), the predicate index
  (``PredicateIndex.match``, the set of matching keys), the index's matching filters alone
  (``match_groups``: what the index finds, without building the union of the keys, whose size is
  the number of matches), and the poset's ``match_index`` (its own predicate index, one entry per
  distinct subscription, and the matching nodes);
* poset insertion rate and memory per subscription (tracemalloc, separate pass) at the largest size;
* ``covering_origins`` look-ups/s with 1,000 origins, beside checking every origin one by one.

``--subscriptions N`` runs only that size. ``--json`` prints one object whose top-level keys
(``index_pubs_per_s``, ``index_groups_pubs_per_s``, ``poset_index_pubs_per_s``, ``brute_pubs_per_s``,
...)
are for the requested (or largest) size, with every size under ``sizes``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import tracemalloc

import qel
from bench import poset_scale
from bench.rates import per_second
from indices.routing import AdvertisementIndex
from poset import PredicateIndex, SubscriptionPoset
from workloads.digital_library import DigitalLibrary

BUDGET = 2.0
"""Seconds one throughput measurement may take at most."""


def _subscriptions(library: DigitalLibrary, count: int) -> list[qel.Subscription]:
    parsed: dict[str, qel.Subscription] = {}
    result = []
    for _ in range(count):
        text = library.subscription()
        if text not in parsed:
            parsed[text] = qel.parse_subscription(text)
        result.append(parsed[text])
    return result


def measure_size(
    subscriptions: list[qel.Subscription], publications: list[qel.Publication], *, memory: bool
) -> dict[str, object]:
    index = PredicateIndex()
    for key, subscription in enumerate(subscriptions):
        index.add(key, subscription)
    index.match(publications[0])  # build the lazy structures before timing
    poset = SubscriptionPoset()
    start = time.perf_counter()
    for key, subscription in enumerate(subscriptions):
        poset.insert(subscription, f"peer{key % 1000}", str(key))
    insert_rate = len(subscriptions) / (time.perf_counter() - start)
    matches = qel.matches
    brute = per_second(publications, lambda p: [s for s in subscriptions if matches(s, p)], BUDGET)
    full = per_second(publications * 3, index.match, BUDGET)
    groups = per_second(publications * 3, index.match_groups, BUDGET)
    node_index = per_second(publications * 3, poset.match_index, BUDGET)
    answer = sum(len(index.match(p)) for p in publications) / len(publications)
    statistics = poset.statistics()
    result: dict[str, object] = {
        "subscriptions": len(subscriptions),
        "distinct_subscriptions": len({s.key for s in subscriptions}),
        "poset_nodes": statistics.nodes,
        "mean_matching_subscriptions": round(answer, 1),
        "brute_pubs_per_s": round(brute, 1),
        "index_pubs_per_s": round(full, 1),
        "index_groups_pubs_per_s": round(groups, 1),
        "poset_index_pubs_per_s": round(node_index, 1),
        "index_vs_brute": round(full / brute, 1),
        "poset_index_vs_brute": round(node_index / brute, 1),
        "poset_inserts_per_s": round(insert_rate),
    }
    if memory:
        del poset
        tracemalloc.start()
        traced = SubscriptionPoset()
        for key, subscription in enumerate(subscriptions):
            traced.insert(subscription, f"peer{key % 1000}", str(key))
        used, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result["poset_bytes_per_subscription"] = round(used / len(subscriptions))
    return result


def measure_origins(
    library: DigitalLibrary, subscriptions: list[qel.Subscription]
) -> dict[str, object]:
    index = AdvertisementIndex()
    rng = random.Random(7)
    for number in range(1000):
        documents = [library.document(n, group=number) for n in range(rng.randint(1, 20))]
        advertisement = qel.parse_advertisement(library.advertisement(documents))
        index.add(f"sp{number}", f"sp{number}", advertisement.elements)
    queries = subscriptions[:2000]
    lookups = per_second(queries, index.covering_origins, BUDGET)
    elements = {origin: index.elements(origin) for origin in index.origins()}
    brute = per_second(
        queries, lambda q: {o for o, es in elements.items() if qel.elements_cover(es, q)}, BUDGET
    )
    mean = sum(len(index.covering_origins(q)) for q in queries[:500]) / 500
    return {
        "origins": 1000,
        "covering_origins_per_s": round(lookups),
        "brute_covering_origins_per_s": round(brute, 1),
        "covering_origins_speedup": round(lookups / brute, 1),
        "mean_covering_origins": round(mean, 1),
    }


def run(sizes: list[int], publication_count: int, seed: int) -> dict[str, object]:
    library = DigitalLibrary(seed=seed)
    everything = _subscriptions(library, max(sizes))
    publications = [
        qel.parse_publications(library.turtle(library.document(n)), id=str(n))[0]
        for n in range(publication_count)
    ]
    results = [
        measure_size(everything[:size], publications, memory=size == max(sizes)) for size in sizes
    ]
    origins = measure_origins(library, everything)
    report: dict[str, object] = dict(results[-1])
    report.update(origins)
    report["sizes"] = results
    report["publications"] = publication_count
    report["seed"] = seed
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscriptions", type=int, help="one size instead of 10^3, 10^4, 10^5")
    parser.add_argument("--publications", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--workload", choices=["library", "listings"], default="library")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--whole-builds", type=int, default=100_000, help="one-at-a-time builds")
    parser.add_argument("--baseline", type=int, default=10_000, help="previous poset up to")
    parser.add_argument("--traced", type=int, default=100_000, help="tracemalloc up to")
    parser.add_argument(
        "--churn",
        type=int,
        default=poset_scale.EXTRA,
        help="listings: insertions, then removals, one at a time after the bulk build",
    )
    parser.add_argument("--check", type=int, default=3, help="listings: against brute force")
    args = parser.parse_args(argv)
    if args.workload == "listings":
        poset_scale.run(args)
        return
    sizes = [args.subscriptions] if args.subscriptions else [1_000, 10_000, 100_000]
    report = run(sizes, args.publications, args.seed)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"digital library, seed {args.seed}, {args.publications} publications (publications/s)")
    header = f"{'subs':>8} {'distinct':>8} {'matches':>8} {'brute':>9} {'index':>9} {'groups':>9} {'poset':>9} {'idx/brute':>9} {'pos/brute':>9}"
    print(header)
    for row in report["sizes"]:  # type: ignore[union-attr]
        print(
            f"{row['subscriptions']:>8} {row['distinct_subscriptions']:>8} "
            f"{row['mean_matching_subscriptions']:>8} {row['brute_pubs_per_s']:>9} "
            f"{row['index_pubs_per_s']:>9} {row['index_groups_pubs_per_s']:>9} "
            f"{row['poset_index_pubs_per_s']:>9} {row['index_vs_brute']:>8}x "
            f"{row['poset_index_vs_brute']:>8}x"
        )
    print(
        f"poset at {report['subscriptions']}: {report['poset_inserts_per_s']} inserts/s, "
        f"{report.get('poset_bytes_per_subscription')} bytes per subscription, "
        f"{report['poset_nodes']} nodes"
    )
    print(
        f"covering_origins with 1,000 origins: {report['covering_origins_per_s']}/s "
        f"(one by one: {report['brute_covering_origins_per_s']}/s, {report['covering_origins_speedup']}x), "
        f"{report['mean_covering_origins']} covering origins on average"
    )


if __name__ == "__main__":
    main()
