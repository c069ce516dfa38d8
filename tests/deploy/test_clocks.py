"""Real daemons whose wall clocks disagree (Debian's ``faketime``): nothing is lost, repeated or
delivered that is not owed, the daemons measure the offsets they were given, and certificates
refused for a clock say so (``clocks``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.chaos import make_plan, run_plan, table
from deploy.cluster import Cluster, ClusterError, faketime_library

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.process,
    pytest.mark.slow,
    pytest.mark.skipif(
        faketime_library() is None,
        reason="skewed clocks need Debian's faketime (apt-get install faketime; .ci/run does)",
    ),
]


def test_every_daemon_on_its_own_clock_loses_nothing(tmp_path) -> None:
    """Four super-peers and four peer daemons, each clock drawn within ten minutes either way;
    peers subscribe, withdraw and subscribe again while they publish throughout; peers move
    between access points, an access point is killed and restarted, and daemons are restarted
    under other clocks: 0 lost, 0 duplicated, 0 unexpected, and every offset a daemon measured
    is the one it was given."""
    plan = make_plan(
        seed=39, duration=50, superpeers=4, peers=4, faults=["move", "kill", "skew"], rate=5,
        skews=600.0,
    )  # fmt: skip
    injected = [*plan["clocks"]["superpeers"].values(), *plan["clocks"]["peers"].values()]
    assert max(injected) - min(injected) > 300, "the seed draws clocks far apart"
    report = run_plan(plan, settle=2.0, directory=tmp_path / "data")
    summary = table(report)
    assert report["crashes"] == [] and report["quiet"], summary
    totals = report["totals"]
    assert totals["owed"] > 50, summary
    assert (totals["lost"], totals["duplicated"], totals["unexpected"]) == (0, 0, 0), summary
    clocks = report["clocks"]
    assert len(clocks["measured"]) >= 8, clocks
    assert clocks["largest_difference"] < 0.5, json.dumps(clocks, indent=1)


def test_a_super_peer_ten_minutes_behind_joins(tmp_path) -> None:
    """Certificates are backdated by a day (``crypto.tls.CLOCK_SKEW``): a super-peer whose
    clock is ten minutes behind the CA's accepts them and joins (with five minutes it could
    not)."""
    with Cluster(2, directory=tmp_path, skews={1: -600.0}, trace=False) as cluster:
        status = cluster.status(1)
        assert status["state"] == "member"
        assert status["clock"]["max_clock_offset_seconds"] == 1.0


def test_a_certificate_refused_for_its_dates_says_so_with_both_clocks(tmp_path) -> None:
    """Two days behind, a super-peer finds the others' certificates not yet valid: it cannot
    join, and says why (the certificate's dates and its own clock), not an empty reason."""
    with Cluster(1, directory=tmp_path, trace=False) as cluster:
        cluster.skews[1] = -2 * 86400.0
        with pytest.raises(ClusterError) as refused:
            cluster.add()
    message = str(refused.value)
    assert "not yet valid here (valid from" in message, message
    assert "this host's clock says" in message and "one of the two clocks is wrong" in message
    logged = (tmp_path / "sp0" / "stderr.log").read_text()
    assert "refused this host's certificate" in logged, logged[-2000:]
    assert "it is valid from" in logged and "this host's clock says" in logged


def test_the_peer_cli_shows_its_clock_offset(tmp_path) -> None:
    with Cluster(1, directory=tmp_path, peers=1, peer_skews={0: 120.0}, trace=False) as cluster:
        directory = cluster.peer_directories[0]
        shown = subprocess.run(
            [sys.executable, "-m", "peer.cli", "status", "--data-dir", str(directory), "--json"],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        offset = json.loads(shown.stdout)["clock_offset_seconds"]
        assert offset is not None and abs(offset + 120.0) < 1.0, offset
        words = subprocess.run(
            [sys.executable, "-m", "peer.cli", "status", "--data-dir", str(directory)],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert "s ahead of the access point's" in words.stdout, words.stdout
