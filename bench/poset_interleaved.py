"""This checkout's poset beside another checkout's, in one process, placements interleaved (issue 34).

    python -m bench.poset_interleaved --baseline /path/to/other/checkout
                                      [--workload shapes] [--size 10000] [--placed 1000]
                                      [--rounds 6] [--seed 1] [--unsent]

Single runs of ``bench.poset_scale`` move with the machine by 10% and more, more than most cuts of
a placement: this puts both trees in one process. The other checkout's ``poset`` package is
copied under another name (``poset_baseline_copy``, its imports rewritten), both posets are
bulk-built on the same ``--size`` subscriptions of ``--workload`` and marked sent as a super-peer
with one neighbour would have sent them (``bench.poset_scale.mark_uncovered``; ``--unsent``: not,
as before the poset kept no Hasse diagram), then each round places the same ``--placed``
subscriptions one at a time into each tree and removes them, with that routing bookkeeping
(``bench.poset_scale.place``, ``unplace``), the tree that goes first alternating, the collector
off. Printed: insertions and removals per CPU second of each, and the
median over the rounds of this checkout's speed over the baseline's, with the rounds it was ahead
in. Run against this same checkout, it shows the noise (stop 70: 0.99 and 1.04).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import poset
from bench.poset_scale import WORKLOADS, _items, mark_uncovered, place, unplace

COPY = "poset_baseline_copy"


def load_baseline(checkout: Path, into: Path):  # type: ignore[no-untyped-def]
    """The ``poset`` package of ``checkout``, imported as ``COPY`` from a copy in ``into``."""
    target = into / COPY
    shutil.copytree(checkout / "poset", target)
    for module in target.glob("*.py"):
        text = module.read_text()
        text = re.sub(r"\bfrom poset\b", f"from {COPY}", text)
        text = re.sub(r"^import poset$", f"import {COPY} as poset", text, flags=re.M)
        module.write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module(COPY)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="shapes")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--placed", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--unsent", action="store_true", help="no routing bookkeeping")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        baseline = load_baseline(args.baseline.resolve(), Path(directory))
        items = _items(WORKLOADS[args.workload](seed=args.seed), args.size + args.placed, 0)
        built, placed = items[: args.size], items[args.size :]
        trees = {"this": poset.SubscriptionPoset(), "baseline": baseline.SubscriptionPoset()}
        for tree in trees.values():
            tree.insert_many(built)
            if not args.unsent:
                mark_uncovered(tree)
        add = (lambda tree, item: tree.insert(*item)) if args.unsent else place
        take = (lambda tree, *key: tree.remove(*key)) if args.unsent else unplace
        gc.collect()
        gc.freeze()
        gc.disable()
        inserting: dict[str, list[float]] = {name: [] for name in trees}
        removing: dict[str, list[float]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            for name in list(trees) if round_ % 2 == 0 else list(reversed(trees)):
                tree = trees[name]
                start = time.process_time()
                for item in placed:
                    add(tree, item)
                inserting[name].append(time.process_time() - start)
                start = time.process_time()
                for _, source, number in placed:
                    take(tree, source, number)
                removing[name].append(time.process_time() - start)
        gc.enable()
    count = len(placed)
    for label, spent in (("insertions", inserting), ("removals", removing)):
        ratios = [b / t for t, b in zip(spent["this"], spent["baseline"], strict=True)]
        print(
            f"{args.workload} at {args.size:,}, {label} per CPU s: this "
            f"{count / statistics.median(spent['this']):,.0f}, baseline "
            f"{count / statistics.median(spent['baseline']):,.0f}; this / baseline "
            f"{statistics.median(ratios):.3f} (ahead in {sum(r > 1 for r in ratios)} of "
            f"{args.rounds} rounds)"
        )


if __name__ == "__main__":
    main()
