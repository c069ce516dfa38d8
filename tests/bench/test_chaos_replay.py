"""bench.chaos_replay replays the chaos harness's schedules in the simulator (a smoke test:
every planned fault is injected, healed and timed, and the network ends as one cube)."""

from bench.chaos_replay import Replay, one_cube
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
