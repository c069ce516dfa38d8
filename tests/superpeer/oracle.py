"""A central brute-force oracle for workloads: who must receive which publication.

It replays the workload with no network at all: a publication is due to every peer (still in the
network at the end) that has, at publish time, an active subscription matching it, provided the
publisher's advertisement at that time allows it. It applies the same refusals as the network
(unknown peers, ids reused for another subscription, unknown ids, publications outside the
advertisement, malformed input), so an operation refused there changes nothing here either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import qel


def expected_deliveries(superpeers: int, operations: Iterable[dict]) -> dict[str, list[str]]:
    joined: set[str] = set()
    detached: set[str] = set()
    advertisements: dict[str, qel.Advertisement] = {}
    subscriptions: dict[str, dict[str, qel.Subscription]] = {}
    received: dict[str, set[str]] = {}
    for op in operations:
        name = str(op["peer"])
        kind = op["op"]
        if kind == "join":
            if name not in joined and 0 <= op["superpeer"] < superpeers:
                joined.add(name)
                subscriptions[name] = {}
                received[name] = set()
            continue
        if name not in joined:
            continue
        if kind == "detach":
            detached.add(name)
            continue
        if kind == "attach":
            detached.discard(name)
            continue
        if kind == "leave":
            joined.discard(name)
            detached.discard(name)
            subscriptions.pop(name, None)
            received.pop(name, None)
            advertisements.pop(name, None)
            continue
        if name in detached:
            continue
        if kind == "advertise":
            fields = {k: v for k, v in op.items() if k not in ("op", "peer")}
            with contextlib.suppress(qel.AdvertisementError):
                advertisements[name] = qel.parse_advertisement(fields)
        elif kind == "subscribe":
            try:
                query = qel.parse_subscription(op["query"])
            except qel.QueryError:
                continue
            sid = str(op["id"])
            current = subscriptions[name].get(sid)
            if current is None or current.key == query.key:
                subscriptions[name][sid] = query
        elif kind == "unsubscribe":
            subscriptions[name].pop(str(op["id"]), None)
        elif kind == "publish":
            try:
                publications = qel.parse_publications(
                    op["data"], op.get("format", "turtle"), publisher=name, id=str(op["id"])
                )
            except qel.PublicationError:
                continue
            advertisement = advertisements.get(name)
            for publication in publications:
                if advertisement is None or not qel.advertisement_allows(
                    advertisement, publication
                ):
                    continue
                for peer, active in subscriptions.items():
                    if any(qel.matches(q, publication) for q in active.values()):
                        received[peer].add(publication.id)
    return {name: sorted(ids) for name, ids in sorted(received.items())}


def expected_locations(superpeers: int, operations: Iterable[dict]) -> dict[str, dict[str, str]]:
    """Per asking peer, per look-up id, the super-peer the target was attached to at that moment
    (``sp<k>``), or None when it was detached, gone or never there."""
    where: dict[str, str] = {}
    detached: set[str] = set()
    found: dict[str, dict[str, str | None]] = {}
    for op in operations:
        name = str(op["peer"])
        kind = op["op"]
        if kind == "join":
            if name not in where and 0 <= op["superpeer"] < superpeers:
                where[name] = f"sp{op['superpeer']}"
        elif name not in where:
            continue
        elif kind == "detach":
            detached.add(name)
        elif kind == "attach":
            detached.discard(name)
        elif kind == "leave":
            del where[name]
            detached.discard(name)
        elif kind == "locate" and name not in detached:
            target = str(op["target"])
            online = target in where and target not in detached
            found.setdefault(name, {})[str(op["id"])] = where[target] if online else None
    return {name: dict(sorted(ids.items())) for name, ids in sorted(found.items())}
