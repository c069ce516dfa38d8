"""The tables the driver finishes in plain Python (``analytics.tables``), on the edges of their
definitions: Gini extremes, an empty load, percentiles at ties."""

from __future__ import annotations

from analytics import tables


def test_gini_of_equal_loads_one_carrier_and_no_load() -> None:
    assert tables.load_tables({"a": 5, "b": 5, "c": 5, "d": 5})[1] == [(4, 20, 0.0)]
    assert tables.load_tables({"a": 0, "b": 0, "c": 10, "d": 0})[1] == [(4, 10, 0.75)]
    curve, gini = tables.load_tables({"a": 0, "b": 0})
    assert gini == [(2, 0, None)]  # undefined without load
    # rank, node, load, share of super-peers, cumulative share of load
    assert curve == [(1, "a", 0, 0.5, None), (2, "b", 0, 1.0, None)]


def test_nearest_rank_percentiles_in_integers() -> None:
    ordered = [1.0, 5.0, 5.0, 5.0]
    assert tables.percentiles(ordered, (1, 25, 26, 50, 100)) == [1.0, 1.0, 5.0, 5.0, 5.0]
    # 7 * 100 / 100 is 7 exactly in integers (as a float, 0.07 * 100 is 7.000000000000001)
    assert tables.percentiles([float(v) for v in range(1, 101)], (7,)) == [7.0]


def test_latency_tables_from_ranks() -> None:
    """Rows of ``latency_ranks``: the CDF groups by delivery, the buckets by start."""
    ranks = [("online", None, p, float(p), 100, 1.0) for p in range(1, 101)] + [
        (None, 0.0, p, 2.0 * p, 7, 2.0) for p in (50, 90, 99)
    ]
    small, timed = tables.latency_tables(ranks, 60.0)
    assert small["latency_summary"] == [("online", 100, 1.0, 50.0, 90.0, 99.0, 100.0)]
    assert small["latency_cdf"][:2] == [("online", 1, 1.0), ("online", 2, 2.0)]
    assert small["latency_over_time"] == [(0.0, 60.0, 7, 100.0, 180.0, 198.0)]
    assert timed == 100
