"""Structured logs with held-back repeats on a real super-peer flooded with connections it must
refuse: one log line, and the counters (the formatters and the filter alone: tests/daemonlog)."""

import json
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from deploy.cluster import free_ports


@pytest.mark.process
def test_a_flood_of_refused_connections_is_counted_and_logged_once(tmp_path):
    port, http = free_ports(2)
    (tmp_path / "sp.toml").write_text(
        '[limits]\nmax_unidentified_per_address = 4\n[logging]\nformat = "json"\n'
        "repeat_seconds = 60.0\n[collector]\nyoung_objects = 12345\n"
    )
    command = [
        sys.executable, "-m", "superpeer.cli", "run", "--listen", f"127.0.0.1:{port}",
        "--data-dir", str(tmp_path / "sp"), "--no-tls", "--http", str(http),
        "--config", str(tmp_path / "sp.toml"),
    ]  # fmt: skip
    stderr = (tmp_path / "stderr.log").open("wb")
    daemon = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr)
    held, flood = [], 300
    try:
        assert daemon.stdout is not None
        while b"listening on" not in (line := daemon.stdout.readline()):
            assert line, (tmp_path / "stderr.log").read_text()
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        for _ in range(flood):
            with socket.create_connection(("127.0.0.1", port)) as refused:
                assert refused.recv(100) == b""  # closed at once
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
    finally:
        for sock in held:
            sock.close()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        daemon.stdout.close()
        stderr.close()
    assert f"superpeer_refused_connections_total {float(flood)}" in metrics
    assert f"superpeer_log_lines_suppressed_total {float(flood - 1)}" in metrics
    lines = [json.loads(x) for x in (tmp_path / "stderr.log").read_text().splitlines()]
    [frozen, *_] = [x for x in lines if x.get("event") == "state_frozen"]  # then after long passes
    assert int(frozen["objects"]) > 10_000, "what the process held once a member, frozen"
    assert int(frozen["young_objects"]) == 12345, "the youngest pass, as configured"
    refused = [x for x in lines if x.get("event") == "connection_refused"]
    assert len(refused) == 1
    assert (
        refused[0]["level"] == "WARNING" and refused[0]["reason"] == "max_unidentified_per_address"
    )
