"""The same workload on real daemons (the replay tool) and in the simulator, for tests that
compare the two with the oracle."""

import json
from functools import partial
from pathlib import Path

import trio

from deploy.replay import replay
from superpeer.sim import Simulation


def replayed_and_simulated(
    directory: Path, operations: list[dict], superpeers: int, settings: str = ""
) -> tuple[dict, Simulation]:
    """The replay tool's report on ``superpeers`` daemons (with ``settings`` added to their
    configuration), and the simulation of the same operations (close it when it keeps
    files)."""
    workload = directory / "workload.jsonl"
    workload.write_text("".join(json.dumps(op) + "\n" for op in operations))
    report = trio.run(partial(replay, workload, superpeers, None, settings=settings))
    simulation = Simulation(superpeers)
    for op in operations:
        simulation.apply(dict(op))
    return report, simulation
