"""bench.fairness: the median of each flooder's ratios over the rounds (the daemons' phases run
in the benchmark itself; here, what it makes of their rows)."""

from bench.fairness import PHASES, medians, pooled


def rounds(*ratios: dict[str, tuple[float, float]]) -> list[dict[str, object]]:
    """The rows of one round per item of ``ratios``: per flooder, its p50 and p99 ratios; the
    quiet phases at 1."""
    rows: list[dict[str, object]] = []
    for measured in ratios:
        for phase, flooder in PHASES:
            p50, p99 = measured.get(flooder or "", (1.0, 1.0))
            rows.append(
                {"phase": phase, "flooder": flooder, "p50_vs_alone": p50, "p99_vs_alone": p99}
            )
    return rows


def test_each_flooded_phase_gets_the_median_of_its_rounds_and_quiet_phases_none() -> None:
    rows = rounds(
        {"publications": (1.1, 2.25), "held": (1.2, 1.6), "churn": (1.2, 2.85)},
        {"publications": (0.9, 0.72), "held": (1.0, 1.1), "churn": (1.0, 1.75)},
        {"publications": (1.0, 1.5), "held": (1.1, 1.3), "churn": (1.1, 2.51)},
    )
    found = medians(rows)
    assert set(found) == {"publication flood", "subscription holder", "subscription churn"}
    assert found["publication flood"] == {"rounds": 3, "p50_vs_alone": 1.0, "p99_vs_alone": 1.5}
    assert found["subscription holder"] == {"rounds": 3, "p50_vs_alone": 1.1, "p99_vs_alone": 1.3}
    assert found["subscription churn"]["p99_vs_alone"] == 2.51
    assert medians(rows[: len(PHASES)])["subscription churn"]["rounds"] == 1


def test_pooled_ratios_set_each_flooders_samples_against_the_quiet_phases_before_it() -> None:
    """Each flooded phase against the quiet phase just before it, every round's samples in one
    pool: one slow quiet phase weighs as one round's share of the baseline."""
    quiet = [0.001 * k for k in range(1, 101)]  # p99: 99 ms
    slow_quiet = [0.002 * k for k in range(1, 101)]
    rows: list[dict[str, object]] = []
    for round_quiet in (quiet, slow_quiet):
        for phase, flooder in PHASES:
            samples = round_quiet if flooder is None else [2 * x for x in quiet]
            rows.append({"phase": phase, "flooder": flooder, "samples": samples})
    found = pooled(rows)
    assert set(found) == {"publication flood", "subscription holder", "subscription churn"}
    churn = found["subscription churn"]
    assert churn["samples"] == 200
    assert (churn["p99_ms"], churn["alone_p99_ms"]) == (198.0, 196.0)
    assert (churn["p50_ms"], churn["alone_p50_ms"]) == (100.0, 67.0)
    assert (churn["p50_vs_alone"], churn["p99_vs_alone"]) == (1.49, 1.01)
