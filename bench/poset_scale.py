"""The subscription poset at 10^4 to 10^6 subscriptions (issues 16 and 34), in one process per
run, with the previous poset (``bench.poset_baseline``, a Hasse diagram) and brute force measured
beside it.

    python -m bench.poset_scale [--workload shapes|library|listings] [--sizes 10000,100000]
                                [--seed 1] [--check 3] [--churn 2000] [--json]
    python -m bench.matching --workload listings [--sizes 10000 100000] [--seed 1] [--json]

The first form's defaults (``shapes``, 10^4, the previous poset at 2,000) end in a minute or two;
the second keeps the listings run of issue 16 (10^4 and 10^5). ``--sizes`` takes sizes separated
by commas or spaces. Workloads: ``shapes`` (``workloads.shapes``: every shape of the language, so
that no single shortcut carries it), ``library`` (``workloads.digital_library``, the seeds'
domain, Zipf repeats) and ``listings`` (``workloads.listings``: alerts on property listings,
price ceilings, price ranges, surfaces and rooms, descriptions, DNF, listing dates; 95% distinct
at 2 x 10^4). Per size N:

* bulk build: ``insert_many`` of all N, seconds (wall and CPU) and insertions/s;
* one-at-a-time build: ``insert`` of each of the N in turn (sizes up to ``--whole-builds``, with
  its insertions/s; the same nodes as the bulk build, checked), and the same with the previous
  poset (sizes up to ``--baseline``, which it finishes);
* routing bookkeeping, as a super-peer with one neighbour keeps it: the whole poset routed to
  ``d`` for the label ``o`` as ``SuperPeerCore._route_many`` routes it (``general_first``, planned
  and thinned: ``poset.plans``): the seconds of that pass and the nodes it marks;
* at size N, the state built frozen out of the collector's passes as a super-peer's is
  (``frozen_state``): insertions/s of ``--churn`` (2,000) further subscriptions one at a time, each marked
  sent where nothing covering it was (``missing``), then removals/s of as many
  random ones of the N with the default ``wants`` (SIENA unsubscription included), the nodes each
  removal asks to resend marked sent in turn; with the removals that took a sent node away and
  the resend sizes (nodes per such removal, mean and largest), and, before the churn, the
  stand-in records per sent node, mean and largest (what such a removal looks through). The
  previous poset the same, 200 of each (its roots are the nodes it marks);
* ``match_index`` publications/s and matches per publication, brute force (``qel.matches`` over
  the distinct subscriptions) publications/s;
* ``--check`` (3 by default): the answers against brute force: ``match`` on that many
  publications (fan-outs), ``covered_by`` (``qel.covers`` against every node) and ``sent_labels``
  (against every sent node) on that many sent nodes and as many other nodes, after the churn; the
  differences found, 0 when all is well;
* memory per subscription: tracemalloc over a separate bulk build (sizes up to ``--traced``),
  else the growth of the process's maximum resident set during the bulk build (an upper bound:
  it includes the allocator's slack); and the poset's own estimate (``statistics``).

CPU seconds are reported beside wall seconds because the machine is shared: the load average at
the start and the end of each size is printed with it.
"""

from __future__ import annotations

import argparse
import gc
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
DESTINATION = "d"
"""The one neighbour the routing bookkeeping sends to."""
LABEL = "o"
"""The one label it sends for."""


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


def mark_uncovered(poset: Poset) -> int:
    """Marks sent to ``DESTINATION`` for ``LABEL`` what a super-peer with that one neighbour
    would have sent, routing every node at once (a poset without a Hasse diagram: planned, as
    ``SuperPeerCore._route_many`` does; one with it, the previous one or another checkout's:
    its roots). Returns the number of nodes marked."""
    if not hasattr(poset, "plan"):
        marked = 0
        for node in poset.roots():  # type: ignore[union-attr]
            poset.mark_sent(node, DESTINATION, {LABEL})
            marked += 1
        return marked
    plan = poset.plan()  # as ``SuperPeerCore._route_many`` routes a whole poset
    for node in poset.general_first():
        if plan.missing(node, {LABEL}):
            plan.choose(node, {LABEL})
    chosen = plan.thinned()
    for node, labels in chosen:
        poset.mark_sent(node, DESTINATION, labels)
    return len(chosen)


