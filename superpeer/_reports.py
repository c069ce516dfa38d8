"""What ``superpeer status``, ``peers`` and ``subscriptions`` show, and operators' requests
(``forget-peer``): read-only reports over the node's state, apart from forgetting a peer."""

from __future__ import annotations

from collections import Counter

from hypercup import NodeState
from superpeer._node_base import (
    NodeBase,
    log,
)


class Reports(NodeBase):
    """The operator's view of the node."""

    def forget_peer(self, public_id: str) -> str | None:
        """The operator's way out of ``already_registered``: drop the registration (the peer's
        subscriptions and mail stay). None when done, else why not."""
        if public_id in self._peer_connection:
            return f"peer {public_id} is connected now"
        if not self.store.remove(public_id):
            return f"no peer {public_id} is registered here"
        log.info("event=peer_forgotten peer=%s", public_id)
        return None

    def peer_report(self) -> list[dict[str, object]]:
        """Every peer this node holds something for: attached or not, mail, unacknowledged."""
        counts = self.store.mail_counts()
        waiting = self.mail.unacknowledged()
        names = set(self.store.local_peers()) | set(self.store.registered()) | set(counts)
        if self.core is not None:
            names |= set(self.core.peers)
        report = []
        for peer in sorted(names):
            subscriptions = self.core.subscriptions_of(peer) if self.core is not None else {}
            report.append(
                {
                    "peer": peer,
                    "state": "attached" if peer in self._peer_connection else "detached",
                    "registered": self.store.get(peer) is not None,
                    "subscriptions": len(subscriptions),
                    "mail": counts.get(peer, 0),
                    "unacknowledged": waiting.get(peer, 0),
                    "expired": self.mail.statistics.expired.get(peer, 0),
                    "moved_to": self._moved_away[peer].node if peer in self._moved_away else None,
                }
            )
        return report

    def subscription_report(self, peer: str | None = None) -> list[dict[str, object]]:
        core = self.core
        if core is None:
            return []
        rows = []
        for node in core.poset:
            for source, ids in sorted(node.sources.items()):
                if peer is not None and (source.kind != "peer" or source.name != peer):
                    continue
                for sid in sorted(ids):
                    rows.append(
                        {
                            "source": str(source),
                            "id": sid,
                            "query": str(node.subscription),
                            "sent_to": {d: sorted(o) for d, o in sorted(node.sent.items())},
                        }
                    )
        return rows

    def status(self, now: float) -> dict[str, object]:
        report: dict[str, object] = {
            "node": self.node_id,
            "address": self.address,
            "incarnation": self.incarnation,
            "state": self.topology.state.name.lower(),
            "topology_busy": self.topology.state is NodeState.MEMBER and self.topology.busy(),
            "settling": self.core is not None and self.core.settling(),
            "rerouting": 0 if self.core is None else self.core.rerouting(),
            "waiting": self.waiting_for(),
            "violations": self.statistics.violations,
            "auth_failures": self.statistics.auth_failures,
            "refused_connections": self.statistics.refused_connections,
            "rate_limited": dict(self.rates.limited),
            "failures_detected": self.statistics.failures_detected,
            "repairs": self.statistics.repairs,
            "rejoins": self.statistics.rejoins,
            "backlog": {"waiting": len(self._backlog), "waited": self.statistics.waited},
            "catchups": {
                "asked": self.statistics.catchups_asked,
                "asked_again": self.statistics.catchups_asked_again,
                "served": self.statistics.catchups_served,
                "recovered": self.statistics.recovered,
                "replayed": self.statistics.replayed,
                "gap_notices": self.statistics.gaps,
                "late": self.core.statistics.late if self.core is not None else 0,
            },
            "log_copies": {
                "sent": self.statistics.copies_sent,
                "kept": self.statistics.copies_kept,
                "waiting": self.copies_waiting(),
                "unreplicated": self.statistics.unreplicated,
                "copied_late": self.statistics.copied_late,
                "owed": self.copies_owed(),
                "copied_again": self.statistics.copied_again,
                "spans_to_copy_again": self.copies_to_remake(),
            },
            "handovers": {
                "asked": self.statistics.handovers_in,
                "given": self.statistics.handovers_out,
                "pending": len(self._handover_due),
                "forwarded": self.statistics.forwarded,
            },
            "mail": {
                "kept": self.store.mail_counts(),
                "unacknowledged": self.mail.unacknowledged(),
                "delivered": self.mail.statistics.delivered,
                "stored_offline": self.mail.statistics.kept,
                "flushed": self.mail.statistics.flushed,
                "resent": self.mail.statistics.resent,
                "acknowledged": self.mail.statistics.acknowledged,
                "repeats": self.mail.statistics.repeats,
                "expired": dict(self.mail.statistics.expired),
                "retention_seconds": self.config.retention_seconds,
                "max_kept_per_peer": self.config.max_kept_per_peer,
            },
            "peers": {
                "attached": sorted(self._peer_connection),
                "detached": sorted(
                    (set(self.store.local_peers()) | set(self.core.peers if self.core else ()))
                    - set(self._peer_connection)
                ),
            },
        }
        report["clock"] = self.clock_report(now)
        identity = self.cube_identity()
        report["cube"] = list(identity) if identity is not None else None
        if self.topology.state is NodeState.MEMBER:
            view = self.topology.view()
            report["positions"] = sorted(view.positions)
            report["dimension"] = view.dimension
            report["table"] = {str(p): n for p, n in sorted(view.table.items())}
            report["neighbours"] = {
                n: {
                    "address": self.addresses.get(n),
                    "silent_seconds": round(now - self._last_heard.get(n, now), 3),
                    "suspected": n in self._suspected,
                }
                for n in sorted(view.neighbours())
            }
        core = self.core
        if core is not None:
            stats = core.statistics
            poset = core.poset.statistics()
            report["subscriptions"] = {
                "distinct": poset.nodes,
                "held": poset.sources,
                "sent": poset.sent_nodes,
            }
            report["advertisements"] = {
                "origins": len(core.ads.origins()),
                "elements": core.ads.element_count(),
                "local_elements": len(core.ads.elements(self.node_id)),
                "schema_axioms": len(core.schemas.schema.axioms),
                "local_schema_axioms": len(core.schemas.local()),
            }
            sent = stats.sent + self.statistics.sent
            report["messages"] = {
                "sent": dict(sent),
                "received": dict(
                    self.statistics.received
                    + Counter({k: v for k, v in stats.received.items() if not k.startswith("sp.")})
                ),
                "bytes_sent": dict(stats.bytes_sent + self.statistics.bytes_sent),
                "delivered": self.mail.statistics.delivered,
                "refused": stats.refused,
                "dropped": stats.dropped,
                "repeats": stats.repeats,
            }
            report["rendezvous"] = self.rendezvous.status()
            report["locating"] = self.locator.status()
        return report
