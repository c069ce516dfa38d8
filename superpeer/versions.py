"""Living resources at their owner's access point: versions, updates, extensions, retractions.

MDV (seed 003) treats an update or a delete of metadata as a publication event and tells each
subscriber what it means *for its subscription*, by evaluating the rule on the old and on the new
version. Routing stays the design paper's: a new version travels down its origin's trees like any
publication, carrying the version it replaces (``Notification.previous``) or marked ``retracted``;
every hop matches both sides, so a subscription that matched either is reached (both sides were
accepted under the owner's advertisement, so it covers every subscription either side matches).

Where the old version lives: here, at the owner's access point, which keeps the *current*
version of each of its peers' resources (``ResourceVersions``; durable in the store, see
``SuperPeerNode``) until the owner retracts it and then as a tombstone (the version number, so
that a later publication under the same id is a new version and not a repeat), until the owner
leaves. The versions follow the owner (``Versions``): to its new access point with a move's
handover, and to the adopter when this access point leaves. A resource is identified by its
owner and its publication id; only the owner's own access point, on the owner's authenticated
connection, changes it, so nobody else can update or retract it. The table is bounded per owner
(``VersionLimits.max_resources_per_peer``) and per resource (the language's
``max_triples_per_publication`` for what extensions accumulate): beyond either, the request is
refused with the reason and nothing changes. Memory holds only the most recently used versions
(``max_cached_versions``); the store is where they all are (``StoredVersions``), so a library
that publishes its catalogue of a million resources costs the access point disk, not memory.
A version this node originated is stored without its publication: the record refers to the
body the store keeps once for the log entry and the mail (``record_of``, ``superpeer.store``);
a version handed over or expired here keeps its publication in the record.

Descriptions in steps (seed 002): an ``extend`` adds triples to the current version; the union is
the new version, so a subscription that needs triples from several steps matches once the union
satisfies it (``added``), exactly like an update whose new version is the union.

Once, by default: an extension that a subscription matched already before (it matches both
sides) is not news for it, since matching is monotone in the triples (an extension never makes a
subscription stop matching, so what the subscriber was told still holds). It hears of such an
extension (``changed``) only if it asked (``Subscribe.on_change``, ``peer subscribe --on
change``). Updates are not extensions: a new version may take away what a subscription matched
on (a price, a date), so every subscriber concerned hears of it, as MDV has it. The rule is
applied where the subscription's flag is known, at the subscriber's access point, for every way
a notification arrives (routed, caught up, handed over): ``Notify.steady`` names the
subscriptions the previous version matched already, and ``narrowed`` drops those that did not
ask. The kind stays MDV's over all the peer's subscriptions, those dropped included: one
``added`` per peer and resource while it matches, so a second subscription that an extension
makes match beside one that matched already hears ``changed``.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, Protocol

import qel
import wire
from superpeer.store import BODY, json_key
from wire import messages as m
from wire import model

ADDED: Final = "added"
CHANGED: Final = "changed"
REMOVED: Final = "removed"
RECORDS: Final = "versions"
"""The store's ``pending`` table kind that keeps the versions durable."""


class VersionError(ValueError):
    """The owner asked for a change its resources do not allow (its fault): refused, nothing
    changes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionLimits:
    max_resources_per_peer: int = 10_000_000
    """Resources (live or retracted) one peer may have at its access point: a bound on its
    share of the store's disk (about a kilobyte each), not of memory (``max_cached_versions``)."""
    max_cached_versions: int = 10_000
    """Versions the table holds in memory, the most recently used (``ResourceVersions``); the
    others are read from the store when they are asked for."""
    max_triples_per_resource: int = qel.DEFAULT_LIMITS.max_triples_per_publication
    """Most triples the union of a resource's extensions may reach."""


