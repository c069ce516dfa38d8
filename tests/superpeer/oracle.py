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
from dataclasses import dataclass

import qel
from superpeer.sim.workload import ElsewhereError, OperationError, Planner
from tests.entailment_oracle import closure, schema_graph

MDV = {(False, True): "added", (True, True): "changed", (True, False): "removed"}

REFUSED_BY_NETWORK = (
    "publish_schema",
    "subscribe",
    "unsubscribe",
    "publish",
    "update",
    "extend",
    "retract",
    "advertise",
)
"""Requests the network itself refuses (the oracle applies the same rules)."""


def _accepted(superpeers: int, operations: Iterable[dict]) -> Iterable[dict]:
    """The operations the network applies (the others are reported as errors)."""
    planner = Planner(superpeers)
    now = 0.0
    for op in operations:
        if op["op"] == "wait":
            now += op["seconds"]
        try:
            planner.plan(dict(op), now=now)
        except ElsewhereError:
            continue
        except (OperationError, qel.QueryError, qel.AdvertisementError, qel.PublicationError):
            if op["op"] not in REFUSED_BY_NETWORK:
                continue
        yield op


def expected_deliveries(superpeers: int, operations: Iterable[dict]) -> dict[str, list[str]]:
    """Per peer, the ids of the publications it hears of, whatever the kind of change."""
    return {
        name: sorted({pid for pid, _ in changes})
        for name, changes in expected_changes(superpeers, operations).items()
    }


def expected_changes(superpeers: int, operations: Iterable[dict]) -> dict[str, list[list[str]]]:
    """Per peer, ``[publication id, kind]`` of every change it hears of, in workload order.

    Resources live as MDV (seed 003) has them, written here from its definition and nothing
    else: a resource is its owner's and id's; a ``publish`` of a live resource with other
    content is refused (the same content is a repeat: version 0 goes out again, later versions
    do not), one after a retraction is a new version with no old one; ``update`` replaces a live
    resource, ``extend`` adds triples about its subject (the union is the new version),
    ``retract`` withdraws it; a change that leaves the content as it is sends nothing. A peer
    hears a change if one of its subscriptions active then matches the old or the new version:
    ``added`` (new only), ``changed`` (both), ``removed`` (old only, or retracted). An extension
    that a subscription matched before too (both versions) concerns it only if it was made with
    ``"on": "change"``. A peer hears a change that concerns one of its subscriptions; the kind is
    MDV's over all its active subscriptions that match either version, concerned or not: one
    ``added`` per peer and resource while it matches (a second subscription that an extension
    makes match, beside one that matched already, is ``changed``).

    Expiry (seed 000): time is the sum of the ``wait`` s so far (operations take none). A
    subscription made at t with ``expires`` E is active in [t, t + E): it is owed what is
    published before its expiry. A resource published at t with ``expires`` E lives until
    t + E (its updates and extensions keep that; after it, it is gone as if retracted, but
    nobody hears ``removed``), and each of its changes is owed to a subscriber only if it is
    attached at some moment before t + E: online when the change is made, or back (``attach``,
    ``move``) before then. A peer still detached at the end counts as coming back at the end.

    Schemas (seed 000): what is published, updated or extended is matched under its RDFS
    closure (rdflib and owlrl, ``tests.entailment_oracle``) under the schema documents that the
    peers in the network then had published (detached ones too; a peer's go when it leaves),
    as it is when it is published: a schema that comes later does not change it. An extension's
    new version is the version before it (as it was closed) and the extension's closure."""
    joined: set[str] = set()
    detached: set[str] = set()
    advertisements: dict[str, qel.Advertisement] = {}
    subscriptions: dict[str, dict[str, tuple[qel.Subscription, float, bool]]] = {}
    """Per peer, per id: the subscription, when it expires, whether it hears of extensions it
    matched already."""
    received: dict[str, list[list[str]]] = {}
    heard: dict[str, set[tuple[str, str, int]]] = {}
    resources: dict[tuple[str, str], _Resource] = {}
    schemas: dict[str, list[tuple[str, str]]] = {}
    """Per peer, the schema documents it published: (data, format)."""
    waiting: dict[str, list[tuple[list[str], float]]] = {}
    """Per detached peer, the changes it is owed only if it is back before their expiry."""
    now = 0.0

    def tell(
        owner: str, resource: str, number: int, old, new, expires: float, extension: bool = False
    ) -> None:
        for peer, held in subscriptions.items():
            matching = []
            concerned = False
            for query, until, on_change in held.values():
                if now >= until:
                    continue
                sides = (
                    old is not None and qel.matches(query, old),
                    new is not None and qel.matches(query, new),
                )
                if any(sides):
                    matching.append(sides)
                    concerned |= not (extension and all(sides) and not on_change)
            matched_old = any(before for before, _ in matching)
            matched_new = any(after for _, after in matching)
            key = (owner, resource, number)
            if concerned and key not in heard[peer]:
                heard[peer].add(key)
                change = [resource, MDV[matched_old, matched_new]]
                received[peer].append(change)
                if peer in detached and expires < INF:
                    waiting.setdefault(peer, []).append((change, expires))

    def back(peer: str) -> None:
        """``peer`` is attached again: what expired meanwhile is not delivered."""
        gone = [id(change) for change, expires in waiting.pop(peer, []) if expires <= now]
        received[peer] = [change for change in received[peer] if id(change) not in gone]

    for op in _accepted(superpeers, operations):
        kind = op["op"]
        if kind == "wait":
            now += op["seconds"]
            continue
        if kind.startswith("superpeer_") or kind in ("skew", "partition", "heal"):
            continue  # nothing a peer is owed depends on the backbone, its cuts, or clocks
        name = str(op["peer"])
        if kind == "move":
            # A move is the peer connecting through another access point: it is online again
            # there (``Planner.plan`` marks it attached), so a peer that was detached before it
            # moved makes requests again, and they count (its publications are due to the
            # subscribers). Where it is attached changes nothing else here.
            detached.discard(name)
            back(name)
            continue
        if kind == "join":
            if name not in joined:
                joined.add(name)
                subscriptions[name] = {}
                received[name] = []
                heard[name] = set()
            continue
        if name not in joined:
            continue
        if kind == "detach":
            detached.add(name)
            continue
        if kind == "attach":
            detached.discard(name)
            back(name)
            continue
        if kind == "leave":
            joined.discard(name)
            detached.discard(name)
            subscriptions.pop(name, None)
            received.pop(name, None)
            heard.pop(name, None)
            waiting.pop(name, None)
            advertisements.pop(name, None)
            schemas.pop(name, None)
            for key in [key for key in resources if key[0] == name]:
                del resources[key]
            continue
        if name in detached:
            continue
        if kind == "advertise":
            fields = {k: v for k, v in op.items() if k not in ("op", "peer")}
            with contextlib.suppress(qel.AdvertisementError):
                advertisements[name] = qel.parse_advertisement(fields)
        elif kind == "publish_schema":
            document = (op["data"], op.get("format", "turtle"))
            with contextlib.suppress(qel.SchemaError):
                qel.parse_schema(*document)  # what the network accepts as a schema
                schemas.setdefault(name, []).append(document)
        elif kind == "subscribe":
            try:
                query = qel.parse_subscription(op["query"])
            except qel.QueryError:
                continue
            sid = str(op["id"])
            current = subscriptions[name].get(sid)
            if current is None or current[1] <= now or current[0].key == query.key:
                on_change = op.get("on") == "change"
                subscriptions[name][sid] = (query, now + op.get("expires", INF), on_change)
        elif kind == "unsubscribe":
            subscriptions[name].pop(str(op["id"]), None)
        elif kind == "retract":
            held = resources.get((name, str(op["id"])))
            if held is not None and held.alive(now):
                held.number += 1
                held.live = False
                tell(name, held.content.id, held.number, held.content, None, held.expires)
        elif kind in ("publish", "update", "extend"):
            try:
                publications = qel.parse_publications(
                    op["data"], op.get("format", "turtle"), publisher=name, id=str(op["id"])
                )
            except qel.PublicationError:
                continue
            advertisement = advertisements.get(name)
            known = schema_graph(d for documents in schemas.values() for d in documents)
            for publication in publications:
                if advertisement is None or not qel.advertisement_allows(
                    advertisement, publication
                ):
                    continue
                if len(known):
                    publication = closure(publication, known)  # noqa: PLW2901 -- matched closed
                expires = now + op.get("expires", INF)
                change = _change(resources, name, publication, kind, now, expires)
                if change is not None:
                    until = resources[name, publication.id].expires
                    tell(name, publication.id, *change, until, extension=kind == "extend")
    for name in list(waiting):
        back(name)
    return dict(sorted(received.items()))


