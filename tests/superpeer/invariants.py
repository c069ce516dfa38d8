"""Routing state against the truth, once a simulated network is quiet: what a network built from
scratch in the current shape would hold.

"Exactly the same state" cannot be asked of subscriptions: with SIENA's covering, which
subscription a super-peer forwards and which one it suppresses depends on the order they came in,
so two correct networks differ there. What must hold whatever the order, and what a from-scratch
build satisfies:

1. advertisements: every member indexes exactly the live origins' current elements (its own
   peers' for itself; another origin's closed under the RDFS axioms that origin knows), each
   origin at its current root position, and knows exactly the live origins' schema axioms;
2. every subscription of a local peer is in its access point's poset, and nothing else is held
   for a local peer;
3. the two ends of every link agree: a subscription one member marks as sent to a neighbour for
   some origins is held there, from it, toward exactly those origins, and the other way round;
4. nothing is sent that is not needed: the origins a subscription was sent toward through a
   neighbour all have that neighbour as their next hop (no route left over from an older shape);
5. nothing needed is missing: for every origin a subscription must travel toward, the next hop
   holds it, or one covering it, for that origin.
"""

from __future__ import annotations

from superpeer.core import PEER, SUPERPEER, Source, SuperPeerCore
from superpeer.sim import Simulation


def check_routing(simulation: Simulation) -> None:
    cores = simulation.cores
    truth = {
        node_id: (
            core.schemas.schema.close(core.ads.elements(node_id)),
            core.view.root_position,
            core.schemas.local(),
        )
        for node_id, core in cores.items()
    }
    for node_id, core in cores.items():
        _advertisements(node_id, core, truth)
        _local_subscriptions(simulation, node_id, core)
        _links(node_id, core, cores)


def _advertisements(node_id: str, core: SuperPeerCore, truth: dict) -> None:
    held = {o: core.ads.elements(o) for o in core.ads.origins() if o != node_id}
    expected = {o: elements for o, (elements, *_) in truth.items() if elements and o != node_id}
    if core.config.summarise_values_above is None:
        assert held == expected, f"{node_id} holds advertisements {held}, not {expected}"
    axioms = {origin: core.schemas.of_origin(origin) for origin in core.schemas.origins()}
    known = {o: schema for o, (*_, schema) in truth.items() if schema and o != node_id}
    assert axioms == known, f"{node_id} knows the schemas {axioms}, not {known}"
    for origin in held:
        if origin != node_id:
            assert core.origin_positions.get(origin) == truth[origin][1], (
                f"{node_id} routes toward {origin} at {core.origin_positions.get(origin)}, "
                f"which is at {truth[origin][1]}"
            )


def _local_subscriptions(simulation: Simulation, node_id: str, core: SuperPeerCore) -> None:
    store = simulation.stores[node_id]
    for node in core.poset:
        for source in node.sources:
            if source.kind == PEER:
                assert source.name in store.local_peers(), (
                    f"{node_id} holds a subscription of {source.name}, not one of its peers"
                )
    node = simulation.nodes[node_id]
    for peer in store.local_peers():
        state = store.local_state(peer)
        stored = set(state.subscriptions)
        held = set(core.subscriptions_of(peer))
        assert held == stored, f"{node_id}: {peer} subscribed {stored}, the poset holds {held}"
        untimed = {sid for sid in held if sid not in node._subscribed_at.get(peer, {})}
        assert not untimed, f"{node_id}: {peer}'s {sorted(untimed)} have no activation time"
        unstored = held - set(state.subscribed_at)
        assert not unstored, f"{node_id}: {peer}'s {sorted(unstored)} have no stored activation"


def _links(node_id: str, core: SuperPeerCore, cores: dict[str, SuperPeerCore]) -> None:
    for node in core.poset:
        wanted = core._destinations(node)
        for destination, labels in node.sent.items():
            assert labels <= wanted.get(destination, set()), (
                f"{node_id} sent {node.subscription} to {destination} toward "
                f"{sorted(labels - wanted.get(destination, set()))}, which it no longer needs"
            )
            other = cores.get(destination)
            assert other is not None, f"{node_id} sent to {destination}, not a member"
            held = other.poset.node_of(Source(SUPERPEER, node_id), node.wire_id)
            assert held is not None, f"{destination} lost {node.wire_id} from {node_id}"
            toward = other._toward.get((Source(SUPERPEER, node_id), node.wire_id))
            assert toward == labels, (
                f"{destination} holds {node.wire_id} from {node_id} toward {toward}, "
                f"{node_id} sent it toward {labels}"
            )
        for destination, labels in wanted.items():
            missing = labels - core.poset.sent_labels(node, destination)
            assert not missing, (
                f"{node_id} never sent {node.subscription} (or one covering it) to "
                f"{destination} toward {sorted(missing)}"
            )
        for source, ids in node.sources.items():
            if source.kind != SUPERPEER:
                continue
            sender = cores.get(source.name)
            assert sender is not None, f"{node_id} holds subscriptions of {source.name}, gone"
            for sid in ids:
                sent = [n for n in sender.poset if n.wire_id == sid]
                assert sent and node_id in sent[0].sent, (
                    f"{node_id} holds {sid} from {source.name}, which did not send it here"
                )