@dataclass(frozen=True, slots=True)
class Version:
    """A resource's current version (``of``), its publication kept packed.

    Why packed. An access point keeps the current version of every resource its peers
    published. As objects, each was a dozen that the cyclic garbage collector scans in every
    full pass: at 30,000 resources such a pass held the daemon for 190 ms, in the middle of a
    stream of notifications, and the passes grow with the resources. Packed, it is one bytes
    object, which the collector does not track, and the encoding of the notification that
    brought the version made it already (``wire.packed_publication``). Only a change to the
    resource (an update, an extension, a retraction, an expiry, a handover) decodes it. The
    table keeps the fields as a plain tuple (``ResourceVersions._resources``)."""

    number: int
    packed: bytes
    """The current version's publication, or the last one's if ``retracted``."""
    retracted: bool = False
    expires: float | None = None
    """When the resource expires (``Publish.expires``); None: never."""

    @classmethod
    def of(
        cls,
        number: int,
        publication: qel.Publication,
        retracted: bool = False,
        expires: float | None = None,
    ) -> Version:
        return cls(number, wire.packed_publication(publication), retracted, expires)

    @property
    def publication(self) -> qel.Publication:
        return wire.unpacked_publication(self.packed)

    def live(self, now: float) -> bool:
        return not self.retracted and (self.expires is None or now < self.expires)


@dataclass(frozen=True, slots=True)
class Change:
    """What to send for an accepted request: the new version and the one it replaces."""

    number: int
    publication: qel.Publication
    previous: qel.Publication | None
    retracted: bool = False
    expires: float | None = None
    extension: bool = False


class VersionStore(Protocol):
    """What ``StoredVersions`` asks of the node's store (``superpeer.store.Store``)."""

    def pending_value(self, kind: str, key: str) -> dict | None: ...
    def pending_range(self, kind: str, low: str, high: str) -> dict[str, dict]: ...
    def count_pending(self, kind: str, low: str, high: str) -> int: ...
    def iter_pending(self, kind: str) -> Iterator[tuple[str, dict]]: ...
    def body(self, key: str) -> bytes | None: ...


class StoredVersions:
    """The versions as the node's store keeps them (``record_of``), where the table reads those
    it does not hold in memory. The node writes them (``SuperPeerNode``); this only reads."""

    def __init__(self, store: VersionStore) -> None:
        self.store = store

    def get(self, owner: str, resource: str) -> Version | None:
        record = self.store.pending_value(RECORDS, record_key(owner, resource))
        return None if record is None else self._version_of(record)[1]

    def count(self, owner: str) -> int:
        return self.store.count_pending(RECORDS, *_owner_range(owner))

    def of_owner(self, owner: str) -> dict[str, Version]:
        return dict(
            map(self._version_of, self.store.pending_range(RECORDS, *_owner_range(owner)).values())
        )

    def _version_of(self, record: dict) -> tuple[str, Version]:
        """``_version_of``, with the body the record refers to read from the store."""
        key = record.get(BODY)
        if key is None:
            return _version_of(record)
        packed = self.store.body(key)
        if packed is None:
            raise LookupError(f"the body {key!r} of a version record is gone")
        return _version_of(record, packed)

    def expiring(self) -> Iterator[tuple[str, str, float | None]]:
        """Every version's owner, resource and expiry (None: it never expires, or is
        retracted), without reading its publication."""
        for key, record in self.store.iter_pending(RECORDS):
            owner, resource = json.loads(key)
            expires = record.get("expires")
            live = expires is not None and not record.get("retracted")
            yield owner, resource, float(expires) if live else None


def _owner_range(owner: str) -> tuple[str, str]:
    """The keys of ``owner``'s records (``record_key``) are the strings in [low, high)."""
    low = json.dumps([owner])[:-1] + ", "
    return low, low[:-1] + chr(ord(" ") + 1)


