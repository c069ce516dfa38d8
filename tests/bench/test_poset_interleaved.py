"""bench.poset_interleaved loads another checkout's poset beside this one's and times both on the
same placements (a smoke test against this checkout itself: both trees answer alike)."""

import re
from pathlib import Path

from bench.poset_interleaved import main

CHECKOUT = Path(__file__).resolve().parents[2]


def test_a_checkout_against_itself_places_and_removes_in_both_trees(capsys) -> None:
    main(["--baseline", str(CHECKOUT), "--size", "300", "--placed", "40", "--rounds", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",")[1].strip().split(" per")[0] for line in lines] == [
        "insertions",
        "removals",
    ]
    for line in lines:
        found = re.search(r"this ([\d,]+), baseline ([\d,]+); this / baseline ([\d.]+)", line)
        assert found is not None, line
        this, baseline, ratio = (float(n.replace(",", "")) for n in found.groups())
        assert this > 0 and baseline > 0 and ratio > 0
