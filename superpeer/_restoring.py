"""A restarting super-peer's subscriptions, decoded and placed in a poset before it asks to join.

Why. The core that a join creates restores the peers' subscriptions from the store. With 10^5 of
them that took 19 CPU s in one input (decoding, then one bulk insertion), and the runtime hears
nothing from the network meanwhile: the members that had just admitted the node declared it
failed after ``failure_seconds``, it rejoined as a new incarnation, restored again, and so on for
ever (seen on real daemons, ``BENCHMARKS.md``). So the node does that work *before* its join
request leaves, when nobody expects to hear from it, and the core made by the join takes the poset
as it is; what is left at the join is routing, which is cheap while the new core knows no other
origin. A super-peer that is not a member admits no peer, but its store can still lose one in
between: a join may be refused for minutes (the cube still repairs the node's previous
incarnation), and a peer that moved away meanwhile is handed over and then forgotten
(``_forget_moved``). So the join takes the prepared poset only if the store still holds exactly
the subscriptions it was prepared from (``PreparedRestore.still_current``), else it restores
from the store as it is: a stale poset would bring back a forgotten peer's subscriptions, with
no activation time, and ``_deliver`` counts those as owed from the start.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from poset import SubscriptionPoset
from poset.poset import collector_paused
from superpeer._node_base import decoded_as
from superpeer.core import PeerSubscription, peer_source
from superpeer.store import Store
from wire import messages as m


@dataclass(slots=True)
class PreparedRestore:
    """The local peers' stored subscriptions, decoded, and a poset holding exactly them."""

    poset: SubscriptionPoset
    subscriptions: list[PeerSubscription]
    expires: list[float | None]
    """Per subscription, in the same order, when it expires (``Subscribe.expires``)."""
    stored: frozenset[tuple[str, str]]
    """The (peer, subscription id) pairs the store held when this was prepared."""

    def still_current(self, store: Store) -> bool:
        """Whether the store holds exactly the subscriptions this was prepared from."""
        return self.stored == stored_keys(store)


def stored_keys(store: Store) -> frozenset[tuple[str, str]]:
    """Every local peer's stored subscription ids, as (peer, id), undecoded."""
    return frozenset(
        (peer, sid) for peer in store.local_peers() for sid in store.local_state(peer).subscriptions
    )


def stored_subscriptions(stored: Mapping[str, bytes]) -> Iterator[m.Subscribe]:
    """A local peer's stored subscriptions (its ``LocalState.subscriptions``), decoded; any
    that cannot be is left out, as every other restore of stored messages does."""
    for data in stored.values():
        subscribe = decoded_as(data, m.Subscribe)
        if subscribe is not None:
            yield subscribe


def prepare_restore(store: Store, *, collect_from: int) -> PreparedRestore:
    """Every local peer's stored subscriptions, decoded and placed by one bulk insertion.

    From ``collect_from`` subscriptions up, a full collection follows, while nobody waits for
    this node: what the restore made is young when the collector resumes, and its first pass
    over it (1.97 s at 10^5, some 20 s at 10^6) would come during the join handshake."""
    stored = stored_keys(store)
    with collector_paused():
        subscriptions: list[PeerSubscription] = []
        expires: list[float | None] = []
        for peer in store.local_peers():
            for subscribe in stored_subscriptions(store.local_state(peer).subscriptions):
                subscriptions.append(
                    (peer, subscribe.id, subscribe.subscription, subscribe.on_change)
                )
                expires.append(subscribe.expires)
        poset = SubscriptionPoset()
        poset.insert_many(
            [(subscription, peer_source(peer), sid) for peer, sid, subscription, _ in subscriptions]
        )
    if len(subscriptions) >= collect_from:
        gc.collect()
    return PreparedRestore(poset, subscriptions, expires, stored)