class ResourceVersions:
    """The current version of every resource published through this access point.

    Without ``records`` every version is held in memory. With them (the node's store) at most
    ``max_cached_versions`` are, the most recently used: an owner whose versions did not all
    stay in memory is *spilled*, and a version of it not held is read from ``records``, so the
    memory does not grow with the resources (an owner of a million works). What is
    held is never older than what is stored: the node writes every change a call makes before
    its next call, and the table evicts at the start of a call, never within one
    (``_trim``), so a version evicted is one the store has."""

    def __init__(
        self, limits: VersionLimits | None = None, records: StoredVersions | None = None
    ) -> None:
        self.limits = limits or VersionLimits()
        if self.limits.max_cached_versions < 1:
            raise ValueError("max_cached_versions must be at least 1")
        self.records = records
        self._held: OrderedDict[tuple[str, str], _Kept] = OrderedDict()
        """Per (owner, resource), its version as a plain tuple (``_kept``), least recently used
        first: the collector stops tracking a tuple of strings, numbers and bytes, so a table of
        many resources adds nothing to its full passes (a ``Version`` object each would be one
        tracked object per resource)."""
        self._spilled: set[str] = set()
        """Owners with versions in ``records`` that may not be held (evicted, or kept there
        before a restart)."""
        self._counts: dict[str, int] = {}
        """Per owner, its resources (live or retracted), once known (``_count``)."""
        self._expiries: list[tuple[float, str, str]] = []
        """A heap of (expiry, owner, resource) for every version stored with an expiry; an
        entry whose version was replaced since is skipped when it comes up (``next_expiry`` is
        asked after every input: a scan of every resource made a super-peer's time per
        publication grow with the publications it kept)."""
        self._compacted = 0
        """The heap's size when it was last rebuilt of live entries only."""
        self._next: float | None = None
        """``next_expiry``'s answer, until the table changes (it may be a read of ``records``)."""
        self._known_next = False

    def current(self, owner: str, resource: str) -> Version | None:
        self._trim()
        key = (owner, resource)
        kept = self._held.get(key)
        if kept is not None:
            self._held.move_to_end(key)
            return Version(*kept)
        stored = self._stored(owner, resource)
        if stored is not None:
            self._held[key] = _kept(stored)
        return stored

    def _peek(self, owner: str, resource: str) -> Version | None:
        """``current`` without touching the cache's order or contents."""
        kept = self._held.get((owner, resource))
        return Version(*kept) if kept is not None else self._stored(owner, resource)

    def _stored(self, owner: str, resource: str) -> Version | None:
        if self.records is None or owner not in self._spilled:
            return None
        return self.records.get(owner, resource)

    def resources_of(self, owner: str) -> dict[str, Version]:
        found = (
            self.records.of_owner(owner)
            if self.records is not None and owner in self._spilled
            else {}
        )
        found.update(
            (resource, Version(*kept))
            for (holder, resource), kept in self._held.items()
            if holder == owner
        )
        return found

    def restore(self, owner: str, resource: str, version: Version) -> None:
        """Holds ``version`` of ``owner``'s resource (one handed over by its previous access
        point; the node stores it)."""
        self._trim()
        self._put(owner, resource, version)

    def restore_stored(self) -> None:
        """A restarted access point: every owner in ``records`` is spilled (its versions are
        read when asked for), and their expiries are on the heap. Nothing else is read."""
        assert self.records is not None
        for owner, resource, expires in self.records.expiring():
            self._spilled.add(owner)
            if expires is not None:
                heapq.heappush(self._expiries, (expires, owner, resource))
        self._compacted = len(self._expiries)
        self._known_next = False

    def _put(self, owner: str, resource: str, version: Version, new: bool | None = None) -> None:
        """Holds ``version``; ``new``: the resource had none (None: look)."""
        key = (owner, resource)
        if new is None:
            new = key not in self._held and self._peek(owner, resource) is None
        if new:
            self._counts[owner] = self._count(owner) + 1
        self._held[key] = _kept(version)
        self._held.move_to_end(key)
        self._known_next = False
        self._expiring(owner, resource, version)

    def _count(self, owner: str) -> int:
        count = self._counts.get(owner)
        if count is None:
            spilled = self.records is not None and owner in self._spilled
            count = self.records.count(owner) if spilled and self.records is not None else 0
            self._counts[owner] = count
        return count

    def _trim(self) -> None:
        """Evicts the least recently used versions beyond ``max_cached_versions`` (only at the
        start of a call: see the class docstring)."""
        if self.records is None:
            return
        while len(self._held) > self.limits.max_cached_versions:
            (owner, _), _ = self._held.popitem(last=False)
            self._spilled.add(owner)

    def _expiring(self, owner: str, resource: str, version: Version) -> None:
        if version.expires is not None and not version.retracted:
            heapq.heappush(self._expiries, (version.expires, owner, resource))
            if len(self._expiries) > 2 * self._compacted + 1024:
                # versions replaced before their expiry came up leave entries behind
                self._expiries = [e for e in set(self._expiries) if self._due(*e)]
                heapq.heapify(self._expiries)
                self._compacted = len(self._expiries)

    def _due(self, expires: float, owner: str, resource: str) -> bool:
        """Whether the heap entry is the expiry of the resource's current version."""
        held = self._peek(owner, resource)
        return held is not None and not held.retracted and held.expires == expires

    def forget(self, owner: str) -> None:
        for key in [key for key in self._held if key[0] == owner]:
            del self._held[key]
        self._spilled.discard(owner)
        self._counts.pop(owner, None)
        self._known_next = False

    def forget_resource(self, owner: str, resource: str) -> None:
        """``owner``'s resource is kept elsewhere now (handed to its new access point; the node
        deletes its record)."""
        self._trim()
        if self._peek(owner, resource) is not None:
            self._counts[owner] = self._count(owner) - 1
        self._held.pop((owner, resource), None)
        self._known_next = False

    def publish(
        self,
        owner: str,
        publication: qel.Publication,
        change: str,
        now: float,
        expires: float | None = None,
        *,
        fits: Callable[[Change], None] | None = None,
    ) -> Change | None:
        """The change ``publication`` makes to ``owner``'s resource under its id, recorded; None
        when nothing changes (a repeat). ``VersionError`` when the request is not allowed. An
        expired resource is gone as a retracted one is (``expire``); ``expires`` is the new
        version's expiry, an update or extension without one keeps the resource's.

        ``fits`` sees a new change before it is recorded and raises ``VersionError`` to refuse
        it (the access point's check that its notification can travel): a refused change leaves
        the resource as it was."""
        resource = publication.id
        held = self.current(owner, resource)
        live = held is not None and held.live(now)
        if change == "publish":
            if live and held is not None:
                current = held.publication
                if current.triples == publication.triples:
                    repeat = Change(0, current, None, expires=held.expires)
                    return repeat if held.number == 0 else None
                raise VersionError(
                    f"you already published a resource under the id {resource!r}: send a new "
                    "version with --replaces, add to it (extend) or retract it first"
                )
            number = 0 if held is None else held.number + 1
            change_made = Change(number, publication, None, expires=expires)
            return self._record(owner, change_made, held is None, fits)
        if not live or held is None:
            raise VersionError(
                f"you have no resource under the id {resource!r} at this access point to "
                f"{'update' if change == 'update' else 'extend'}"
            )
        new = publication
        previous = held.publication
        if change == "extend":
            if publication.subject != previous.subject:
                raise VersionError(
                    f"the resource {resource!r} is about <{previous.subject}>, "
                    f"not <{publication.subject}>: an extension adds triples about the same subject"
                )
            new = qel.Publication(
                previous.subject, previous.statements | publication.statements, owner, resource
            )
            if len(new.statements) > self.limits.max_triples_per_resource:
                raise VersionError(
                    f"the resource {resource!r} would have {len(new.statements)} triples, more "
                    f"than max_triples_per_resource ({self.limits.max_triples_per_resource})"
                )
        if new.triples == previous.triples:
            return None
        kept = held.expires if expires is None else expires
        change_made = Change(
            held.number + 1, new, previous, expires=kept, extension=change == "extend"
        )
        return self._record(owner, change_made, False, fits)

    def withdraw(self, owner: str, resource: str, now: float) -> Change:
        held = self.current(owner, resource)
        if held is None or not held.live(now):
            raise VersionError(
                f"you have no resource under the id {resource!r} at this access point to retract"
            )
        change = Change(held.number + 1, held.publication, None, True, held.expires)
        return self._record(owner, change, False)

    def expire(self, now: float) -> list[tuple[str, Version]]:
        """Resources whose expiry passed become tombstones (their version number stays, so a
        later publication under the same id is a new version, not a repeat; their content and
        what extensions accumulated are dropped): the new tombstones and their owners."""
        self._trim()
        gone = []
        while self._expiries and self._expiries[0][0] <= now:
            expires, owner, resource = heapq.heappop(self._expiries)
            if not self._due(expires, owner, resource):
                continue  # replaced, retracted, expired or forgotten since
            held = self._peek(owner, resource)
            assert held is not None
            tombstone = Version.of(held.number, _emptied(held.publication), True, held.expires)
            self._put(owner, resource, tombstone, new=False)
            gone.append((owner, tombstone))
        return gone

    def next_expiry(self) -> float | None:
        """The earliest expiry of a resource not retracted (for the node's timer)."""
        if self._known_next:
            return self._next
        while self._expiries and not self._due(*self._expiries[0]):
            heapq.heappop(self._expiries)  # replaced, retracted, expired or forgotten since
        self._next = self._expiries[0][0] if self._expiries else None
        self._known_next = True
        return self._next

    def _record(
        self, owner: str, change: Change, new: bool, fits: Callable[[Change], None] | None = None
    ) -> Change:
        """Records ``change`` to ``owner``'s resource (``new``: it had no version, live or
        retracted)."""
        resource = change.publication.id
        if new:
            count = self._count(owner)
            if count >= self.limits.max_resources_per_peer:
                raise VersionError(
                    f"you have {count} resources at this access point, the most "
                    f"max_resources_per_peer allows: retract one, or publish elsewhere"
                )
        if fits is not None:
            fits(change)
        version = Version.of(change.number, change.publication, change.retracted, change.expires)
        self._put(owner, resource, version, new)
        return change


