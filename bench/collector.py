"""Full passes of the cyclic garbage collector while a super-peer places subscriptions one at a
time, with and without ``superpeer.collector.FullPassFreezer`` (issue 34, "Never hold the
loop"): each run in a Python process of its own, fresh, as a super-peer started without a
stored state, after the start-up freeze (``freeze_state``) both. Each subscription is parsed as
it is placed, as a daemon decodes each as it comes. Texts drawn again (the library and shapes
workloads repeat some) are parsed again.

    python -m bench.collector [--workload listings|library|shapes] [--subscriptions 50000]

Per run: the CPU seconds of parsing and insertion, the full passes Python started by itself
during it (how many, the longest, their sum, in CPU seconds; not the collection each freeze
makes, over next to nothing), the freezes, and one full pass forced at the end
(``gc.collect()``, what a pass at that size costs now). The run with the freezer checks for a due freeze every
``CHECK_SECONDS`` between insertions, as the daemon's task does between inputs.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from typing import Any

import qel
from bench.poset_scale import WORKLOADS
from poset import SubscriptionPoset
from superpeer.collector import CHECK_SECONDS, FullPassFreezer, freeze_state


class _FullPasses:
    """The CPU seconds of the full passes (``time.thread_time``: other processes on a shared
    machine do not count), from a ``gc.callbacks`` hook."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.counting = True  # off during a freeze: its own collection is not one Python started
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2 and self.counting:
            if phase == "start":
                self._started = time.thread_time()
            else:
                self.seconds.append(time.thread_time() - self._started)


def run(workload: str, count: int, *, freezing: bool) -> dict[str, float]:
    """Insert ``count`` subscriptions one at a time; the figures above."""
    source = WORKLOADS[workload](seed=1)
    texts = [source.subscription() for _ in range(count)]  # strings: not tracked by the collector
    freeze_state()  # as at the daemon's start
    passes = _FullPasses()
    gc.callbacks.append(passes)
    freezer = FullPassFreezer()
    freezes = 0
    poset = SubscriptionPoset()
    start = time.process_time()
    if freezing:
        with freezer:
            checked = time.perf_counter()
            for n, text in enumerate(texts):
                poset.insert(qel.parse_subscription(text), f"peer{n % 1000}", str(n))
                if time.perf_counter() - checked >= CHECK_SECONDS:
                    checked = time.perf_counter()
                    passes.counting = False
                    freezes += freezer.freeze_if_due() is not None
                    passes.counting = True
    else:
        for n, text in enumerate(texts):
            poset.insert(qel.parse_subscription(text), f"peer{n % 1000}", str(n))
    inserting = time.process_time() - start
    during = list(passes.seconds)
    forced = time.thread_time()
    gc.collect()
    forced = time.thread_time() - forced
    return {
        "insert_cpu_s": inserting,
        "full_passes": len(during),
        "longest_pass_s": max(during, default=0.0),
        "passes_s": sum(during),
        "freezes": freezes,
        "frozen": gc.get_freeze_count(),
        "forced_pass_s": forced,
        "tracked": len(gc.get_objects()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="listings")
    parser.add_argument("--subscriptions", type=int, default=50_000)
    parser.add_argument("--one", choices=("plain", "freezing"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        figures = run(args.workload, args.subscriptions, freezing=args.one == "freezing")
        print(json.dumps(figures))
        return
    results = {}
    for mode in ("plain", "freezing"):
        command = [sys.executable, "-m", "bench.collector", "--one", mode]
        command += ["--workload", args.workload, "--subscriptions", str(args.subscriptions)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[mode] = json.loads(out.splitlines()[-1])
        figures = results[mode]
        print(
            f"{mode:>8}: {args.subscriptions} {args.workload} one at a time in "
            f"{figures['insert_cpu_s']:.1f} CPU s; {figures['full_passes']} full passes, "
            f"longest {figures['longest_pass_s']:.3f} s, in all {figures['passes_s']:.2f} s; "
            f"{figures['freezes']} freezes ({figures['frozen']} objects frozen, "
            f"{figures['tracked']} tracked); a full pass at the end "
            f"{figures['forced_pass_s']:.3f} s",
            flush=True,
        )
    plain, freezing = results["plain"], results["freezing"]
    print(
        f"longest full pass: {plain['longest_pass_s'] / max(freezing['longest_pass_s'], 1e-6):.1f}x"
        f" shorter; full pass at the end: "
        f"{plain['forced_pass_s'] / max(freezing['forced_pass_s'], 1e-6):.1f}x shorter"
    )


if __name__ == "__main__":
    main()
