"""A central brute-force oracle for workloads: who must receive which publication.

It replays the workload with no network at all: a publication is due to every peer (still in the
network at the end) that has, at publish time, an active subscription matching it, provided the
publisher's advertisement at that time allows it. It applies the same refusals as the network
(unknown peers, ids reused for another subscription, unknown ids, publications outside the
advertisement, malformed input), so an operation refused there changes nothing here either.

The backbone's life (super-peers joining, leaving, failing, restarting) and peers moving between
access points change nothing here: whatever happens to the super-peers, a peer is owed exactly
what its subscriptions matched. The one thing a move does mean here is that the peer is online
(a detached peer that moves comes back through its new access point). Which operations are refused (a join to a super-peer that is
down, ...) is the workload's meaning, shared with the runners (``superpeer.sim.workload.Planner``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import qel
from superpeer.sim.workload import OperationError, Planner


def _accepted(superpeers: int, operations: Iterable[dict]) -> Iterable[dict]:
    """The operations the network applies (the others are reported as errors)."""
    planner = Planner(superpeers)
    for op in operations:
        try:
            planner.plan(dict(op))
        except (OperationError, qel.QueryError, qel.AdvertisementError, qel.PublicationError):
            if op["op"] not in ("subscribe", "unsubscribe", "publish", "advertise"):
                continue
        yield op


def expected_deliveries(superpeers: int, operations: Iterable[dict]) -> dict[str, list[str]]:
    joined: set[str] = set()
    detached: set[str] = set()
    advertisements: dict[str, qel.Advertisement] = {}
    subscriptions: dict[str, dict[str, qel.Subscription]] = {}
    received: dict[str, set[str]] = {}
    for op in _accepted(superpeers, operations):
        kind = op["op"]
        if kind.startswith("superpeer_"):
            continue
        name = str(op["peer"])
        if kind == "move":
            # A move is the peer connecting through another access point: it is online again
            # there (``Planner.plan`` marks it attached), so a peer that was detached before it
            # moved makes requests again, and they count (its publications are due to the
            # subscribers). Where it is attached changes nothing else here.
            detached.discard(name)
            continue
        if kind == "join":
            if name not in joined:
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
    (``sp<k>``), or None when it was detached, gone or never there. Where peers are after the
    backbone changed is the workload's meaning (the planner's)."""
    planner = Planner(superpeers)
    found: dict[str, dict[str, str | None]] = {}
    for op in operations:
        peers = planner.peers
        if op["op"] == "locate" and op["peer"] in peers and peers[op["peer"]].attached:
            target = peers.get(str(op["target"]))
            online = target is not None and target.attached
            where = f"sp{target.superpeer}" if online and target is not None else None
            found.setdefault(str(op["peer"]), {})[str(op["id"])] = where
        with contextlib.suppress(
            OperationError, qel.QueryError, qel.PublicationError, qel.AdvertisementError
        ):
            planner.plan(dict(op))
    return {name: dict(sorted(ids.items())) for name, ids in sorted(found.items())}


def expected_fetches(superpeers: int, operations: Iterable[dict]) -> dict[str, list[str]]:
    """Per peer (still in the network at the end), the publications whose resource it must
    hold by the end: it fetched one it had been notified of (``expected_deliveries`` up to the
    fetch), offered by a file, published by another peer; then that owner, without having left,
    was online at the access point the notification named (where it published), and after that
    the requester was online. An empty file needs no owner. The simple reading of "once both sides have been online", for a
    backbone that does not change (where peers are is the planner's).

    Publication ids are assumed unique across the workload (each names one owner's resource)."""
    ops = list(operations)
    planner = Planner(superpeers)
    offered: dict[str, tuple[str, object, int]] = {}
    """Publication id -> (owner, its planner record when it published, its access point)."""
    waiting: list[list] = []
    """[requester, its planner record, publication, owner side done?] per fetch under way."""
    fetched: dict[str, set[str]] = {}
    for index, op in enumerate(ops):
        before = planner.peers.get(str(op.get("peer")))
        try:
            planner.plan(dict(op))
        except (OperationError, qel.QueryError, qel.AdvertisementError, qel.PublicationError):
            continue
        name = str(op.get("peer"))
        if op["op"] == "join":
            fetched[name] = set()
        elif op["op"] == "publish" and "file" in op:
            for publication in qel.parse_publications(
                op["data"], op.get("format", "turtle"), publisher=name, id=str(op["id"])
            ):
                assert publication.id not in offered, "publication ids must be unique"
                offered[publication.id] = (name, before, before.superpeer)  # type: ignore[union-attr]
        elif op["op"] == "fetch":
            notified = expected_deliveries(superpeers, ops[:index]).get(name, [])
            wanted = str(op["id"])
            owner = offered.get(wanted)
            mine = owner is not None and owner[0] == name
            if (
                wanted in notified
                and owner is not None
                and not mine
                and wanted not in fetched[name]
            ):
                # an empty file needs nothing from its owner: its hash says it all
                waiting.append([name, before, wanted, not op_file(ops, wanted)])
        for fetch in list(waiting):
            requester, record, publication, uploaded = fetch
            if planner.peers.get(requester) is not record:
                waiting.remove(fetch)  # the requester left
                continue
            owner, owner_record, access_point = offered[publication]
            now = planner.peers.get(owner)
            if not uploaded and now is owner_record and now.attached:  # type: ignore[union-attr]
                fetch[3] = uploaded = now.superpeer == access_point  # type: ignore[union-attr]
            if uploaded and record.attached:  # type: ignore[union-attr]
                fetched[requester].add(publication)
                waiting.remove(fetch)
        if op["op"] == "leave":
            fetched.pop(name, None)
    present = planner.peers
    return {name: sorted(fetched.get(name, ())) for name in sorted(present)}


def op_file(operations: list[dict], publication: str) -> str:
    """The ``file`` of the operation that published ``publication``."""
    return next(
        op["file"]
        for op in operations
        if op["op"] == "publish" and "file" in op and publication.partition("#")[0] == str(op["id"])
    )