_Kept = tuple[int, bytes, bool, float | None]


def _kept(version: Version) -> _Kept:
    """``version`` as the table keeps it (the fields of ``Version``, in order)."""
    return version.number, version.packed, version.retracted, version.expires


def _emptied(publication: qel.Publication) -> qel.Publication:
    """What a tombstone keeps of an expired version: its subject and one triple (a publication
    is never empty), not the union its extensions built."""
    first = min(publication.statements, key=repr)
    return qel.Publication(
        publication.subject, frozenset({first}), publication.publisher, publication.id
    )


def record_key(owner: str, resource: str) -> str:
    """The key of the store record of ``owner``'s ``resource``."""
    return json_key(owner, resource)


def record_of(notification: m.Notification, body: str | None = None) -> tuple[str, dict]:
    """The store record of the version ``notification`` originates (key, value). With ``body``,
    the key under which the store holds the publication packed (``Store.log_publication``
    said it does): the record refers to it instead of holding a second copy."""
    return _record(
        notification.owner,
        notification.version,
        notification.publication,
        notification.retracted,
        notification.expires,
        body=body,
    )


def version_record(owner: str, version: Version) -> tuple[str, dict]:
    """The store record of ``owner``'s ``version`` (key, value): an expired resource's
    tombstone, or one handed over by the access point that kept it (``Versions``)."""
    return _record(owner, version.number, version.publication, version.retracted, version.expires)


