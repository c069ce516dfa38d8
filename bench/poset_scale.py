"""The subscription poset at 10^4 to 10^6 subscriptions (issues 16 and 34), in one process per
run, with the previous poset (``bench.poset_baseline``) and brute force measured beside it.

    python -m bench.poset_scale [--workload shapes|library|listings] [--sizes 10000] [--seed 1]
    python -m bench.matching --workload listings [--sizes 10000 100000] [--seed 1] [--json]

The first form's defaults (``shapes``, 10^4, the previous poset at 2,000) end in a few minutes;
the second keeps the listings run of issue 16 (10^4 and 10^5). Workloads: ``shapes``
(``workloads.shapes``: every shape of the language, so that no single shortcut carries it),
``library`` (``workloads.digital_library``, the seeds' domain, Zipf repeats) and ``listings``
(``workloads.listings``: alerts on property listings, price ceilings, price ranges, surfaces and
rooms, descriptions, DNF, listing dates; 95% distinct at 2 x 10^4). Per size N:

* bulk build: ``insert_many`` of all N, seconds (wall and CPU) and insertions/s;
* one-at-a-time build: ``insert`` of each of the N in turn (sizes up to ``--whole-builds``, with
  its insertions/s), and
  the same with the previous poset (sizes up to ``--baseline``, which it finishes); the three
  must give the same Hasse diagram (checked);
* at size N, with the roots marked as sent to two neighbours, as a super-peer's would be:
  insertions/s of ``--churn`` (2,000) further subscriptions one at a time, then removals/s of
  as many random ones (SIENA unsubscription included); the previous poset the same, 200 of each;
* ``match_index`` publications/s and matches per publication, brute force (``qel.matches`` over
  the distinct subscriptions) publications/s, and the number of publications whose answer differs
  from brute force (``--check`` of them, 3 by default);
* memory per subscription: tracemalloc over a separate bulk build (sizes up to ``--traced``),
  else the growth of the process's maximum resident set during the bulk build (an upper bound:
  it includes the allocator's slack).

CPU seconds are reported beside wall seconds because the machine is shared: the load average at
the start and the end of each size is printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import time
import tracemalloc
from collections.abc import Callable
from typing import Protocol

import qel
from bench import poset_baseline
from bench.rates import per_second
from poset import SubscriptionPoset
from workloads.digital_library import DigitalLibrary
from workloads.listings import Listings
from workloads.shapes import Shapes

EXTRA = 2_000
BASELINE_EXTRA = 200
DESTINATIONS = ("north", "south")


Item = tuple[qel.Subscription, str, str]
Poset = SubscriptionPoset | poset_baseline.SubscriptionPoset


class _Clock:
    """Wall and CPU seconds of one block."""

    def __enter__(self) -> _Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


class Workload(Protocol):
    def subscription(self) -> str: ...


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "shapes": Shapes,
    "library": DigitalLibrary,
    "listings": Listings,
}


def _publication(workload: Workload, number: int) -> str:
    """The Turtle of one publication of ``workload``, drawn as its generator draws them."""
    if isinstance(workload, Shapes):
        return workload.turtle(workload.vehicle(number))
    if isinstance(workload, DigitalLibrary):
        return workload.turtle(workload.document(number))
    assert isinstance(workload, Listings)
    return workload.turtle(workload.listing(number))


def _load() -> float:
    return os.getloadavg()[0]


def _items(workload: Workload, count: int, first: int) -> list[Item]:
    """``count`` subscriptions from ``workload``, each from its own source and id; a text drawn
    again (the library and shapes repeat some) is parsed once."""
    parsed: dict[str, qel.Subscription] = {}
    items = []
    for n in range(first, first + count):
        text = workload.subscription()
        subscription = parsed.get(text)
        if subscription is None:
            subscription = parsed[text] = qel.parse_subscription(text)
        items.append((subscription, f"peer{n % 1000}", str(n)))
    return items


def _brute_fan_out(live: list[Item], publication: qel.Publication) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for subscription, source, subscription_id in live:
        if qel.matches(subscription, publication):
            found.setdefault(source, set()).add(subscription_id)
    return found


def _edges(poset: Poset) -> set[tuple[int, int]]:
    return {(node.id, child) for node in poset for child in node.children}


def _churn(poset: Poset, extra: list[Item], present: list[Item], seed: int) -> dict[str, float]:
    """Marks the roots as sent, then times inserting ``extra`` and removing as many of
    ``present`` (in a seeded random order) one at a time."""
    for node in poset.roots():
        for destination in DESTINATIONS:
            poset.mark_sent(node, destination, {"origin"})
    with _Clock() as inserting:
        for item in extra:
            poset.insert(*item)
    gone = random.Random(seed).sample(present, len(extra))
    with _Clock() as removing:
        for _, source, subscription_id in gone:
            poset.remove(source, subscription_id)
    return {
        "inserts_per_s": round(len(extra) / inserting.wall),
        "inserts_per_cpu_s": round(len(extra) / inserting.cpu),
        "removals_per_s": round(len(extra) / removing.wall),
        "removals_per_cpu_s": round(len(extra) / removing.cpu),
    }


def measure(
    size: int,
    *,
    seed: int,
    whole_builds: int,
    baseline: int,
    traced: int,
    further: int = EXTRA,
    workload: str = "listings",
    checked: int = 3,
) -> dict:
    generator = WORKLOADS[workload](seed=seed)
    items = _items(generator, size, 0)
    extra = _items(generator, further, size)
    publications = [
        qel.parse_publications(_publication(generator, n), id=str(n))[0]
        for n in range(max(100, checked))
    ]
    result: dict[str, object] = {
        "workload": workload,
        "subscriptions": size,
        "distinct": len({s.key for s, _, _ in items}),
        "load_start": _load(),
    }
    previous = None
    if size <= baseline:
        previous = poset_baseline.SubscriptionPoset()
        with _Clock() as clock:
            for item in items:
                previous.insert(*item)
        result["baseline_build_s"] = round(clock.wall, 1)
        result["baseline_build_cpu_s"] = round(clock.cpu, 1)
    single = None
    if size <= whole_builds:
        single = SubscriptionPoset()
        with _Clock() as clock:
            for item in items:
                single.insert(*item)
        result["one_at_a_time_build_s"] = round(clock.wall, 1)
        result["one_at_a_time_build_cpu_s"] = round(clock.cpu, 1)
        result["one_at_a_time_inserts_per_s"] = round(size / clock.wall)
    poset = SubscriptionPoset()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with _Clock() as clock:
        poset.insert_many(items)
    result["bulk_build_s"] = round(clock.wall, 1)
    result["bulk_build_cpu_s"] = round(clock.cpu, 1)
    result["bulk_inserts_per_s"] = round(size / clock.wall)
    result["rss_growth_bytes_per_subscription"] = round(
        (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024 / size
    )
    statistics = poset.statistics()
    result.update(nodes=statistics.nodes, roots=statistics.roots, edges=statistics.edges)
    if single is not None:
        result["bulk_same_as_one_at_a_time"] = _edges(single) == _edges(poset)
        del single
    if previous is not None:
        result["same_as_baseline"] = _edges(previous) == _edges(poset)
        churn = _churn(previous, extra[:BASELINE_EXTRA], items, seed)
        result.update({f"baseline_{key}": value for key, value in churn.items()})
        previous.match_index(publications[0])  # rebuilds the index's changed levels
        result["baseline_index_pubs_per_s"] = round(
            per_second(publications * 3, previous.match_index, 5.0), 1
        )
        del previous
    result.update(_churn(poset, extra, items, seed))
    poset.match_index(publications[0])
    result["index_pubs_per_s"] = round(per_second(publications * 3, poset.match_index, 5.0), 1)
    answers = [len(poset.match_index(p)) for p in publications]
    result["matches_per_publication"] = round(sum(answers) / len(answers))
    live = [item for item in items + extra if poset.node_of(item[1], item[2]) is not None]
    distinct = list({s.key: s for s, _, _ in live}.values())
    sample = publications[:checked]
    with _Clock() as clock:
        for publication in sample:
            [s for s in distinct if qel.matches(s, publication)]
    result["brute_pubs_per_s"] = round(len(sample) / clock.wall, 2)
    result["differences_from_brute_force"] = sum(
        poset.match(publication) != _brute_fan_out(live, publication) for publication in sample
    )
    if size <= traced:
        del poset
        tracemalloc.start()
        traced = SubscriptionPoset()
        traced.insert_many(items)
        used, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del traced
        result["bytes_per_subscription"] = round(used / size)
    result["load_end"] = _load()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="shapes")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--whole-builds", type=int, default=100_000, help="one-at-a-time builds")
    parser.add_argument("--baseline", type=int, default=2_000, help="previous poset up to")
    parser.add_argument("--traced", type=int, default=100_000, help="tracemalloc up to")
    parser.add_argument("--churn", type=int, default=EXTRA, help="insertions, then removals")
    parser.add_argument("--check", type=int, default=3, help="publications against brute force")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    run(args)


def run(args: argparse.Namespace) -> None:
    """Measures each size of ``args.sizes`` in turn, printing each row as it is done."""
    rows = []
    for size in args.sizes:
        row = measure(
            size,
            seed=args.seed,
            whole_builds=args.whole_builds,
            baseline=args.baseline,
            traced=args.traced,
            further=args.churn,
            workload=args.workload,
            checked=args.check,
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        print(json.dumps({"workload": args.workload, "seed": args.seed, "sizes": rows}, indent=2))


if __name__ == "__main__":
    main()
