"""The Prometheus exposition of a super-peer's own figures: every figure the table names is in
the status report where the table says (a renamed status key would silently export 0)."""

from prometheus_client import generate_latest

from superpeer.metrics import _STATUS_COUNTERS, _STATUS_GAUGES, Metrics
from superpeer.sim import Simulation


def _at(status: dict, path: tuple[str, ...]) -> object:
    value: object = status
    for key in path:
        assert isinstance(value, dict) and key in value, f"{path} is not in the status report"
        value = value[key]
    return value


def test_every_status_figure_exported_exists_and_is_a_number():
    simulation = Simulation(2)
    node = simulation.nodes["sp0"]
    status = node.status(simulation.now)
    paths = [path for _, path, _ in _STATUS_COUNTERS] + [path for _, _, path in _STATUS_GAUGES]
    for path in paths:
        if path in (
            ("backbone_in_flight",),
            ("peer_queue_frames",),
            ("connections",),
            ("read_turns",),
            ("store", "checkpoints_failed"),
        ):
            continue  # the daemon adds these (links, connections, reads and store are its own)
        assert isinstance(_at(status, path), int | float), path


def test_the_recovery_figures_reach_the_exposition():
    status = {
        "uptime_seconds": 1.0,
        "catchups": {"asked": 2, "recovered": 3, "replayed": 5, "late": 7},
        "handovers": {"forwarded": 11},
        "rendezvous": {"files": 1, "bytes": 4096, "statistics": {"completed": 13}},
        "locating": {"waiting": 1, "statistics": {"direct": 17, "fallbacks": 19}},
    }
    text = generate_latest(Metrics(lambda: status).registry()).decode()
    for line in (
        "superpeer_notifications_replayed_total 5.0",
        "superpeer_notifications_late_total 7.0",
        "superpeer_notifications_forwarded_total 11.0",
        "superpeer_rendezvous_completed_total 13.0",
        "superpeer_lookups_fallbacks_total 19.0",
        "superpeer_rendezvous_bytes 4096.0",
        "superpeer_lookups_waiting 1.0",
    ):
        assert line in text, line
