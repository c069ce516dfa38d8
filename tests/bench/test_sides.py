"""bench.sides measures deliveries inside each side of a cut while it lasts (a smoke test)."""

from bench.sides import measure, one_side


def test_a_side_whose_routes_crossed_the_cut_delivers_only_once_it_re_formed() -> None:
    """The cube of 8 built with seed 6, cut into {0, 1, 2, 7} | {3, 4, 5, 6}: the routes between
    the two ends of either side went through the other. With ``reform_seconds`` longer than the
    cut, nothing published during it arrives before the heal; re-formed, what was published
    once the side was a cube again arrives (the publisher's requests wait for it meanwhile)."""
    groups = [[0, 1, 2, 7], [3, 4, 5, 6]]
    *_, published, stuck = one_side(8, groups, 6, 0, hold=40.0, reform=100.0)
    assert published > 0 and stuck == 0
    *_, published, delivered = one_side(8, groups, 6, 0, hold=40.0, reform=6.0)
    assert published > 0 and delivered >= published // 2


def test_the_sum_counts_every_side_of_two_or_more() -> None:
    row = measure(8, 2, 7, hold=40.0, reform=6.0)
    assert row["published"] == sum(side["published"] for side in row["sides"])
    assert all(len(side["groups"][side["side"]]) >= 2 for side in row["sides"])
    assert row["sides_short"] == sum(s["delivered"] < s["published"] for s in row["sides"])
