"""The hybrid clock, the offset estimator and the steady wall clock (``clocks``)."""

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clocks import (
    MAX_SLEW,
    TICK,
    HybridClock,
    OffsetEstimator,
    SteadyWallClock,
    correction_of,
    sample_of,
)


def test_readings_increase_strictly_whatever_the_wall_clock_does():
    clock = HybridClock()
    walls = [100.0, 100.0, 99.0, 50.0, 100.5, 100.5]
    readings = [clock.now(wall) for wall in walls]
    assert readings == sorted(set(readings)), "strictly increasing"
    assert readings[0] == 100.0
    assert readings[3] > readings[2] >= 100.0, "a wall clock set back does not take it back"
    assert 100.5 <= readings[4] < 100.5 + 10 * TICK, "the wall time (and the logical steps)"


def test_hybrid_time_runs_on_from_a_faster_reading_at_the_rate_of_the_local_clock():
    """A reading from a clock 300 s ahead keeps its lead as time passes here: ten seconds later
    here, hybrid time is ten seconds further on, not standing still until the wall clock
    catches up (which made intervals of hybrid time far shorter than the real ones)."""
    clock = HybridClock()
    first = clock.now(1000.0)
    assert clock.observe(1300.0, 1000.5)
    later = clock.now(1010.5)
    assert later - 1300.0 == pytest.approx(10.0, abs=1e-5)
    assert clock.read(1020.5) == pytest.approx(1320.0, abs=1e-5)
    assert clock.lead(1020.5) == pytest.approx(299.5, abs=1e-5)
    assert later > first


def test_after_a_restore_hybrid_time_runs_from_the_next_event():
    clock = HybridClock()
    clock.restore(5000.0)
    assert clock.read(100.0) == 5000.0
    first = clock.now(100.0)
    assert 5000.0 < first < 5000.0 + 10 * TICK
    assert clock.now(104.0) == pytest.approx(first + 4.0, abs=1e-5)


def test_a_reading_that_came_with_a_message_orders_everything_after_it():
    here = HybridClock()
    here.now(10.0)
    assert here.observe(40.0, 10.5)
    assert here.now(10.6) > 40.0
    assert here.lead(10.6) > 29.0


def test_a_reading_too_far_ahead_is_not_absorbed():
    clock = HybridClock(max_lead=60.0)
    clock.now(1000.0)
    assert not clock.observe(1000.0 + 3600.0, 1000.0)
    assert clock.refused == 1
    assert clock.largest_refused_lead == 3600.0
    assert clock.now(1001.0) < 1002.0


def test_a_restart_goes_on_from_the_readings_it_kept():
    clock = HybridClock()
    clock.restore(500.0)
    clock.restore(math.nan)  # an unreadable record changes nothing
    assert clock.now(100.0) > 500.0


def test_read_judges_without_stamping():
    clock = HybridClock()
    stamp = clock.now(10.0)
    assert clock.read(9.0) == stamp  # not below a reading given
    assert clock.read(20.0) == 20.0
    assert clock.last == stamp


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, int | None, float]]:
    """Events on three processes with skewed wall clocks: (process, the process whose last
    event sent it a message or None, the true time), in true-time order."""
    events = []
    now = 0.0
    for _ in range(draw(st.integers(1, 40))):
        now += draw(st.floats(0.0, 5.0))
        sender = draw(st.one_of(st.none(), st.integers(0, 2)))
        events.append((draw(st.integers(0, 2)), sender, now))
    return events


@given(histories(), st.lists(st.floats(-3600.0, 3600.0), min_size=3, max_size=3))
def test_causality_orders_hybrid_times_whatever_the_skews(history, skews):
    """If an event could know of another (a chain of messages), its hybrid time is larger,
    with clocks up to an hour apart either way (``clocks``: the reason no rule compares wall
    clocks)."""
    clocks = [HybridClock() for _ in range(3)]
    last: dict[int, float] = {}
    knows: list[set[int]] = []
    stamps: list[float] = []
    learned: dict[int, set[int]] = {p: set() for p in range(3)}
    for number, (process, sender, true) in enumerate(history):
        wall = true + skews[process]
        if sender is not None and sender in last and sender != process:
            assert clocks[process].observe(last[sender], wall)
            learned[process] |= learned[sender]
        stamp = clocks[process].now(wall)
        learned[process] = learned[process] | {number}
        last[process] = stamp
        stamps.append(stamp)
        knows.append(set(learned[process]))
    for before, later in itertools.combinations(range(len(stamps)), 2):
        if later in knows[before]:
            raise AssertionError("an event cannot know a later one")
    for event, known in enumerate(knows):
        for earlier in known - {event}:
            assert stamps[earlier] < stamps[event]


def test_ntp_on_wire_calculation():
    # the other clock is 45 s ahead; 20 ms each way; it held the message 5 ms
    sample = sample_of(1000.0, 1045.020, 1045.025, 1000.045)
    assert sample is not None
    assert abs(sample.offset - 45.0) < 1e-9
    assert abs(sample.delay - 0.040) < 1e-9
    assert sample_of(1000.0, 1045.0, 1045.0, 999.0) is None, "a clock stepped meanwhile"


def test_the_estimate_is_the_exchange_with_the_shortest_round_trip():
    estimator = OffsetEstimator(keep=4)
    assert estimator.offset is None and estimator.error is None
    estimator.add(sample_of(0.0, 10.5, 10.5, 0.2))  # 0.2 s round trip: offset 10.4
    estimator.add(sample_of(1.0, 11.01, 11.01, 1.02))  # 20 ms: offset 10.0
    estimator.add(None)
    assert estimator.samples == 2
    assert abs(estimator.offset - 10.0) < 1e-9
    assert abs(estimator.error - 0.01) < 1e-9
    for at in range(4):  # the good one ages out
        estimator.add(sample_of(10.0 + at, 20.5 + at, 20.5 + at, 10.2 + at))
    assert abs(estimator.offset - 10.4) < 1e-9


