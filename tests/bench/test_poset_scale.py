"""``bench.poset_scale`` and ``bench.poset_profile`` on small posets: every figure is there, the
answers agree with brute force and with the previous poset, and the routing bookkeeping marks and
resends as a super-peer with one neighbour would."""

import json

from bench import poset_profile, poset_scale
from poset import SubscriptionPoset


def test_a_small_run_reports_every_figure_and_no_difference(capsys) -> None:
    options = "--workload shapes --sizes 600,700 --churn 100 --check 3 --baseline 600 --traced 600"
    poset_scale.main(options.split())
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["subscriptions"] for row in rows] == [600, 700]
    for row in rows:
        assert row["differences_from_brute_force"] == 0
        assert row["bulk_same_as_one_at_a_time"] is True
        assert 0 < row["sent_nodes"] <= row["nodes"]
        assert row["inserts_per_s"] > 0 and row["removals_per_s"] > 0
        assert row["sent_removals"] > 0 and row["resent"] >= 0
        assert row["stood_in_largest"] >= row["stood_in_per_sent_node"]
        assert "load_start" in row and "load_end" in row
    first, second = rows
    assert first["same_fan_out_as_baseline"] is True
    assert first["bytes_per_subscription"] > 0 and "bytes_per_subscription" not in second
    # a Hasse diagram's roots are what general_first's guess marks, or fewer
    assert first["baseline_sent_nodes"] <= first["sent_nodes"]


def test_marking_leaves_every_node_sent_or_under_a_sent_one_and_removals_keep_it_so() -> None:
    items = poset_scale._items(poset_scale.WORKLOADS["library"](seed=2), 800, 0)
    poset = SubscriptionPoset()
    poset.insert_many(items)
    marked = poset_scale.mark_uncovered(poset)
    assert marked == poset.statistics().sent_nodes > 0

    def everything_reached() -> bool:
        return all(
            poset_scale.LABEL in poset.sent_labels(node, poset_scale.DESTINATION) for node in poset
        )

    assert everything_reached()
    resent = [poset_scale.unplace(poset, source, sid) for _, source, sid in items[:400]]
    assert any(count > 0 for count in resent)
    assert everything_reached()


def test_the_profile_prints_counts_and_both_profiles(capsys) -> None:
    poset_profile.main(["--size", "500", "--operations", "50", "--lines", "3"])
    out = capsys.readouterr().out
    assert "per insertion (a first pass, counted): " in out
    assert "per removal (counted): " in out
    assert "50 insertions into 500" in out and "50 removals: " in out
