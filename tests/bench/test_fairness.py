"""bench.fairness: the median of each flooder's ratios over the rounds (the daemons' phases run
in the benchmark itself; here, what it makes of their rows)."""

from bench.fairness import PHASES, medians


def rounds(*ratios: tuple[float, float, float, float]) -> list[dict[str, object]]:
    """The rows of one round per item of ``ratios``: the flood's p50 and p99 ratios, then the
    holder's; the quiet phases at 1."""
    rows: list[dict[str, object]] = []
    for flood_p50, flood_p99, held_p50, held_p99 in ratios:
        measured = {"publications": (flood_p50, flood_p99), "subscriptions": (held_p50, held_p99)}
        for phase, flooder in PHASES:
            p50, p99 = measured.get(flooder or "", (1.0, 1.0))
            rows.append(
                {"phase": phase, "flooder": flooder, "p50_vs_alone": p50, "p99_vs_alone": p99}
            )
    return rows


def test_each_flooded_phase_gets_the_median_of_its_rounds_and_quiet_phases_none() -> None:
    rows = rounds((1.1, 2.25, 1.2, 2.85), (0.9, 0.72, 1.0, 1.75), (1.0, 1.5, 1.1, 2.51))
    found = medians(rows)
    assert set(found) == {"publication flood", "subscription holder"}
    assert found["publication flood"] == {"rounds": 3, "p50_vs_alone": 1.0, "p99_vs_alone": 1.5}
    assert found["subscription holder"]["p99_vs_alone"] == 2.51
    assert medians(rows[: len(PHASES)])["subscription holder"]["rounds"] == 1
