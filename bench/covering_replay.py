"""The covering tests of one-at-a-time placements, replayed with and without a step of
``qel.covering.filter_covered`` (issue 34): what that step saves, measured on the very calls a
poset makes, in one process, alternated, with the answers checked equal.

    python -m bench.covering_replay [--workload shapes] [--size 10000] [--operations 1000]

A poset is built in bulk from ``--size`` subscriptions, its roots marked sent to two
neighbours (as ``bench.poset_scale``'s figures "at N"), then ``--operations`` more are placed
one at a time while every ``filter_covered`` call is recorded. The calls are replayed
``--rounds`` times each way, the baseline with ``_along_one_predicate`` answering "undecided"
every time (the code before it): a placement's targets (``qel.covering.Target``) are made
afresh per replay and shared by its calls as in the placement, so the corners they keep are
built once per replay, as then. Printed: milliseconds of CPU per placement each way and round,
the ratio of the medians, and the calls per placement that reach the step and that it decides.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import qel.covering
from bench.poset_profile import bulk_built, placement_arguments
from poset import poset as poset_module
from qel.covering import Target, filter_covered
from qel.filters import Filter

Call = tuple[Filter | Target, Sequence[Filter]]


def record(workload: str, size: int, operations: int, seed: int) -> list[Call]:
    """The ``filter_covered`` calls of ``operations`` placements at ``size``."""
    poset, _, extra = bulk_built(workload, size, operations, seed)
    calls: list[Call] = []

    def recording(target: Filter | Target, candidates: Sequence[Filter], **options: Any) -> bool:
        calls.append((target, candidates))
        return filter_covered(target, candidates, **options)

    poset_module.filter_covered = recording  # type: ignore[assignment]
    try:
        for item in extra:
            poset.insert(*item)
    finally:
        poset_module.filter_covered = filter_covered
    return calls


def replay(calls: list[Call]) -> tuple[float, list[bool]]:
    """CPU seconds of the calls, with fresh targets shared as in the placements; the answers."""
    fresh: dict[int, Target] = {}
    prepared: list[Call] = []
    for target, candidates in calls:
        shared: Filter | Target = target
        if isinstance(target, Target):
            shared = fresh.get(id(target)) or fresh.setdefault(id(target), Target(target.filter))
        prepared.append((shared, candidates))
    start = time.process_time()
    answers = [filter_covered(target, candidates) for target, candidates in prepared]
    return time.process_time() - start, answers


def _undecided(*_: object) -> None:
    return None


def measure(calls: list[Call], operations: int, rounds: int) -> dict[str, Any]:
    along: Callable[..., bool | None] = qel.covering._along_one_predicate
    reached: list[bool | None] = []

    def counted(*arguments: Any) -> bool | None:
        reached.append(along(*arguments))
        return reached[-1]

    qel.covering._along_one_predicate = counted  # type: ignore[assignment]
    try:
        replay(calls)
    finally:
        qel.covering._along_one_predicate = along
    seconds: dict[str, list[float]] = {"baseline": [], "now": []}
    answers: dict[str, list[bool]] = {}
    gc.disable()  # the replays' own garbage is not what is measured
    try:
        for _ in range(rounds):
            for way in ("baseline", "now"):
                qel.covering._along_one_predicate = _undecided if way == "baseline" else along  # type: ignore[assignment]
                try:
                    spent, answers[way] = replay(calls)
                finally:
                    qel.covering._along_one_predicate = along
                seconds[way].append(spent)
    finally:
        gc.enable()
    assert answers["baseline"] == answers["now"], "the step changed an answer"
    per = {way: [round(1000 * s / operations, 3) for s in spent] for way, spent in seconds.items()}
    return {
        "calls_per_placement": round(len(calls) / operations, 2),
        "reaching_the_step_per_placement": round(len(reached) / operations, 2),
        "decided_there_per_placement": round(
            sum(answer is not None for answer in reached) / operations, 2
        ),
        "baseline_ms_per_placement": per["baseline"],
        "now_ms_per_placement": per["now"],
        "ratio_of_medians": round(
            statistics.median(seconds["baseline"]) / statistics.median(seconds["now"]), 3
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = placement_arguments(__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    calls = record(args.workload, args.size, args.operations, args.seed)
    result = {"workload": args.workload, "size": args.size, "operations": args.operations}
    result.update(measure(calls, args.operations, args.rounds))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
