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
connection, changes it, so nobody else can update or retract it. The table is bounded per owner (``VersionLimits.max_resources_per_peer``) and per
resource (the language's ``max_triples_per_publication`` for what extensions accumulate): beyond
either, the request is refused with the reason and nothing changes.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import qel
import wire
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
    max_resources_per_peer: int = 100_000
    """Resources (live or retracted) one peer may have at its access point."""
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


class ResourceVersions:
    """The current version of every resource published through this access point."""

    def __init__(self, limits: VersionLimits | None = None) -> None:
        self.limits = limits or VersionLimits()
        self._resources: dict[str, dict[str, _Kept]] = {}
        """Per owner, per resource, its version as a plain tuple (``_kept``): the collector
        stops tracking a tuple of strings, numbers and bytes, so a table of many resources adds
        nothing to its full passes (a ``Version`` object each would be one tracked object per
        resource)."""
        self._expiries: list[tuple[float, str, str]] = []
        """A heap of (expiry, owner, resource) for every version stored with an expiry; an
        entry whose version was replaced since is skipped when it comes up (``next_expiry`` is
        asked after every input: a scan of every resource made a super-peer's time per
        publication grow with the publications it kept)."""
        self._compacted = 0
        """The heap's size when it was last rebuilt of live entries only."""

    def current(self, owner: str, resource: str) -> Version | None:
        kept = self._resources.get(owner, {}).get(resource)
        return None if kept is None else Version(*kept)

    def resources_of(self, owner: str) -> dict[str, Version]:
        return {name: Version(*kept) for name, kept in self._resources.get(owner, {}).items()}

    def restore(self, owner: str, resource: str, version: Version) -> None:
        self._resources.setdefault(owner, {})[resource] = _kept(version)
        self._expiring(owner, resource, version)

    def _expiring(self, owner: str, resource: str, version: Version) -> None:
        if version.expires is not None and not version.retracted:
            heapq.heappush(self._expiries, (version.expires, owner, resource))
            if len(self._expiries) > 2 * self._compacted + 1024:
                # versions replaced before their expiry came up leave entries behind
                self._expiries = [
                    (expires, holder, name)
                    for holder, resources in self._resources.items()
                    for name, (_, _, retracted, expires) in resources.items()
                    if expires is not None and not retracted
                ]
                heapq.heapify(self._expiries)
                self._compacted = len(self._expiries)

    def forget(self, owner: str) -> None:
        self._resources.pop(owner, None)

    def forget_resource(self, owner: str, resource: str) -> None:
        """``owner``'s resource is kept elsewhere now (handed to its new access point)."""
        resources = self._resources.get(owner, {})
        resources.pop(resource, None)
        if not resources:
            self._resources.pop(owner, None)

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
            return self._record(owner, Change(number, publication, None, expires=expires), fits)
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
        return self._record(owner, change_made, fits)

    def withdraw(self, owner: str, resource: str, now: float) -> Change:
        held = self.current(owner, resource)
        if held is None or not held.live(now):
            raise VersionError(
                f"you have no resource under the id {resource!r} at this access point to retract"
            )
        change = Change(held.number + 1, held.publication, None, True, held.expires)
        return self._record(owner, change)

    def expire(self, now: float) -> list[tuple[str, Version]]:
        """Resources whose expiry passed become tombstones (their version number stays, so a
        later publication under the same id is a new version, not a repeat; their content and
        what extensions accumulated are dropped): the new tombstones and their owners."""
        gone = []
        for owner, resources in self._resources.items():
            for resource, kept in resources.items():
                held = Version(*kept)
                if not held.retracted and not held.live(now):
                    tombstone = Version.of(
                        held.number, _emptied(held.publication), True, held.expires
                    )
                    resources[resource] = _kept(tombstone)
                    gone.append((owner, tombstone))
        return gone

    def next_expiry(self) -> float | None:
        """The earliest expiry of a resource not retracted (for the node's timer)."""
        while self._expiries:
            expires, owner, resource = self._expiries[0]
            kept = self._resources.get(owner, {}).get(resource)
            if kept is not None and not kept[2] and kept[3] == expires:
                return expires
            heapq.heappop(self._expiries)  # replaced, retracted, expired or forgotten since
        return None

    def _record(
        self, owner: str, change: Change, fits: Callable[[Change], None] | None = None
    ) -> Change:
        resources = self._resources.setdefault(owner, {})
        resource = change.publication.id
        if resource not in resources and len(resources) >= self.limits.max_resources_per_peer:
            raise VersionError(
                f"you have {len(resources)} resources at this access point, the most "
                f"max_resources_per_peer allows: retract one, or publish elsewhere"
            )
        if fits is not None:
            fits(change)
        version = Version.of(change.number, change.publication, change.retracted, change.expires)
        resources[resource] = _kept(version)
        self._expiring(owner, resource, version)
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
    return json.dumps([owner, resource])


def record_of(notification: m.Notification) -> tuple[str, dict]:
    """The store record of the version ``notification`` originates (key, value)."""
    return _record(
        notification.owner,
        notification.version,
        notification.publication,
        notification.retracted,
        notification.expires,
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
) -> tuple[str, dict]:
    # the publication in its wire plain form, which the encoding of its notification made
    # already (``wire.plain_publication``); stores written before kept it as N-Triples ("text")
    return record_key(owner, publication.id), {
        "owner": owner,
        "number": number,
        "retracted": retracted,
        "expires": expires,
        "publication": wire.plain_publication(publication),
    }


def restore(table: ResourceVersions, records: dict[str, dict]) -> None:
    """Loads what ``record_of`` kept (a restarted access point)."""
    for record in records.values():
        resource, version = _version_of(record)
        table.restore(str(record["owner"]), resource, version)


def stored_versions(records: dict[str, dict], owner: str) -> dict[str, Version]:
    """``owner``'s versions as the store keeps them (``record_of``), by resource."""
    found = {}
    for record in records.values():
        if record.get("owner") == owner:
            resource, version = _version_of(record)
            found[resource] = version
    return found


def _version_of(record: dict) -> tuple[str, Version]:
    """The resource a record keeps (its id) and its version."""
    expires = record.get("expires")
    plain = record.get("publication")
    publication = (
        qel.parse_publication_text(record["text"])
        if plain is None
        else model.publication_from_plain(plain)
    )
    version = Version.of(
        int(record["number"]),
        publication,
        bool(record["retracted"]),
        None if expires is None else float(expires),
    )
    return publication.id, version


def forget_records(store_pending: dict[str, dict], owner: str) -> list[str]:
    """The keys of ``owner``'s records (the owner left for good)."""
    return [key for key, record in store_pending.items() if record.get("owner") == owner]


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


def steady(notification: m.Notification, matched: dict[str, list[bool]]) -> tuple[str, ...]:
    """Of one peer's subscriptions, with which sides each ``matched`` (old, new), those an
    extension is no news for: it matched the previous version already."""
    if not notification.extension:
        return ()
    return tuple(sorted(sid for sid, (old, new) in matched.items() if old and new))


def notify_of(notification: m.Notification, matched: dict[str, list[bool]]) -> m.Notify:
    """What ``notification`` is for one peer whose subscriptions ``matched`` it (per id, which
    sides: old, new): the routing core's deliveries and the catch-ups' answers alike. The kind
    is MDV's over all of them; ``narrowed`` keeps it when it drops the steady ones."""
    return m.Notify(
        publication=notification.publication,
        subscriptions=tuple(sorted(matched)),
        owner=notification.owner,
        access_point=notification.access_point,
        origin=notification.origin,
        hops=notification.hops,
        published_at=notification.published_at,
        version=notification.version,
        kind=kind_of(
            any(old for old, _ in matched.values()), any(new for _, new in matched.values())
        ),
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
