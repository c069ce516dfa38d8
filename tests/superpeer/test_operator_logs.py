"""Structured logs with held-back repeats: the filter and formatters alone, then a real daemon
flooded with connections it must refuse (one log line, and the counters)."""

import json
import logging
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from deploy.cluster import free_ports
from superpeer.logs import JsonFormatter, RepeatFilter, TextFormatter, configure, fields_of


def record(message: str, *args: object, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("superpeer", level, __file__, 1, message, args, None)


def test_a_flood_of_one_warning_is_one_line_per_interval_saying_how_many_were_held_back():
    now = [100.0]
    repeats = RepeatFilter(10.0, clock=lambda: now[0])
    template = "event=violation sender=%s reason=%r"
    passed = [r for k in range(1000) if repeats.filter(r := record(template, f"x{k}", "bad"))]
    assert len(passed) == 1
    assert repeats.suppressed == 999
    now[0] += 10.0
    line = record(template, "late", "bad")
    assert repeats.filter(line)
    assert TextFormatter().format(line).endswith("reason='bad' repeated=999")
    assert repeats.filter(record("event=other_warning"))  # another kind is not held back
    assert repeats.filter(record(template, "x", "y", level=logging.INFO))  # not a warning


def test_information_is_never_held_back_and_kinds_are_bounded():
    repeats = RepeatFilter(10.0, clock=lambda: 0.0, max_kinds=2)
    assert all(repeats.filter(record("event=started", level=logging.INFO)) for _ in range(5))
    for name in ("a", "b", "c"):
        assert repeats.filter(record(f"event={name}"))
    assert repeats.filter(record("event=a"))  # forgotten (the least recently seen), so shown
    assert not repeats.filter(record("event=c"))
    with pytest.raises(ValueError, match="repeat_seconds"):
        RepeatFilter(0)


def test_json_lines_carry_every_key_value_of_the_message_as_a_field():
    line = record("event=auth_failure who=%s remote=%s reason=%r", "pk1-abc", "10.0.0.1:5", "a b")
    entry = json.loads(JsonFormatter().format(line))
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "superpeer"
    assert (entry["event"], entry["who"], entry["reason"]) == ("auth_failure", "pk1-abc", "a b")
    assert entry["message"] == "event=auth_failure who=pk1-abc remote=10.0.0.1:5 reason='a b'"
    assert fields_of('k="quoted value" n=3') == {"k": "quoted value", "n": "3"}


def test_a_bad_log_format_or_level_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        configure(form="xml")
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        configure(level="loud")


@pytest.mark.process
def test_a_flood_of_refused_connections_is_counted_and_logged_once(tmp_path):
    port, http = free_ports(2)
    (tmp_path / "sp.toml").write_text(
        '[limits]\nmax_unidentified_per_address = 4\n[logging]\nformat = "json"\n'
        "repeat_seconds = 60.0\n"
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
    refused = [x for x in lines if x.get("event") == "connection_refused"]
    assert len(refused) == 1
    assert (
        refused[0]["level"] == "WARNING" and refused[0]["reason"] == "max_unidentified_per_address"
    )