def place(poset: Poset, item: Item) -> None:
    """Inserts ``item`` and marks it sent where nothing covering it was, as a super-peer would
    forward it."""
    inserted = poset.insert(*item)
    if not hasattr(poset, "missing"):  # the previous poset reports it as it inserts
        if LABEL not in inserted.already_sent.get(DESTINATION, ()):  # type: ignore[union-attr]
            poset.mark_sent(inserted.node, DESTINATION, {LABEL})  # type: ignore[arg-type]
    elif poset.missing(inserted.node, {DESTINATION: {LABEL}}):  # type: ignore[union-attr]
        poset.mark_sent(inserted.node, DESTINATION, {LABEL})  # type: ignore[arg-type]


def unplace(poset: Poset, source: str, subscription_id: str) -> int:
    """Removes one (source, id) with the default ``wants`` and marks sent what the removal asks
    to resend, as a super-peer would forward it; returns how many nodes that is (-1 when the
    removed node had not been sent: nothing to resend, no covering test)."""
    removed = poset.remove(source, subscription_id)
    if not removed.deleted or not removed.node.sent:
        return -1
    resend = removed.resend.get(DESTINATION, ())
    for node, labels in resend:
        poset.mark_sent(node, DESTINATION, labels)  # type: ignore[arg-type]
    return len(resend)


def _churn(poset: Poset, extra: list[Item], present: list[Item], seed: int) -> dict[str, float]:
    """Times inserting ``extra`` and removing as many of ``present`` (in a seeded random order)
    one at a time, with the routing bookkeeping (``place``, ``unplace``)."""
    with _Clock() as inserting:
        for item in extra:
            place(poset, item)
    gone = random.Random(seed).sample(present, len(extra))
    with _Clock() as removing:
        resends = [unplace(poset, source, subscription_id) for _, source, subscription_id in gone]
    sent = [count for count in resends if count >= 0]
    return {
        "inserts_per_s": round(len(extra) / inserting.wall),
        "inserts_per_cpu_s": round(len(extra) / inserting.cpu),
        "removals_per_s": round(len(extra) / removing.wall),
        "removals_per_cpu_s": round(len(extra) / removing.cpu),
        "sent_removals": len(sent),
        "resent": sum(sent),
        "resent_per_sent_removal": round(sum(sent) / len(sent), 2) if sent else 0,
        "largest_resend": max(sent, default=0),
    }


def frozen_state() -> None:
    """What a super-peer's collector does once its state is built (``superpeer.collector``):
    a full pass, then ``gc.freeze()``, so that later full passes walk only what was made since.
    Left to Python, a full pass over the 10^5 subscriptions' objects fell in whichever phase
    made the allocation that triggered it: in one run of 2,000 removals at 3 x 10^4 on shapes
    it was 0.85 of the 1.12 CPU s (0.27 without it), on another code the same in placements."""
    gc.collect()
    gc.freeze()


def _same_nodes(first: SubscriptionPoset, second: SubscriptionPoset) -> bool:
    def nodes(poset: SubscriptionPoset) -> list[tuple[int, object, tuple[str, ...]]]:
        return [(n.id, n.subscription.filters, n.origins) for n in poset]

    return nodes(first) == nodes(second)


def check(
    poset: SubscriptionPoset, live: list[Item], publications: list[qel.Publication], count: int
) -> dict[str, int]:
    """Differences from brute force: ``match`` on ``publications``; ``covered_by`` and
    ``sent_labels`` on ``count`` sent nodes and ``count`` others (seeded choice)."""
    differences = {
        "match": sum(poset.match(p) != _brute_fan_out(live, p) for p in publications),
        "covered_by": 0,
        "sent_labels": 0,
    }
    nodes = list(poset)
    sent = [node for node in nodes if node.sent]
    rng = random.Random(count)
    chosen = rng.sample(sent, min(count, len(sent)))
    chosen += rng.sample(nodes, min(count, len(nodes)))
    for node in chosen:
        general = node.subscription
        below = [o.id for o in nodes if o is not node and qel.covers(general, o.subscription)]
        differences["covered_by"] += below != sorted(o.id for o in poset.covered_by(node))
        labels: set[str] = set()
        for holder in sent:
            if holder is node or qel.covers(holder.subscription, general):
                labels |= holder.sent.get(DESTINATION, set())
        differences["sent_labels"] += labels != poset.sent_labels(node, DESTINATION)
    return differences


