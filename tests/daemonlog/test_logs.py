"""The daemons' structured log alone: held-back repeats, the text and JSON formats."""

import json
import logging

import pytest

from daemonlog import JsonFormatter, RepeatFilter, TextFormatter, configure, fields_of


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
