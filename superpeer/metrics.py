"""Prometheus metrics of one super-peer daemon.

Counters come from what the daemon already handles: every trace record the node emits (the same
records the trace log writes, so ``/metrics`` and the trace log agree by construction, with or
without trace files) and every notification it hands to a peer connection (the latency histogram:
the origin's ``published_at`` to the moment the access point sends it to the peer, both hybrid
times: ``clocks``). Counting is a
dictionary increment on the daemon's thread; the metric families are built only when scraped
(a ``prometheus_client`` custom collector), together with the gauges, read from the daemon's
status report at that moment. No socket is read in the protocol core for any of it.

Naming follows Prometheus conventions: ``superpeer_`` prefix, ``_total`` counters, ``_bytes``
and ``_seconds`` units, states as labels.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from superpeer.trace import TraceRecord
from wire import messages as m

LATENCY_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 3600.0, 86400.0,
)  # fmt: skip
"""Upper bounds (seconds): online deliveries take milliseconds, kept ones hours or days."""

_NOTIFICATION_EVENTS: Final = {
    "deliver": "delivered",
    "offline": "kept",
    "flush": "flushed",
    "redeliver": "redelivered",
}
_TOPOLOGY_EVENTS: Final = ("member", "neighbour_failed", "repair", "departure", "rejoin")


class Histogram:
    """Cumulative-on-read bucket counts; ``observe`` is one bisect and two additions."""

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, int]]:
        running, out = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


class Metrics:
    """What one daemon counts. ``status`` returns the daemon's status report (``superpeer
    status --json``) plus ``peer_queue_frames``; ``suppressed_logs`` the log lines held back."""

    def __init__(
        self,
        status: Callable[[], Mapping[str, Any]],
        *,
        suppressed_logs: Callable[[], int] = lambda: 0,
    ) -> None:
        self.messages: Counter[tuple[str, str]] = Counter()
        self.message_bytes: Counter[tuple[str, str]] = Counter()
        self.events: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.latency = {"online": Histogram(), "kept": Histogram()}
        self._status = status
        self._suppressed_logs = suppressed_logs
        self._handed: m.Notify | None = None
        self._handed_at = 0.0

    # -- counting (the daemon's hot path) --------------------------------------------------------
    def record(self, record: TraceRecord) -> None:
        event = record.event
        if event in ("send", "receive"):
            key = (event, record.kind)
            self.messages[key] += 1
            self.message_bytes[key] += record.bytes
            return
        self.events[event] += 1
        if event == "drop":
            self.dropped[record.kind] += 1
        elif event == "refused":
            self.refused[record.kind] += 1
        elif event in ("deliver", "flush"):
            handed = self._handed
            if handed is not None and handed.publication.id == record.pub:
                delay = max(0.0, self._handed_at - handed.published_at)
                self.latency["online" if event == "deliver" else "kept"].observe(delay)
            self._handed = None

    def to_peer(self, message: object, now: float) -> None:
        """A message the daemon is about to queue for a peer connection; a notification's
        latency is counted once its trace record says whether it is a first delivery."""
        if isinstance(message, m.Notify):
            self._handed, self._handed_at = message, now

    # -- scraping --------------------------------------------------------------------------------
    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return registry

    def families(self) -> Iterator[Metric]:
        yield from self._counters()
        status = self._status()
        yield from _status_counters(status)
        yield from _gauges(status)
        suppressed = CounterMetricFamily(
            "superpeer_log_lines_suppressed",
            "Warnings held back as repeats of the same kind within the repeat interval",
        )
        suppressed.add_metric([], self._suppressed_logs())
        yield suppressed

    def _counters(self) -> Iterator[Metric]:
        messages = CounterMetricFamily(
            "superpeer_messages",
            "Messages sent and received, per wire kind (trace send/receive records)",
            labels=["direction", "kind"],
        )
        sizes = CounterMetricFamily(
            "superpeer_message_bytes",
            "Bytes of messages on the wire (msgpack), per direction and kind",
            labels=["direction", "kind"],
        )
        for (event, kind), count in sorted(self.messages.items()):
            direction = "sent" if event == "send" else "received"
            messages.add_metric([direction, kind], count)
            sizes.add_metric([direction, kind], self.message_bytes[event, kind])
        yield messages
        yield sizes
        publications = CounterMetricFamily(
            "superpeer_publications", "Publications of local peers accepted as their origin"
        )
        publications.add_metric([], self.events["publish"])
        yield publications
        for event, name in _NOTIFICATION_EVENTS.items():
            family = CounterMetricFamily(
                f"superpeer_notifications_{name}",
                f"Notifications {name} (trace '{event}' records)",
            )
            family.add_metric([], self.events[event])
            yield family
        topology = CounterMetricFamily(
            "superpeer_topology_events",
            "Changes of the cube seen here: joined, neighbour failed, repaired, departure, rejoin",
            labels=["event"],
        )
        for event in _TOPOLOGY_EVENTS:
            topology.add_metric([event], self.events[event])
        yield topology
        for name, counts, what in (
            ("superpeer_dropped_messages", self.dropped, "Messages discarded, per kind"),
            ("superpeer_refused_requests", self.refused, "Peer requests refused, per kind"),
        ):
            family = CounterMetricFamily(name, what, labels=["kind"])
            for kind, count in sorted(counts.items()):
                family.add_metric([kind], count)
            yield family
        latency = HistogramMetricFamily(
            "superpeer_notification_latency_seconds",
            "Publication at its origin to hand-over to the subscriber here;"
            " delivery=kept: held for a detached peer first",
            labels=["delivery"],
        )
        for delivery, histogram in self.latency.items():
            latency.add_metric([delivery], histogram.buckets(), histogram.total)
        yield latency


class _Collector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.families()


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, text)
    family.add_metric([], value)
    return family


def _gauge(name: str, text: str, value: float, labels: Mapping[str, str] | None = None) -> Metric:
    family = GaugeMetricFamily(name, text, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), value)
    return family


_STATUS_COUNTERS: Final = (
    ("superpeer_authentication_failures", ("auth_failures",),
     "Failed TLS handshakes, certificates and identifications"),
    ("superpeer_frame_violations", ("violations",),
     "Malformed, oversized, unknown or out-of-order frames (the connection was closed)"),
    ("superpeer_refused_connections", ("refused_connections",),
     "Connections refused at admission (too many unidentified from one address)"),
    ("superpeer_read_turns", ("read_turns",),
     "Times the rest of a peer's read waited: for the other connections (read_slice_seconds) "
     "or for the peer's publication rate"),
    ("superpeer_failures_detected", ("failures_detected",), "Neighbours found silent"),
    ("superpeer_repairs", ("repairs",), "Places of failed super-peers closed"),
    ("superpeer_catchups_asked", ("catchups", "asked"),
     "Catch-ups asked of origins (after repairs, restarts, unanswered handovers)"),
    ("superpeer_catchups_asked_again", ("catchups", "asked_again"),
     "Catch-up requests not answered in time, asked again (of the copies, if the origin is gone)"),
    ("superpeer_notifications_recovered", ("catchups", "recovered"),
     "Notifications that catch-ups and handovers brought and were new here"),
    ("superpeer_notifications_replayed", ("catchups", "replayed"),
     "Notifications this origin sent again for subscriptions that reached it late"),
    ("superpeer_notifications_late", ("catchups", "late"),
     "Notifications routed or delivered for subscriptions retracted after their publication"),
    ("superpeer_gap_notices", ("catchups", "gap_notices"),
     "Gap notices told to local peers: an origin's log no longer reached back far enough"),
    ("superpeer_log_copies_sent", ("log_copies", "sent"),
     "Publication log entries this origin sent a neighbour to copy before the Ack"),
    ("superpeer_log_copies_kept", ("log_copies", "kept"),
     "Neighbours' publication log entries copied here"),
    ("superpeer_unreplicated_acks", ("log_copies", "unreplicated"),
     "Publications acknowledged with the origin's copy alone (no neighbour answered in time)"),
    ("superpeer_log_copies_made_late", ("log_copies", "copied_late"),
     "Log entries acknowledged with the origin's copy alone, copied to a neighbour since"),
    ("superpeer_log_copies_made_again", ("log_copies", "copied_again"),
     "Log entries copied again to a neighbour after the holder of their copy was lost"),
    ("superpeer_notifications_forwarded", ("handovers", "forwarded"),
     "Notifications forwarded to peers that moved to another access point"),
    ("superpeer_rendezvous_completed", ("rendezvous", "statistics", "completed"),
     "Resource files received whole and verified for this super-peer's requesters"),
    ("superpeer_rendezvous_corrupted", ("rendezvous", "statistics", "corrupted"),
     "Resource files refused: size or SHA-256 did not match the notification"),
    ("superpeer_rendezvous_expired", ("rendezvous", "statistics", "expired"),
     "Rendezvous dropped after their retention time"),
    ("superpeer_store_checkpoints_failed", ("store", "checkpoints_failed"),
     "Folds whose checkpoint could not copy the whole write-ahead log (a full disk, a reader):"
     " the log grows until one does"),
    ("superpeer_lookups_direct", ("locating", "statistics", "direct"),
     "Look-ups sent to the access point a notification named"),
    ("superpeer_lookups_fallbacks", ("locating", "statistics", "fallbacks"),
     "Direct look-ups that fell back to the network-wide look-up"),
)  # fmt: skip
"""Counters the node keeps itself (name, path in its status report, help)."""


def _status_counters(status: Mapping[str, Any]) -> Iterator[Metric]:
    for name, path, text in _STATUS_COUNTERS:
        yield _counter(name, text, _figure(status, path))
    limited = CounterMetricFamily(
        "superpeer_rate_limited_requests",
        "Peer requests over their peer's rate (superpeer.ratelimit), per kind: publications"
        " slowed down, subscriptions and look-ups refused with the time to ask again",
        labels=["kind"],
    )
    for kind, count in sorted(status.get("rate_limited", {}).items()):
        limited.add_metric([kind], count)
    yield limited
    mail = status.get("mail", {})
    yield _counter(
        "superpeer_notifications_expired",
        "Kept notifications dropped after their retention time or beyond the per-peer cap",
        sum(mail.get("expired", {}).values()),
    )
    yield _counter(
        "superpeer_notifications_acknowledged",
        "Notifications peers acknowledged (written to their inbox)",
        mail.get("acknowledged", 0),
    )


def _figure(status: Mapping[str, Any], path: tuple[str, ...]) -> float:
    """The number at ``path`` in the status report (0 if absent)."""
    value: Any = status
    for key in path:
        value = value.get(key, {}) if isinstance(value, Mapping) else {}
    return value if isinstance(value, int | float) else 0


_STATUS_GAUGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "superpeer_backbone_unacknowledged_messages",
        "Messages sent to super-peers and not acknowledged yet (link queues)",
        ("backbone_in_flight",),
    ),
    (
        "superpeer_peer_queue_frames",
        "Frames waiting to be written to peer connections",
        ("peer_queue_frames",),
    ),
    ("superpeer_connections", "Open peer connections", ("connections",)),
    (
        "superpeer_log_copies_owed",
        "Log entries acknowledged with the origin's copy alone and not copied since",
        ("log_copies", "owed"),
    ),
    (
        "superpeer_log_copy_spans_to_copy_again",
        "Spans of this origin's log entries whose copy's holder was lost, not copied again yet",
        ("log_copies", "spans_to_copy_again"),
    ),
    (
        "superpeer_subscriptions",
        "Subscriptions held (from local peers and neighbours)",
        ("subscriptions", "held"),
    ),
    (
        "superpeer_poset_nodes",
        "Distinct subscriptions in the covering poset",
        ("subscriptions", "distinct"),
    ),
    (
        "superpeer_advertisement_elements",
        "Advertisement elements in the routing indices",
        ("advertisements", "elements"),
    ),
    (
        "superpeer_advertisement_origins",
        "Super-peers whose advertisements are held",
        ("advertisements", "origins"),
    ),
    (
        "superpeer_rendezvous_files",
        "Resource files kept or being received in the rendezvous directory",
        ("rendezvous", "files"),
    ),
    (
        "superpeer_rendezvous_bytes",
        "Bytes the rendezvous directory holds",
        ("rendezvous", "bytes"),
    ),
    (
        "superpeer_rendezvous_max_bytes",
        "The rendezvous directory's quota",
        ("rendezvous", "max_bytes"),
    ),
    (
        "superpeer_rendezvous_waiting_for_owners",
        "Rendezvous requests waiting for an offline owner to come back",
        ("rendezvous", "waiting_for_owners"),
    ),
    (
        "superpeer_lookups_waiting",
        "Direct look-ups waiting for their answer",
        ("locating", "waiting"),
    ),
    (
        "superpeer_schema_axioms",
        "RDFS axioms publications are entailed under (every origin's and the local peers')",
        ("advertisements", "schema_axioms"),
    ),
)
"""Gauges read straight from one figure of the status report (its path there; 0 if absent)."""


def _gauges(status: Mapping[str, Any]) -> Iterator[Metric]:
    yield _gauge(
        "superpeer_info",
        "This super-peer (value 1)",
        1,
        {"node": str(status.get("node")), "address": str(status.get("address"))},
    )
    member = status.get("state") == "member"
    yield _gauge("superpeer_member", "1 while a member of the cube", int(member))
    yield _gauge("superpeer_uptime_seconds", "Since the daemon started", status["uptime_seconds"])
    yield _gauge("superpeer_cube_dimension", "Dimension of the cube", status.get("dimension", 0))
    yield _gauge("superpeer_positions", "Cube positions held", len(status.get("positions", ())))
    neighbours = GaugeMetricFamily(
        "superpeer_neighbour_up",
        "1 when the link to the neighbour is connected and the neighbour is not suspected",
        labels=["neighbour"],
    )
    silence = GaugeMetricFamily(
        "superpeer_neighbour_silence_seconds",
        "Since the neighbour was last heard from",
        labels=["neighbour"],
    )
    states: Counter[str] = Counter({"up": 0, "connecting": 0, "suspected": 0})
    links = status.get("links", {})
    for node, link in status.get("neighbours", {}).items():
        state = neighbour_state(link, links.get(node))
        states[state] += 1
        neighbours.add_metric([node], int(state == "up"))
        silence.add_metric([node], link["silent_seconds"])
    yield neighbours
    yield silence
    by_state = GaugeMetricFamily("superpeer_neighbours", "Neighbours per state", labels=["state"])
    for state, count in sorted(states.items()):
        by_state.add_metric([state], count)
    yield by_state
    peers = status.get("peers", {})
    attached = GaugeMetricFamily("superpeer_peers", "Local peers per state", labels=["state"])
    attached.add_metric(["attached"], len(peers.get("attached", ())))
    attached.add_metric(["detached"], len(peers.get("detached", ())))
    yield attached
    mail = status.get("mail", {})
    yield _gauge(
        "superpeer_outbox_notifications",
        "Notifications kept for peers (durable outboxes), in all",
        sum(mail.get("kept", {}).values()),
    )
    yield _gauge(
        "superpeer_outbox_peers", "Peers with a non-empty outbox", len(mail.get("kept", {}))
    )
    yield _gauge(
        "superpeer_unacknowledged_notifications",
        "Notifications sent to peers and not acknowledged yet",
        sum(mail.get("unacknowledged", {}).values()),
    )
    for name, text, path in _STATUS_GAUGES:
        yield _gauge(name, text, _figure(status, path))
    yield from _clock_gauges(status.get("clock", {}))


def _clock_gauges(clock: Mapping[str, Any]) -> Iterator[Metric]:
    """The clocks the node measured (``clocks``): each neighbour's offset, the largest of the
    attached peers', hybrid time's lead over this node's wall clock, the correction its
    neighbours' clocks give its own (rule 0)."""
    offsets = GaugeMetricFamily(
        "superpeer_clock_offset_seconds",
        "The neighbour's wall clock minus this super-peer's, measured over heartbeats",
        labels=["neighbour"],
    )
    for node, measured in sorted(clock.get("neighbours", {}).items()):
        offsets.add_metric([node], measured["offset"])
    yield offsets
    largest = clock.get("largest_peer_offset") or {}
    yield _gauge(
        "superpeer_peer_clock_offset_max_seconds",
        "The attached peer clock furthest from this super-peer's (its offset, signed; 0: none)",
        largest.get("offset", 0.0),
    )
    yield _gauge(
        "superpeer_hybrid_clock_lead_seconds",
        "How far hybrid time runs ahead of this super-peer's wall clock (negative: behind it)",
        clock.get("hybrid_lead_seconds", 0.0),
    )
    correction = clock.get("correction_seconds")
    yield _gauge(
        "superpeer_clock_correction_seconds",
        "What this super-peer adds to its wall clock, from its neighbours' (NaN: not measured yet)",
        math.nan if correction is None else correction,
    )
    yield _gauge(
        "superpeer_clocks_beyond_bound",
        "Clocks measured further off than max_clock_offset_seconds",
        len(clock.get("beyond_bound", ())),
    )


def neighbour_state(neighbour: Mapping[str, Any], link: Mapping[str, Any] | None) -> str:
    """``suspected`` (silent too long), ``up`` (its link is connected) or ``connecting``."""
    if neighbour.get("suspected"):
        return "suspected"
    return "up" if link is not None and link.get("connected") else "connecting"
