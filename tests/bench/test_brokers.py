"""bench.brokers drives each system it can run end to end (tiny phases: a smoke test)."""

import argparse
import importlib.util

import pytest

from bench.brokers import (
    Setup,
    Skipped,
    fixed_and_per_delivery,
    measure_row,
    mosquitto_binary,
    per_server_line,
    split_line,
)

pytestmark = pytest.mark.process


def options(**changes: object) -> argparse.Namespace:
    values = {"offered": 200.0, "seconds": 0.3, "burst_seconds": 0.3, "drain": 30.0}
    return argparse.Namespace(**(values | {"data_dir": None, "sync": "full"} | changes))


def check(row: dict[str, object], subscribers: int) -> None:
    assert row["subscribers"] == subscribers
    assert row["burst_notifications"] > 0
    assert row["burst_notifications"] % subscribers == 0  # every subscriber got every one
    assert row["arrived"] == 1.0
    assert row["latency"]["p50_ms"] > 0
    assert row["server_cpu_s_per_10k"] >= 0
    each = row["server_cpu_us_each"]  # the same CPU, per server process and phase
    assert len(each["sustained"]) == len(each["latency"]) == row["server_processes"]
    assert abs(sum(each["sustained"]) / 100 - row["server_cpu_s_per_10k"]) <= 0.01 * len(
        each["sustained"]
    )
    assert per_server_line(row).count(" ") > len(each["sustained"])


def test_one_superpeer_plaintext() -> None:
    row = measure_row(Setup("superpeer-1", False, 2, options()))
    check(row, 2)
    assert row["hops"] == [0]


@pytest.mark.skipif(mosquitto_binary() is None, reason="mosquitto is not installed")
@pytest.mark.skipif(importlib.util.find_spec("paho") is None, reason="paho-mqtt is not installed")
def test_mosquitto_tls() -> None:
    check(measure_row(Setup("mosquitto", True, 2, options())), 2)


@pytest.mark.skipif(importlib.util.find_spec("amqtt") is None, reason="amqtt is not installed")
@pytest.mark.skipif(importlib.util.find_spec("paho") is None, reason="paho-mqtt is not installed")
def test_amqtt_plaintext() -> None:
    check(measure_row(Setup("amqtt", False, 2, options())), 2)


def test_missing_broker_is_skipped_with_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.brokers.mosquitto_binary", lambda: None)
    with pytest.raises(Skipped, match="apt-get install mosquitto"):
        measure_row(Setup("mosquitto", False, 1, options()))


def test_the_cpu_splits_in_a_part_per_publication_and_a_part_per_delivery() -> None:
    """From the rows of 1 and 10 subscribers (us per notification: 292 and 75, the stop 86
    run), what a publication costs whoever takes it and what each delivery adds; a system
    measured with one number of subscribers, or skipped, gives no split."""
    rows = [
        {"system": "superpeer-1", "tls": True, "subscribers": 1, "server_cpu_s_per_10k": 2.92},
        {"system": "superpeer-1", "tls": True, "subscribers": 10, "server_cpu_s_per_10k": 0.75},
        {"system": "amqtt", "tls": True, "subscribers": 1, "server_cpu_s_per_10k": 2.2},
        {"system": "mosquitto", "tls": True, "subscribers": 10, "skipped": "not installed"},
        {"system": "mosquitto", "tls": True, "subscribers": 1, "server_cpu_s_per_10k": 0.5},
    ]
    (split,) = fixed_and_per_delivery(rows)
    assert split["system"] == "superpeer-1" and split["subscribers"] == [1, 10]
    # 292 = F + D, 750 = F + 10 D
    assert (split["fixed_us"], split["per_delivery_us"]) == (241, 51)
    assert "241 us + 51 us per delivery" in split_line(split)
