"""The analysis of the daemons' own trace logs, not the simulator's.

A workload is replayed on a real cluster of super-peer daemons (``deploy.cluster``, driven by
``deploy.replay``'s ``Replay``, the data kept as ``deploy.replay --keep DIR`` keeps it), whose
trace files rotate at 4 KiB, so that every super-peer leaves several; they are collected
(``deploy.collect_traces``: rotated files gzipped, current ones plain) and analysed. The messages
per kind in the analysis equal those the replay counted itself (its peers' sent and received
messages, the daemons' own counts of super-peer messages), for every kind both have.

The replay's report is made when the network is quiet after the last operation; afterwards the
daemons shut down, and withdraw their peers' subscriptions and advertisements (traced too). So the
analysis is of the events up to that quiet moment, which ``replay_kept`` notes (``replay`` does
not say when it was).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from analytics.figures import analyze
from analytics.load import read_traces
from deploy.cluster import Cluster
from deploy.collect_traces import collect
from deploy.replay import Replay
from superpeer.sim.generate import generate
from superpeer.sim.workload import read_workload

pytestmark = [pytest.mark.process, pytest.mark.spark, pytest.mark.slow]

SUPERPEERS = 4
WORKLOAD = {
    "superpeers": SUPERPEERS,
    "peers": 10,
    "subscriptions": 40,
    "publications": 30,
    "churn": 0.2,
    "unsubscribe": 0.15,
    "seed": 5,
}
TRACE_SETTINGS = "[trace]\nmax_bytes = 4096\nkeep = 1000\n"
"""Small files (the least ``superpeer.tracelog`` allows is 1 KiB), all of them kept."""
TRACED = {"peer.advertise", "peer.subscribe", "peer.unsubscribe", "peer.publish", "peer.locate",
          "peer.notify", "sp.elements", "sp.forward", "sp.retract", "sp.notification", "sp.locate",
          "sp.located"}  # fmt: skip
"""Kinds the daemons trace today that this workload sends: they must be in both counts."""
NOT_TRACED_YET = {"peer.ack", "peer.located", "peer.refused", "link.goodbye"}
"""Kinds the replay counts that the daemons do not trace yet (answers to peers, a farewell)."""


async def replay_kept(workload: Path, directory: Path, settings: Path) -> tuple[dict, float]:
    """``deploy.replay.replay(workload, SUPERPEERS, directory)`` with the daemons started on
    ``settings``, and the time at which the network was quiet with every operation done."""
    operations = list(read_workload(workload))
    with Cluster(
        SUPERPEERS, directory=directory, extra_args=("--config", str(settings))
    ) as cluster:
        player = Replay(cluster, directory / "peers")
        async with trio.open_nursery() as nursery:
            await player.run(operations, nursery)
            statuses = await cluster.statuses()
            quiet = time.time()
            for peer in player.everyone:
                await peer.disconnect()
            nursery.cancel_scope.cancel()
    return player.report(statuses), quiet


def test_the_daemons_logs_count_what_the_replay_counted(
    spark: SparkSession, tmp_path: Path
) -> None:
    operations = list(generate(**WORKLOAD))
    operations += [
        {"op": "locate", "peer": "peer0", "id": f"where{j}", "target": f"peer{j}"}
        for j in (*range(1, 10), "stranger")
    ]
    workload = tmp_path / "workload.jsonl"
    workload.write_text("".join(json.dumps(op) + "\n" for op in operations))
    settings = tmp_path / "superpeer.toml"
    settings.write_text(TRACE_SETTINGS)
    report, quiet = trio.run(replay_kept, workload, tmp_path / "cluster", settings)

    logs = tmp_path / "logs"
    collected = collect([tmp_path / "cluster"], logs)
    assert not collected.present
    for k in range(SUPERPEERS):
        names = {f.name for f in (logs / f"sp{k}").iterdir()}
        assert f"sp{k}.jsonl" in names and f"sp{k}-1.jsonl.gz" in names, names

    raw = read_traces(spark, str(logs))
    assert raw.where(F.col("_corrupt_record").isNotNull()).count() == 0
    figures = analyze(raw.where(F.col("ts") <= quiet))
    try:
        analysed = {r.kind: (r.messages, r.bytes) for r in figures.tables["kinds"]}
    finally:
        figures.unpersist()
    replayed = {kind: (c["count"], c["bytes"]) for kind, c in report["messages"].items()}
    both = analysed.keys() & replayed.keys()
    assert both >= TRACED
    assert replayed.keys() - analysed.keys() <= NOT_TRACED_YET
    assert {k: analysed[k] for k in both} == {k: replayed[k] for k in both}
