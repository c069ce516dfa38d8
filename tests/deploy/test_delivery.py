"""End-to-end delivery under peer faults, on real daemons (``deploy.delivery`` at CI size; the
full size is ``python -m deploy.delivery``). Every wait is for a condition, never a fixed sleep."""

import pytest

from deploy.delivery import backlog, failed, failover, faults, moves

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.mark.parametrize("kind", ["kill", "term"])
def test_a_subscriber_faulted_mid_stream_receives_every_publication_once(tmp_path, kind):
    result = faults(kind, rounds=4, publications=200, seed=3, directory=tmp_path)
    assert failed(result) == [], result
    assert result["publications"] == 4 * 200 and result["unknown_outcome"] == 0
    assert result["owed"] > 400 and result["delivered"] == result["owed"]
    assert [r["lost"] + r["duplicated"] for r in result["rounds_detail"]] == [0] * 4
    points = [r["point"] for r in result["rounds_detail"]]
    assert len(set(points)) == 4 and all(0 < p < 200 for p in points), "seeded random points"


def test_a_backlog_reaches_a_returning_peer_in_order_and_its_neighbour_stays_attached(tmp_path):
    result = backlog(publications=2000, seed=2, directory=tmp_path)
    assert failed(result) == [], result
    assert result["owed"] == result["delivered"] == 2000
    assert result["in_publication_order"]
    healthy = result["healthy"]
    assert healthy["delivered"] == 2000 and healthy["connections_after"] == 1
    assert healthy["detached_observations"] == healthy["log_disconnections"] == 0
    assert result["drain_rate"] > 0


def test_a_subscriber_moving_between_four_super_peers_loses_nothing(tmp_path):
    result = moves(count=10, seed=9, rate=200, directory=tmp_path)
    assert failed(result) == [], result
    assert result["moves"] == 10 and result["path"][0] == result["path"][-1] == 0
    assert len(set(result["path"])) == 4, "it visited every super-peer"
    assert result["owed"] > 0 and result["delivered"] == result["owed"]
    assert result["left_at_old_access_points"] == []


def test_a_subscriber_whose_access_point_is_killed_fails_over_and_loses_nothing(tmp_path):
    result = failover(publications=600, seed=4, directory=tmp_path)
    assert failed(result) == [], result
    assert 150 <= result["killed_after"] < 300
    assert result["owed"] > 300 and result["delivered"] == result["owed"]
    assert result["left_at_old_access_points"] == []
