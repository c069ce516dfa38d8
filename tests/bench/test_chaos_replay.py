"""bench.chaos_replay replays the chaos harness's schedules in the simulator (a smoke test:
every planned fault is injected, healed and timed, and the network ends as one cube)."""

from bench.chaos_replay import Replay, measure, one_cube
from deploy.chaos import FAULTS, make_plan
from superpeer.node import NodeConfig


def test_a_schedule_of_every_kind_is_replayed_and_the_cube_is_whole_at_the_end() -> None:
    kinds = [k for k in FAULTS if k != "slow"]
    plan = make_plan(
        seed=1, duration=60.0, superpeers=6, peers=4, faults=kinds, rate=4.0, overlap=2,
        hosts="netns",
    )  # fmt: skip
    replay = Replay(plan, NodeConfig(heartbeat_seconds=0.5, failure_seconds=3.0), 1)
    records = replay.run()
    planned = [f for f in plan["faults"] if f["kind"] not in ("skew", "slow")]
    assert len(records) == len(planned)
    assert {r.kind for r in records} >= {"kill", "pause", "partition", "isolate", "crash"}
    assert all(r.healed is not None for r in records)
    replay.simulation.run_until_quiet()
    assert one_cube(replay.simulation)


def test_the_faults_to_trace_are_listed_one_for_each_counted_over_30_s_or_never() -> None:
    """``--slow-faults`` (with ``--first-seed``): each fault the row counts over 30 s or never
    is listed with its seed, so that it can be traced."""
    row = measure(8, 1, 150.0, 2, 30.0, 3.0, first_seed=5)
    slow = row["slow_faults"]
    assert slow, "seed 5 has faults over 30 s"
    assert len(slow) == row["over_30"] + row["never"]
    assert all(fault["seed"] == 5 and fault["healed"] > 0 for fault in slow)
    assert sum(fault["seconds"] is None for fault in slow) == row["never"]
