"""bench.transfer on real daemons (a smoke test): a small relayed fetch prints its rate beside
`cat`'s and each daemon's CPU, and the bench leaves nothing behind (its file, the copies the
owner, the access points and the requester make, the stores: some 400 MB a run at the default
size, which each run used to leave in the temporary directory)."""

import tempfile
from pathlib import Path

import pytest

from bench.transfer import main


@pytest.mark.slow
def test_a_small_relayed_fetch_is_measured_and_leaves_nothing_behind(capsys):
    # in the temporary directory itself: the daemons' control sockets need its short path
    before = set(Path(tempfile.gettempdir()).glob("bench-transfer-*"))
    assert main(["--megabytes", "1", "--superpeers", "2"]) == 0
    printed = capsys.readouterr().out
    assert "fetch (owner online, relayed)" in printed
    assert "CPU seconds during the fetch: sp0" in printed
    assert set(Path(tempfile.gettempdir()).glob("bench-transfer-*")) == before
