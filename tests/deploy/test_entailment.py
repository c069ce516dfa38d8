"""RDFS entailment on real daemons (127.0.0.1): ``peer publish-schema``, then a publication of a
subclass instance reaches a subscriber of the superclass; the schema survives a kill -9 of the
access point that keeps it; a malformed schema is a clear local error. Every process is stopped."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.cluster import Cluster
from tests.deploy.replaying import replayed_and_simulated
from tests.superpeer.oracle import expected_changes

pytestmark = [pytest.mark.process, pytest.mark.slow]

SCHEMA = """@prefix ex: <http://example.org/> .
@prefix dc: <http://purl.org/dc/elements/1.1/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
dc:article rdfs:subClassOf ex:Document .
ex:Document a rdfs:Class ; rdfs:label "a document" .
"""
ARTICLE = """@prefix dc: <http://purl.org/dc/elements/1.1/> .
<http://example.org/{name}> a dc:article ; dc:title "{name}" .
"""
DOCUMENTS = "X : t(X, rdf:type, <http://example.org/Document>)"
TIMEOUT = 60.0


def _peer(directory: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "peer.cli", *argv, "--data-dir", str(directory)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def _until(condition, what: str) -> None:
    """Wait for ``condition`` (polled), at most ``TIMEOUT`` seconds."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _known_everywhere(cluster: Cluster, axioms: int) -> bool:
    statuses = [cluster.status(k) for k in cluster.live()]
    return all(s.get("advertisements", {}).get("schema_axioms") == axioms for s in statuses)


def _inbox(directory: Path) -> list[str]:
    listed = _peer(directory, "inbox", "--json").stdout
    return sorted(json.loads(line)["subject"] for line in listed.splitlines())


def test_a_subclass_instance_reaches_a_subscriber_of_the_superclass(tmp_path):
    advertisement = tmp_path / "ad.json"
    advertisement.write_text(json.dumps({"schemas": ["dc"]}))
    schema = tmp_path / "schema.ttl"
    schema.write_text(SCHEMA)
    broken = tmp_path / "broken.ttl"
    broken.write_text('<http://example.org/a> <http://example.org/b> "data, not a schema" .\n')
    with Cluster(4, peers=3, trace=False) as cluster:
        subscriber, publisher, schemer = cluster.peer_directories
        assert _peer(publisher, "advertise", str(advertisement)).returncode == 0
        subscribed = _peer(subscriber, "subscribe", DOCUMENTS)
        assert subscribed.returncode == 0, subscribed.stderr

        refused = _peer(schemer, "publish-schema", str(broken))
        assert refused.returncode == 2 and "is not a schema statement" in refused.stderr
        published = _peer(schemer, "publish-schema", str(schema))
        assert published.returncode == 0, published.stderr
        assert "1 axiom" in published.stdout
        _until(lambda: _known_everywhere(cluster, 1), "the schema on every super-peer")

        paper = tmp_path / "a1.ttl"
        paper.write_text(ARTICLE.format(name="a1"))
        assert _peer(publisher, "publish", str(paper)).returncode == 0
        _until(lambda: _inbox(subscriber) == ["http://example.org/a1"], "the entailed article")

        status = json.loads(_peer(schemer, "status", "--json").stdout)
        assert status["schemas"] == 1
        # the schemer's access point keeps its schema across a crash: with the schemer
        # offline (so it cannot send it again), it is killed and restarted on its data, and
        # announces the schema again from its store
        assert cluster.stop_peer(2) == 0
        access_point = 2  # the launcher attaches peer j to super-peer j mod N
        cluster.kill(access_point)
        cluster.restart(access_point)
        _until(
            lambda: cluster.status(access_point)["advertisements"]["local_schema_axioms"] == 1,
            "the schema restored from the store",
        )
        _until(lambda: _known_everywhere(cluster, 1), "the schema after the restart")
        paper.write_text(ARTICLE.format(name="a2"))
        assert _peer(publisher, "publish", str(paper)).returncode == 0
        _until(
            lambda: _inbox(subscriber) == ["http://example.org/a1", "http://example.org/a2"],
            "the second entailed article",
        )
        daemons = cluster.peer_processes + cluster.processes
    assert all(process.returncode == 0 for process in daemons if process is not None)


def test_replay_of_schemas_gives_the_simulators_and_the_oracles_deliveries(tmp_path):
    """The workload's ``publish_schema`` through real daemons, the simulator and the oracle
    (whose closure is rdflib's and owlrl's): the same changes, the same refusals."""
    dc = "http://purl.org/dc/elements/1.1/"
    operations = [
        *({"op": "join", "peer": f"p{k}", "superpeer": k} for k in range(4)),
        {"op": "advertise", "peer": "p1", "schemas": [dc]},
        {"op": "subscribe", "peer": "p0", "id": "docs", "query": DOCUMENTS},
        {"op": "publish", "peer": "p1", "id": "before", "data": ARTICLE.format(name="b")},
        {"op": "publish_schema", "peer": "p3", "data": SCHEMA},
        {"op": "publish_schema", "peer": "p2", "data": "<broken", "format": "nt"},
        {"op": "publish", "peer": "p1", "id": "after", "data": ARTICLE.format(name="a")},
        {"op": "leave", "peer": "p3"},
        {"op": "publish", "peer": "p1", "id": "gone", "data": ARTICLE.format(name="g")},
    ]
    report, simulation = replayed_and_simulated(tmp_path, operations, 4)
    expected = expected_changes(4, operations)
    assert expected["p0"] == [["after", "added"]]
    assert report["changes"] == simulation.report()["changes"] == expected
    assert report["errors"] == simulation.errors
    assert (
        len(report["errors"]) == 1 and "cannot read the nt document" in report["errors"][0]["error"]
    )
