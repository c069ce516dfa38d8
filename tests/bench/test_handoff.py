"""bench.handoff times an fsync on a worker thread and on the trio thread (a smoke test)."""

from bench.handoff import MODES, measure


def test_each_mode_is_timed(tmp_path) -> None:
    best = measure(20, 1, str(tmp_path))
    assert set(best) == set(MODES)
    assert all(cpu > 0 and wall > 0 for cpu, wall in best.values())