def _record(
    owner: str,
    number: int,
    publication: qel.Publication,
    retracted: bool,
    expires: float | None,
    *,
    body: str | None = None,
) -> tuple[str, dict]:
    # the publication in its wire plain form, which the encoding of its notification made
    # already (``wire.plain_publication``); stores written before kept it as N-Triples ("text");
    # or, with ``body``, the resource's id and the key of the body the store keeps
    content = (
        {"publication": wire.plain_publication(publication)}
        if body is None
        else {"resource": publication.id, BODY: body}
    )
    return record_key(owner, publication.id), {
        "owner": owner,
        "number": number,
        "retracted": retracted,
        "expires": expires,
        **content,
    }


def _version_of(record: dict, packed: bytes | None = None) -> tuple[str, Version]:
    """The resource a record keeps (its id) and its version; ``packed``: the body the record
    refers to (``BODY``), already what a ``Version`` holds (``wire.packed_publication``)."""
    expires = record.get("expires")
    number, retracted = int(record["number"]), bool(record["retracted"])
    expiry = None if expires is None else float(expires)
    if packed is not None:
        return record["resource"], Version(number, packed, retracted, expiry)
    plain = record.get("publication")
    publication = (
        qel.parse_publication_text(record["text"])
        if plain is None
        else model.publication_from_plain(plain)
    )
    return publication.id, Version.of(number, publication, retracted, expiry)


def forget_records(store: VersionStore, owner: str) -> list[str]:
    """The keys of ``owner``'s records (the owner left for good)."""
    return list(store.pending_range(RECORDS, *_owner_range(owner)))


def change_key(notify: m.Notify) -> tuple[str, str, int]:
    """What a peer's inbox takes once: one version of one owner's resource."""
    return notify.owner, notify.publication.id, notify.version


