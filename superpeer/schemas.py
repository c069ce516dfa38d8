"""The RDFS schemas a super-peer knows (seed 000): its own peers', and every origin's.

A peer publishes a schema (``peer publish-schema``, ``wire.messages.PublishSchema``) to its
access point, which keeps the union of what each of its peers published (durable in the store,
restored after a restart, handed on with an adoption) and announces the union of its peers'
axioms with its advertisement elements (``Elements.axioms``): schemas spread exactly as
advertisements do, down the origin's tree, to every super-peer, on every new edge of a tree (a
newcomer, a restarted member), and are forgotten with their origin. A peer's axioms go when the
peer leaves, like its advertisement.

The schema a super-peer entails with is the union of everything it knows: its peers' axioms and
every origin's. It entails its peers' publications under it at their entry, and announces its
own advertisement elements closed under it (``qel.entailment``), so what it publishes and what it
says it may publish always agree, whatever other super-peers know yet.

Bounds (``SchemaLimits``): the axioms one peer may publish here, and the axioms this super-peer
will know in all (its peers' and every origin's, as far as it knows them when a peer asks).
Beyond either, the request is refused with the reason and nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from qel.axioms import Axiom
from qel.entailment import Schema


class SchemaRefused(ValueError):
    """A peer's schema beyond a bound (its fault): refused, nothing changes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaLimits:
    max_axioms_per_peer: int = 10_000
    """Axioms one peer may have published at its access point (the union of its schemas)."""
    max_axioms_total: int = 100_000
    """Axioms a super-peer accepts from its peers while it knows this many in all."""


class SchemaBook:
    """Axioms per local peer and per origin, and the ``Schema`` of their union (rebuilt only
    when the union changes)."""

    def __init__(self, limits: SchemaLimits | None = None) -> None:
        self.limits = limits or SchemaLimits()
        self._peers: dict[str, frozenset[Axiom]] = {}
        self._origins: dict[str, frozenset[Axiom]] = {}
        self._schema = Schema()

    @property
    def schema(self) -> Schema:
        return self._schema

    def of_peer(self, peer: str) -> frozenset[Axiom]:
        return self._peers.get(peer, frozenset())

    def local(self) -> frozenset[Axiom]:
        """What this super-peer announces as an origin: its peers' axioms."""
        return frozenset().union(*self._peers.values())

    def origins(self) -> list[str]:
        return sorted(self._origins)

    def of_origin(self, origin: str) -> frozenset[Axiom]:
        return self._origins.get(origin, frozenset())

    def publish(self, peer: str, axioms: frozenset[Axiom]) -> bool:
        """Adds ``axioms`` to ``peer``'s; whether the schema changed. ``SchemaRefused`` beyond a
        bound."""
        held = self.of_peer(peer)
        union = held | axioms
        if len(union) > self.limits.max_axioms_per_peer:
            raise SchemaRefused(
                f"your schemas would hold {len(union)} axioms, more than max_axioms_per_peer "
                f"({self.limits.max_axioms_per_peer})"
            )
        total = len(self._schema.axioms | axioms)
        if total > self.limits.max_axioms_total:
            raise SchemaRefused(
                f"this super-peer would know {total} schema axioms, more than max_axioms_total "
                f"({self.limits.max_axioms_total})"
            )
        if union == held:
            return False
        self._peers[peer] = union
        return self._rebuild()

    def set_peer(self, peer: str, axioms: frozenset[Axiom]) -> bool:
        """``peer``'s axioms as they were (a change taken back); whether the schema changed."""
        return self._set(self._peers, peer, axioms)

    def forget_peer(self, peer: str) -> bool:
        return self._set(self._peers, peer, frozenset())

    def set_origin(self, origin: str, axioms: frozenset[Axiom]) -> bool:
        """What ``origin`` announced now; whether the schema changed."""
        return self._set(self._origins, origin, axioms)

    def _set(self, table: dict[str, frozenset[Axiom]], key: str, axioms: frozenset[Axiom]) -> bool:
        if axioms:
            table[key] = axioms
        elif table.pop(key, None) is None:
            return False
        return self._rebuild()

    def _rebuild(self) -> bool:
        union = self.local().union(*self._origins.values())
        if union == self._schema.axioms:
            return False
        self._schema = Schema(union)
        return True