def test_a_clock_is_beyond_the_bound_only_when_its_error_cannot_explain_it():
    """A node busy with a burst answers late: a 3.2 s round trip with the clocks 1.6 s apart
    is no evidence of a wrong clock (it was reported as one, and ``/readyz`` said not ready)."""
    estimator = OffsetEstimator()
    assert not estimator.beyond(1.0), "never measured"
    estimator.add(sample_of(0.0, 3.2, 3.2, 3.2))  # offset +1.6 s, error 1.6 s
    assert abs(estimator.offset - 1.6) < 1e-9 and not estimator.beyond(1.0)
    estimator.add(sample_of(10.0, 12.0, 12.0, 10.2))  # offset +1.9 s, error 0.1 s
    assert estimator.beyond(1.0) and not estimator.beyond(1.85)


def test_a_steady_clock_does_not_step_with_the_wall_clock_and_slews_toward_it():
    wall, monotonic = [1000.0], [5.0]
    steady = SteadyWallClock(lambda: wall[0], lambda: monotonic[0])
    assert steady() == 1000.0
    monotonic[0] += 1.0
    wall[0] += 1.0 + 45.0  # stepped 45 s ahead
    assert abs(steady() - 1001.0 - MAX_SLEW) < 1e-9, "it moved a little toward it"
    monotonic[0] += 100.0
    wall[0] += 100.0
    assert abs(steady() - (1101.0 + 101 * MAX_SLEW)) < 1e-9
    assert steady.step() > 44.0
    wall[0] -= 200.0  # and back: it does not jump back either
    monotonic[0] += 1.0
    assert steady() > 1101.0


def test_tick_is_seen_at_todays_times():
    assert 1_800_000_000.0 + TICK > 1_800_000_000.0


def test_a_disciplined_clock_takes_its_physical_part_from_the_correction():
    """A clock 400 s ahead of its neighbours, corrected: its readings are theirs, not its own
    (``clocks``, rule 0), and a deadline in hybrid time falls later on its wall clock."""
    clock = HybridClock()
    clock.discipline(-400.0)
    assert clock.now(1400.0) == pytest.approx(1000.0)
    assert clock.read(1410.0) == pytest.approx(1010.0)
    assert clock.lead(1410.0) == pytest.approx(-400.0)
    assert clock.earlier(1410.0) == pytest.approx(1010.0)


def test_a_correction_that_sets_the_clock_back_never_takes_hybrid_time_back():
    clock = HybridClock()
    first = clock.now(1000.0)
    clock.discipline(-60.0)
    second = clock.now(1001.0)
    assert second > first
    assert second == pytest.approx(1001.0, abs=1e-5)  # runs on from the reading, not from 941


def test_a_restarted_clock_trusts_its_wall_clock_in_nothing_until_measured():
    """Restarted 400 s ahead after 10 s down: hybrid time runs on from what it kept (behind by
    the 10 s), the first reading absorbed brings it up, and the measurement disciplines it."""
    clock = HybridClock()
    clock.restore(1000.0)
    clock.unmeasured(1410.0)  # true time 1010: the wall clock is 400 s ahead
    assert clock.now(1412.0) == pytest.approx(1002.0, abs=1e-5)
    assert clock.observe(1012.5, 1412.5)
    assert clock.now(1413.0) == pytest.approx(1013.0, abs=1e-5)
    clock.discipline(-400.0)
    assert clock.now(1420.0) == pytest.approx(1020.0, abs=1e-5)
    assert clock.correction == -400.0


def test_a_clock_that_kept_no_reading_has_only_its_wall_clock():
    clock = HybridClock()
    clock.unmeasured(50.0)
    assert clock.correction == 0.0
    assert clock.now(100.0) == 100.0


def test_readings_are_judged_too_far_ahead_against_the_corrected_wall_time():
    clock = HybridClock(max_lead=60.0)
    clock.discipline(-400.0)
    assert not clock.observe(1400.0 + 1.0, 1400.0)  # 401 s ahead of what it takes as now
    assert clock.observe(1030.0, 1400.0)


@pytest.mark.parametrize(
    ("offsets", "correction"),
    [
        ([], 0.0),
        ([400.0], 0.0),  # of two, the slower
        ([-400.0], -400.0),
        ([-400.0, -400.0], -400.0),  # its two neighbours outvote it
        ([400.0, 0.0, 0.0], 0.0),  # one neighbour far off moves nobody
        ([-400.0, -400.0, -400.0], -400.0),
        ([0.5, -0.25, 0.1], 0.0),  # the lower of the middle two
    ],
)
def test_the_correction_is_the_median_of_the_node_and_its_neighbours(offsets, correction):
    assert correction_of(offsets) == correction


@given(st.lists(st.floats(-3600.0, 3600.0), min_size=2, max_size=11), st.data())
def test_a_minority_of_wrong_clocks_moves_no_node_of_a_correct_majority(wrong, data):
    """However far off, fewer than half of a node's clocks (itself among them) never move its
    correction beyond the spread of the correct ones."""
    correct = data.draw(st.lists(st.floats(-0.5, 0.5), min_size=len(wrong), max_size=len(wrong)))
    assert -0.5 <= correction_of([*correct, *wrong[: len(correct) - 1]]) <= 0.5
