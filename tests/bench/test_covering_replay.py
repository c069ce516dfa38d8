"""``bench.covering_replay`` on a small poset: the covering calls of real placements answer the
same with and without the step it measures (``measure`` checks it), and the step decides some."""

from bench import covering_replay


def test_the_replayed_calls_answer_alike_both_ways():
    calls = covering_replay.record("shapes", 1000, 100, seed=1)
    result = covering_replay.measure(calls, 100, rounds=1)
    assert len(result["baseline_ms_per_placement"]) == len(result["now_ms_per_placement"]) == 1
    assert result["reaching_the_step_per_placement"] >= result["decided_there_per_placement"] > 0
