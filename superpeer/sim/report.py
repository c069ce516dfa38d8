"""The report of a workload's run: what every peer got, what was refused, what the backbone
carried. The simulator (``Simulation.report``) and the replay tool on real daemons
(``deploy.replay``) make the same one, so that their JSON can be compared key by key (the
replay tests and ``python -m deploy.replay`` do)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

HEARTBEAT = "sp.heartbeat"
"""Not counted among backbone messages: it says only that a link is alive."""


@dataclass(frozen=True, kw_only=True)
class RunReport:
    deliveries: dict[str, list[str]]
    """Per peer, the publications it was notified of (sorted, once each)."""
    changes: dict[str, list[list[str]]]
    """Per peer, ``[publication, kind]`` per notification, in the order received."""
    errors: list[dict]
    fetched: dict[str, list[str]]
    locations: dict[str, dict[str, str | None]]
    messages: Counter[str]
    """Messages per kind (peer links and backbone)."""
    message_bytes: Counter[str]
    hops: Counter[int]
    superpeers: int
    peers: int
    operations: int
    redeliveries: int
    more_totals: dict[str, float] = field(default_factory=dict)
    """What only one runner knows (the simulated seconds, what is kept offline)."""

    def as_dict(self) -> dict[str, object]:
        backbone = sum(
            count
            for kind, count in self.messages.items()
            if kind.startswith("sp.") and kind != HEARTBEAT
        )
        return {
            "deliveries": self.deliveries,
            "changes": self.changes,
            "errors": self.errors,
            "fetched": self.fetched,
            "messages": {
                kind: {"count": self.messages[kind], "bytes": self.message_bytes[kind]}
                for kind in sorted(self.messages)
            },
            "hops": {str(h): self.hops[h] for h in sorted(self.hops)},
            "locations": {
                name: dict(sorted(found.items())) for name, found in sorted(self.locations.items())
            },
            "totals": {
                "superpeers": self.superpeers,
                "peers": self.peers,
                "operations": self.operations,
                "messages": sum(self.messages.values()),
                "bytes": sum(self.message_bytes.values()),
                "backbone_messages": backbone,
                "deliveries": sum(len(v) for v in self.deliveries.values()),
                **self.more_totals,
                "redeliveries": self.redeliveries,
                "errors": len(self.errors),
            },
        }