def _stand_ins(poset: SubscriptionPoset) -> dict[str, float]:
    """The stand-in records per sent node, mean and largest: what the removal of a sent node
    looks through for what to resend (``poset.poset``, "Stand-ins")."""
    figures = poset.statistics()
    return {
        "stood_in_per_sent_node": round(figures.stood_in / max(figures.sent_nodes, 1), 1),
        "stood_in_largest": figures.stood_in_largest,
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
        result["one_at_a_time_inserts_per_cpu_s"] = round(size / clock.cpu)
    poset = SubscriptionPoset()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with _Clock() as clock:
        poset.insert_many(items)
    result["bulk_build_s"] = round(clock.wall, 1)
    result["bulk_build_cpu_s"] = round(clock.cpu, 1)
    result["bulk_inserts_per_s"] = round(size / clock.wall)
    result["bulk_inserts_per_cpu_s"] = round(size / clock.cpu)
    result["rss_growth_bytes_per_subscription"] = round(
        (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024 / size
    )
    result["nodes"] = poset.statistics().nodes
    if single is not None:
        result["bulk_same_as_one_at_a_time"] = _same_nodes(single, poset)
        del single
    with _Clock() as clock:
        result["sent_nodes"] = mark_uncovered(poset)
    result["marking_s"] = round(clock.wall, 2)
    result["marking_cpu_s"] = round(clock.cpu, 2)
    result.update(_stand_ins(poset))
    frozen_state()
    if previous is not None:
        result["baseline_nodes"] = len(previous)
        result["baseline_sent_nodes"] = mark_uncovered(previous)
        result["same_fan_out_as_baseline"] = all(
            previous.match(p) == poset.match(p) for p in publications
        )
        churn = _churn(previous, extra[:BASELINE_EXTRA], items, seed)
        result.update({f"baseline_{key}": value for key, value in churn.items()})
        previous.match_index(publications[0])  # rebuilds the index's changed levels
        result["baseline_index_pubs_per_s"] = round(
            per_second(publications * 3, previous.match_index, 5.0), 1
        )
        del previous
    result.update(_churn(poset, extra, items, seed))
    statistics = poset.statistics()
    result["sent_nodes_after_churn"] = statistics.sent_nodes
    result["statistics_bytes_per_node"] = round(statistics.memory_bytes / statistics.nodes)
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
    with _Clock() as clock:
        differences = check(poset, live, sample, checked)
    result["checked"] = f"{len(sample)} publications, {checked} sent nodes and {checked} others"
    result.update({f"{what}_differences": count for what, count in differences.items()})
    result["differences_from_brute_force"] = sum(differences.values())
    result["check_s"] = round(clock.wall, 1)
    if size <= traced:
        del poset
        tracemalloc.start()
        traced_poset = SubscriptionPoset()
        traced_poset.insert_many(items)
        used, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del traced_poset
        result["bytes_per_subscription"] = round(used / size)
    result["load_end"] = _load()
    return result


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="shapes")
    parser.add_argument(
        "--sizes", type=_sizes, nargs="+", default=[[10_000]], help="e.g. 10000,100000"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--whole-builds", type=int, default=100_000, help="one-at-a-time builds")
    parser.add_argument("--baseline", type=int, default=2_000, help="previous poset up to")
    parser.add_argument("--traced", type=int, default=100_000, help="tracemalloc up to")
    parser.add_argument("--churn", type=int, default=EXTRA, help="insertions, then removals")
    parser.add_argument("--check", type=int, default=3, help="answers against brute force")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    run(args)


def run(args: argparse.Namespace) -> None:
    """Measures each size of ``args.sizes`` in turn, printing each row as it is done."""
    rows = []
    sizes = [size for group in args.sizes for size in _flat(group)]
    for size in sizes:
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


def _flat(group: int | list[int]) -> list[int]:
    """``--sizes`` as parsed here (lists) or by ``bench.matching`` (integers)."""
    return group if isinstance(group, list) else [group]


if __name__ == "__main__":
    main()