INF = float("inf")


@dataclass
class _Resource:
    content: qel.Publication
    number: int = 0
    live: bool = True
    expires: float = INF

    def alive(self, now: float) -> bool:
        return self.live and now < self.expires


def _change(
    resources: dict[tuple[str, str], _Resource],
    owner: str,
    publication: qel.Publication,
    kind: str,
    now: float,
    expires: float,
) -> tuple[int, qel.Publication | None, qel.Publication] | None:
    """(version, old, new) of an accepted change; None if refused or if nothing changes."""
    key = (owner, publication.id)
    held = resources.get(key)
    if kind == "publish":
        if held is None:
            resources[key] = _Resource(publication, expires=expires)
            return 0, None, publication
        if held.alive(now):
            same = held.content.triples == publication.triples
            return (0, None, publication) if same and held.number == 0 else None
        held.number, held.live, held.content = held.number + 1, True, publication
        held.expires = expires
        return held.number, None, publication
    if held is None or not held.alive(now):
        return None
    new = publication
    if kind == "extend":
        if publication.subject != held.content.subject:
            return None
        new = qel.Publication.of(
            held.content.triples | publication.triples, publisher=owner, id=publication.id
        )
    if new.triples == held.content.triples:
        return None
    old = held.content
    held.number, held.content = held.number + 1, new
    return held.number, old, new


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
    was online, at any access point (after a move, its forwarding address leads there from the
    one the notification named), and after that the requester was online, at any access point
    (what its old one held follows it). An empty file needs no owner. The simple reading of
    "once both sides have been online", for a backbone that does not change (where peers are is
    the planner's).

    Publication ids are assumed unique across the workload (each names one owner's resource)."""
    ops = list(operations)
    planner = Planner(superpeers)
    offered: dict[str, tuple[str, object]] = {}
    """Publication id -> (owner, its planner record when it published)."""
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
                offered[publication.id] = (name, before)
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
            owner, owner_record = offered[publication]
            now = planner.peers.get(owner)
            if not uploaded and now is owner_record and now.attached:  # type: ignore[union-attr]
                fetch[3] = uploaded = True
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