def owed(
    history: list[tuple[str, qel.Subscription, float, float]],
    notify: m.Notify,
    at: float | None = None,
) -> bool:
    """Whether a peer whose subscriptions were ``history`` (id, subscription, from, until) is
    owed ``notify``: one of them matched it when it was published, at ``at`` on the history's
    clock (by default its ``published_at``; for a removal, which carries no version it
    matches: one of those it names was active)."""
    if at is None:
        at = notify.published_at
    if notify.kind == REMOVED:
        return any(
            start <= at < end and sid in notify.subscriptions for sid, _, start, end in history
        )
    return any(
        start <= at < end and qel.matches(query, notify.publication)
        for _, query, start, end in history
    )


def sides(notification: m.Notification) -> tuple[qel.Publication | None, qel.Publication | None]:
    """The old and the new version a notification compares (None: there is none)."""
    if notification.retracted:
        return notification.publication, None
    return notification.previous, notification.publication


def kind_of(matched_old: bool, matched_new: bool) -> str:
    """MDV's answer for a subscriber whose subscriptions match at least one side."""
    if matched_new:
        return CHANGED if matched_old else ADDED
    if not matched_old:
        raise ValueError("the change is none of this subscriber's business")
    return REMOVED


NEITHER: Final = (False, False)
ONLY: Final = ((True, False), (False, True))
"""Which sides (old, new) a subscription matched, when it matched one only (by its index):
shared, as a peer's 1,000 subscriptions mostly match alike."""


def steady(notification: m.Notification, matched: dict[str, tuple[bool, bool]]) -> tuple[str, ...]:
    """Of one peer's subscriptions, with which sides each ``matched`` (old, new), those an
    extension is no news for: it matched the previous version already."""
    if not notification.extension:
        return ()
    return tuple(sorted(sid for sid, (old, new) in matched.items() if old and new))


def notify_of(notification: m.Notification, matched: dict[str, tuple[bool, bool]]) -> m.Notify:
    """What ``notification`` is for one peer whose subscriptions ``matched`` it (per id, which
    sides: old, new): the routing core's deliveries and the catch-ups' answers alike. The kind
    is MDV's over all of them; ``narrowed`` keeps it when it drops the steady ones."""
    sides = set(matched.values())  # one or two of them, however many subscriptions
    return m.Notify(
        publication=notification.publication,
        subscriptions=tuple(sorted(matched)),
        owner=notification.owner,
        access_point=notification.access_point,
        origin=notification.origin,
        hops=notification.hops,
        published_at=notification.published_at,
        version=notification.version,
        kind=kind_of(any(old for old, _ in sides), any(new for _, new in sides)),
        expires=notification.expires,
        steady=steady(notification, matched),
    )


def narrowed(notify: m.Notify, on_change: Callable[[str], bool]) -> m.Notify | None:
    """``notify`` for the subscriptions it is news for (None: none): a ``steady`` one only if
    it asked (``on_change``). ``notify.subscriptions`` are those that stand (the access point
    left out those ended before the publication or made after it).

    The kind is MDV's over every standing subscription, the dropped ones included: the peer
    has the resource if one of them matched the previous version, so a subscription that an
    extension makes match beside one that matched already is told as ``changed``, naming the
    new one, not as a second ``added`` (one ``added`` per peer and resource while it matches:
    README, "Living resources"). An extension matches every subscription it concerns on its
    new side, so the kind is ``changed`` if a standing one is steady, else ``added``."""
    if not notify.steady:
        return notify
    steady = tuple(sid for sid in notify.steady if sid in notify.subscriptions)
    asked = tuple(sid for sid in steady if on_change(sid))
    kept = tuple(sid for sid in notify.subscriptions if sid not in steady or sid in asked)
    if not kept:
        return None
    kind = CHANGED if steady else ADDED
    if (kept, asked, kind) == (notify.subscriptions, notify.steady, notify.kind):
        return notify
    return dataclasses.replace(notify, subscriptions=kept, steady=asked, kind=kind)


def concerns(subscription: qel.Subscription, notification: m.Notification) -> tuple[bool, bool]:
    """Whether ``subscription`` matches the old and the new side of ``notification``."""
    old, new = sides(notification)
    return (
        old is not None and qel.matches(subscription, old),
        new is not None and qel.matches(subscription, new),
    )
