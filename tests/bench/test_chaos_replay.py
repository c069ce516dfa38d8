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
    row = measure(8, 1, 150.0, 2, 30.0, 3.0, first_seed=2)
    slow = row["slow_faults"]
    assert slow, "seed 2 has faults over 30 s"
    assert len(slow) == row["over_30"] + row["never"]
    assert all(fault["seed"] == 2 and fault["healed"] > 0 for fault in slow)
    assert sum(fault["seconds"] is None for fault in slow) == row["never"]


def test_each_heal_is_also_timed_from_the_last_heal_of_any_fault() -> None:
    """With faults overlapping, one fault's heal may be followed by another's: the row says too
    how long one cube took from the last heal of any fault (never longer than from its own),
    and leaves out of that figure the faults whose wait ended while another was still active."""
    replay = Replay(
        make_plan(
            seed=5, duration=150.0, superpeers=8, peers=4,
            faults=[k for k in FAULTS if k != "slow"], rate=4.0, overlap=2, hosts="netns",
        ),
        NodeConfig(heartbeat_seconds=0.5, failure_seconds=3.0, wedged_seconds=30.0),
        5,
    )  # fmt: skip
    records = replay.run()
    whole = [r for r in records if r.one_cube is not None]
    assert whole and all(r.after_last_heal is not None for r in whole)
    assert all(r.after_last_heal <= r.one_cube + 1e-9 for r in whole)
    assert any(r.after_last_heal < r.one_cube for r in whole), "some heal was followed by another"
    assert all(not r.held_apart for r in whole)
    row = measure(8, 1, 150.0, 2, 30.0, 3.0, first_seed=5)
    quiet = row["after_last_heal"]
    assert quiet["never"] + quiet["held_apart"] == row["never"]
    assert quiet["over_30"] <= row["over_30"] + row["never"]
