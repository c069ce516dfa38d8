"""The peer's durable state in its data directory: ``state.json``.

It holds what the peer must re-send to its access point after every (re)connection, so that a
super-peer that lost its state is repaired by the next connection::

    {"format": 1,
     "peer_id": "peer-1a2b3c4d",                       # the peer's name (see below)
     "advertisement": "{\\"schemas\\": [\\"dc\\"]}",      # the JSON text as given, or null
     "schemas": [{"data": "...", "format": "turtle"}],   # RDFS schema documents as given
     "subscriptions": {"s1": "X : t(X, dc:title, T)"},  # id -> query text as given
     "on_change": ["s1"],                                # ids that hear of every extension
     "in_doubt": ["s2"],
     "access_point": {"node": "sp3", "address": "10.0.0.3:7400", "since": 1764108000.5,
                      "missing": 1764107990.0},
     "alternates": ["10.0.0.4:7400", "10.0.0.7:7400"],
     "expired": 0}

``access_point`` is the super-peer the peer was last attached to and the latest hybrid time it
gave the peer (``Welcome.clock``, ``Clock.clock``; the peer's own wall time only from an access
point that gave none): connected to another one, the peer says so (``Moved``, from that time), and its new access
point fetches what the old one kept and what was published meanwhile (``superpeer.node``);
``missing`` (absent: none) is from when the old one last said what it delivers may be
incomplete (``Clock.missing_since``): if it never answers, the new one catches up from there. ``expired`` counts the
notifications the network dropped while the peer was away (it says so, ``Expired``).

Texts are kept as the user gave them (not re-serialised), so what is re-sent is exactly what was
accepted. ``in_doubt`` lists subscription ids whose ``Subscribe`` was sent but whose answer never
came (the connection dropped): the access point may hold them although the user was told the
subscription failed, so the next connection withdraws them (see ``peer.session.plan_resend``).

The peer's *name* is chosen once, when the data directory is first used (``--name``, or ``peer-``
and 8 random hex digits) and never changes. What it means depends on the network:

* with TLS (the default) the network knows the peer by its key's public identifier (``pk1-...``,
  ``peer.identity``), and the name is only a local label (``peer status`` shows both). The
  identifier is not stored here: the key is its one source, so nothing can disagree with it;
* on a plaintext network (``--no-tls``) the name *is* the peer's id, as before TLS existed.

The file keeps the key ``peer_id`` (and format 1) for the name, so a data directory from the
plaintext era opens unchanged: with ``--no-tls`` it is the same peer as before; with TLS, once it
has a key (``peer keygen``), it registers as a new peer and its saved advertisement and
subscriptions are re-sent under the new identity on the first connection (notifications its access
point kept for the old plaintext id are not collected).

Every change is written atomically (``peer.files``) before the call returns.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import qel
from peer.files import remove_temporary_files, write_atomically

STATE_FORMAT: Final = 1
ON_CHANGE: Final = "change"
"""``peer subscribe --on change``: the subscription hears of extensions of resources it matched
already (``superpeer.versions``)."""
STATE_FILE: Final = "state.json"


WITHDRAWALS_KEPT_SECONDS: Final = 3600.0
"""How long a withdrawal is told again after a move: an origin's log keeps an hour by default
(``[recovery] log_seconds``), so a catch-up reaches back no further."""
MAX_WITHDRAWALS: Final = 256
"""At most this many withdrawals are kept (the most recent): each costs a request per
connection."""


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """A subscription withdrawn, with its window in its access point's hybrid times."""

    query: str
    active_since: float
    withdrawn_at: float
    recorded: float
    """This peer's wall time when the withdrawal was acknowledged (its age, for pruning)."""

    def to_plain(self) -> dict[str, object]:
        return {
            "query": self.query,
            "active_since": self.active_since,
            "withdrawn_at": self.withdrawn_at,
            "recorded": self.recorded,
        }

    @classmethod
    def from_plain(cls, value: object) -> Withdrawal:
        """Raises ``ValueError`` if ``value`` is not a withdrawal's plain form."""
        numbers = ("active_since", "withdrawn_at", "recorded")
        if not (
            isinstance(value, dict)
            and isinstance(value.get("query"), str)
            and all(
                isinstance(value.get(k), int | float) and not isinstance(value.get(k), bool)
                for k in numbers
            )
        ):
            raise ValueError("a withdrawal must be {query, active_since, withdrawn_at, recorded}")
        return cls(value["query"], *(float(value[k]) for k in numbers))


class StateError(Exception):
    """The state file cannot be used (damaged, or for another peer); the message says what to do."""


@dataclass(frozen=True, slots=True)
class PeerState:
    name: str
    """The peer's name, stored under the key ``peer_id`` (see the module docstring)."""
    advertisement: str | None = None
    subscriptions: Mapping[str, str] = field(default_factory=dict)
    in_doubt: frozenset[str] = frozenset()
    access_point: Mapping[str, object] | None = None
    expired: int = 0
    expires: Mapping[str, float] = field(default_factory=dict)
    """Per subscription id, when it expires (absolute): re-sent with it, so a reconnection
    does not make it permanent."""
    schemas: tuple[tuple[str, str], ...] = ()
    """The schema documents the access point accepted, (text, format) as given: their union
    is re-sent after every connection."""
    on_change: frozenset[str] = frozenset()
    """The subscription ids made with ``--on change`` (re-sent with it)."""
    active_since: Mapping[str, float] = field(default_factory=dict)
    """Per subscription id, the hybrid time from which its access point had it active
    (``Ack.active_since``): re-sent with it, so the access point of a peer that moved owes it
    what its catch-up finds from then on, and nothing older."""
    withdrawn: Mapping[str, Withdrawal] = field(default_factory=dict)
    """Per subscription id withdrawn in the last ``WITHDRAWALS_KEPT_SECONDS`` (at most
    ``MAX_WITHDRAWALS``): told again after every connection (``Unsubscribe.subscription``), so
    that an access point the peer moves to catches up what it was owed before the withdrawal,
    should the one it withdrew at fail before doing so."""
    alternates: tuple[str, ...] = ()
    """The other super-peers its last access point named (``Welcome.alternates``): tried
    after the configured ones when none of those can be reached, also after a restart."""

    def to_json(self) -> bytes:
        document = {
            "format": STATE_FORMAT,
            "peer_id": self.name,
            "advertisement": self.advertisement,
            "subscriptions": dict(sorted(self.subscriptions.items())),
            "in_doubt": sorted(self.in_doubt),
            "access_point": dict(self.access_point) if self.access_point is not None else None,
            "expired": self.expired,
            "expires": dict(sorted(self.expires.items())),
            "schemas": [{"data": data, "format": format} for data, format in self.schemas],
            "on_change": sorted(self.on_change),
            "active_since": dict(sorted(self.active_since.items())),
            "withdrawn": {k: w.to_plain() for k, w in sorted(self.withdrawn.items())},
            "alternates": list(self.alternates),
        }
        return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> PeerState:
        """Raises ``ValueError`` naming the first thing that is wrong."""
        document = json.loads(data)
        if not isinstance(document, dict) or document.get("format") != STATE_FORMAT:
            raise ValueError(f"not a state document of format {STATE_FORMAT}")
        name = document.get("peer_id")
        advertisement = document.get("advertisement")
        subscriptions = document.get("subscriptions")
        in_doubt = document.get("in_doubt")
        if not isinstance(name, str) or not name:
            raise ValueError("peer_id must be a non-empty string")
        if advertisement is not None and not isinstance(advertisement, str):
            raise ValueError("advertisement must be a string or null")
        if not isinstance(subscriptions, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in subscriptions.items()
        ):
            raise ValueError("subscriptions must map ids to query texts")
        if not isinstance(in_doubt, list) or not all(isinstance(i, str) for i in in_doubt):
            raise ValueError("in_doubt must be a list of ids")
        access_point = document.get("access_point")
        if access_point is not None and not (
            isinstance(access_point, dict)
            and isinstance(access_point.get("node"), str)
            and isinstance(access_point.get("address"), str)
            and isinstance(access_point.get("since"), int | float)
            and isinstance(access_point.get("missing", 0.0), int | float)
        ):
            raise ValueError("access_point must be {node, address, since[, missing]} or null")
        expired = document.get("expired", 0)
        if not isinstance(expired, int) or isinstance(expired, bool) or expired < 0:
            raise ValueError("expired must be a count")
        expires = document.get("expires", {})
        if not isinstance(expires, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in expires.values()
        ):
            raise ValueError("expires must map subscription ids to times")
        schemas = document.get("schemas", [])
        if not isinstance(schemas, list) or not all(
            isinstance(s, dict)
            and set(s) == {"data", "format"}
            and all(isinstance(v, str) for v in s.values())
            for s in schemas
        ):
            raise ValueError("schemas must be a list of {data, format}")
        on_change = document.get("on_change", [])
        if not isinstance(on_change, list) or not all(isinstance(i, str) for i in on_change):
            raise ValueError("on_change must be a list of ids")
        active_since = document.get("active_since", {})
        if not isinstance(active_since, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in active_since.values()
        ):
            raise ValueError("active_since must map subscription ids to times")
        withdrawn = document.get("withdrawn", {})
        if not isinstance(withdrawn, dict) or not all(isinstance(k, str) for k in withdrawn):
            raise ValueError("withdrawn must map subscription ids to withdrawals")
        alternates = document.get("alternates", [])
        if not isinstance(alternates, list) or not all(isinstance(a, str) for a in alternates):
            raise ValueError("alternates must be a list of addresses")
        return cls(
            name,
            advertisement,
            subscriptions,
            frozenset(in_doubt),
            access_point,
            expired,
            expires,
            tuple((s["data"], s["format"]) for s in schemas),
            frozenset(on_change),
            active_since,
            {k: Withdrawal.from_plain(v) for k, v in withdrawn.items()},
            tuple(alternates),
        )


def withdrawn_before(state: PeerState, subscriptions: Iterable[str], published_at: float) -> bool:
    """Whether every subscription a notification names was withdrawn, and not made again, no
    later than it was published (hybrid times both): the access point's own rule for a
    withdrawal (``clocks``, rule 3: only one published before it is delivered), applied to what an
    old access point that never handed the peer over kept routing to the subscriptions it
    still held for it, and hands over when the peer comes back (a chaos run on 16 super-peers
    delivered 21 such notifications, up to 124 s after their withdrawals). It took a margin of
    5 s (the catch-up margin) until stop 69, and let through two notifications published 3.2 s
    after their subscription's withdrawal (8 super-peers on hosts, seed 692); no rule owes
    one published after the withdrawal, and a notification concurrent with it (within ``L``)
    may fall either way there too. Not for an id it knows nothing of (withdrawn longer
    ago than it keeps withdrawals): that one is kept."""
    named = list(subscriptions)
    return bool(named) and all(
        sid not in state.subscriptions
        and sid in state.withdrawn
        and published_at >= state.withdrawn[sid].withdrawn_at
        for sid in named
    )


class StateStore:
    """The current ``PeerState`` and its file; every mutation is durable when it returns."""

    def __init__(self, path: Path, state: PeerState) -> None:
        self.path = path
        self._state = state

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        name: str | None,
        token_hex: Callable[[int], str] = secrets.token_hex,
    ) -> StateStore:
        """Loads the state, or creates it (choosing the name) on first use of ``data_dir``."""
        path = data_dir / STATE_FILE
        remove_temporary_files(data_dir)  # a write cut short by a crash (the daemon holds the lock)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            store = cls(path, PeerState(name or f"peer-{token_hex(4)}"))
            store._save(store._state)
            return store
        except OSError as error:
            raise StateError(f"cannot read {path}: {error.strerror}") from None
        try:
            state = PeerState.from_json(data)
        except ValueError as error:
            raise StateError(
                f"the state file {path} is damaged ({error}); move it away to start afresh "
                "(the peer then has a new name and no subscriptions)"
            ) from None
        if name is not None and name != state.name:
            raise StateError(
                f"the data directory {data_dir} belongs to peer {state.name!r}, not {name!r}; "
                "use another --data-dir for another peer"
            )
        return cls(path, state)

    @property
    def current(self) -> PeerState:
        return self._state

    def set_advertisement(self, text: str) -> None:
        self._save(replace(self._state, advertisement=text))

    def add_schema(self, text: str, format: str) -> None:
        if (text, format) not in self._state.schemas:
            self._save(replace(self._state, schemas=(*self._state.schemas, (text, format))))

    def add_subscription(
        self,
        subscription_id: str,
        text: str,
        expires: float | None = None,
        *,
        on_change: bool = False,
        active_since: float = 0.0,
    ) -> None:
        subscriptions = {**self._state.subscriptions, subscription_id: text}
        deadlines = {k: v for k, v in self._state.expires.items() if k != subscription_id}
        if expires is not None:
            deadlines[subscription_id] = expires
        changes = self._state.on_change - {subscription_id}
        if on_change:
            changes |= {subscription_id}
        activations = {k: v for k, v in self._state.active_since.items() if k != subscription_id}
        if active_since > 0:
            activations[subscription_id] = active_since
        self._save(
            replace(
                self._state,
                subscriptions=subscriptions,
                in_doubt=self._state.in_doubt - {subscription_id},
                expires=deadlines,
                on_change=changes,
                active_since=activations,
            )
        )

    def set_active_since(self, subscription_id: str, active_since: float) -> None:
        """What an access point said of a subscription sent again (``Ack.active_since``)."""
        current = self._state.active_since.get(subscription_id)
        known = subscription_id in self._state.subscriptions
        if known and active_since > 0 and current != active_since:
            activations = {**self._state.active_since, subscription_id: active_since}
            self._save(replace(self._state, active_since=activations))

    def remove_subscription(
        self, subscription_id: str, *, withdrawn_at: float = 0.0, now: float = 0.0
    ) -> None:
        """The access point acknowledged the withdrawal (at hybrid time ``withdrawn_at``, if it
        said; ``now`` is this peer's wall time): the subscription is kept a while as a
        ``Withdrawal``, and those older than ``WITHDRAWALS_KEPT_SECONDS`` are dropped."""
        subscriptions = dict(self._state.subscriptions)
        text = subscriptions.pop(subscription_id)
        deadlines = {k: v for k, v in self._state.expires.items() if k != subscription_id}
        made = self._state.active_since.get(subscription_id, 0.0)
        withdrawn = {
            k: w
            for k, w in self._state.withdrawn.items()
            if k != subscription_id and now - w.recorded < WITHDRAWALS_KEPT_SECONDS
        }
        if made > 0 and withdrawn_at > 0:
            withdrawn[subscription_id] = Withdrawal(text, made, withdrawn_at, now)
        newest = sorted(withdrawn.items(), key=lambda item: item[1].recorded)[-MAX_WITHDRAWALS:]
        self._save(
            replace(
                self._state,
                subscriptions=subscriptions,
                expires=deadlines,
                on_change=self._state.on_change - {subscription_id},
                active_since={
                    k: v for k, v in self._state.active_since.items() if k != subscription_id
                },
                withdrawn=dict(newest),
            )
        )

    def mark_in_doubt(self, subscription_id: str) -> None:
        self._save(replace(self._state, in_doubt=self._state.in_doubt | {subscription_id}))

    def resolve_in_doubt(self, subscription_id: str) -> None:
        if subscription_id in self._state.in_doubt:
            self._save(replace(self._state, in_doubt=self._state.in_doubt - {subscription_id}))

    def set_access_point(self, node: str, address: str, since: float, missing: float = 0.0) -> None:
        """The super-peer the peer is attached to, the latest hybrid time it gave, and from
        when it last said what it delivers may be incomplete (0: it did not)."""
        point = {"node": node, "address": address, "since": since}
        if missing:
            point["missing"] = missing
        self._save(replace(self._state, access_point=point))

    def set_alternates(self, addresses: tuple[str, ...]) -> None:
        """The other super-peers the access point named (``PeerState.alternates``)."""
        if addresses != self._state.alternates:
            self._save(replace(self._state, alternates=addresses))

    def add_expired(self, count: int) -> None:
        self._save(replace(self._state, expired=self._state.expired + count))

    def clear_network_state(self) -> None:
        """After leaving the network: nothing is left to re-send (the name and the key stay)."""
        self._save(PeerState(self._state.name))

    def _save(self, state: PeerState) -> None:
        write_atomically(self.path, state.to_json())
        self._state = state


def subscription_id(subscription: qel.Subscription) -> str:
    """The default id of a subscription: a hash of its canonical text, so the same query (however
    it is laid out) subscribed twice gets the same id, which the access point treats as a repeat."""
    return "q-" + hashlib.sha256(subscription.to_text().encode()).hexdigest()[:10]


@dataclass(frozen=True, slots=True)
class ParsedState:
    """The state's texts as language objects, ready to send; ``problems`` lists stored texts
    that no longer parse (possible only after an upgrade of the language), which are not sent."""

    advertisement: qel.Advertisement
    subscriptions: Mapping[str, qel.Subscription]
    problems: tuple[str, ...]
    axioms: frozenset[qel.Axiom] = frozenset()
    """The union of the stored schemas."""
    withdrawn: Mapping[str, tuple[qel.Subscription, float, float]] = field(default_factory=dict)
    """The kept withdrawals: (subscription, active since, withdrawn at)."""


def parse_state(state: PeerState) -> ParsedState:
    problems = []
    advertisement = qel.parse_advertisement({})
    if state.advertisement is not None:
        try:
            advertisement = qel.parse_advertisement(state.advertisement)
        except qel.AdvertisementError as error:
            problems.append(f"the stored advertisement no longer parses: {error}")
    subscriptions = {}
    for name, text in sorted(state.subscriptions.items()):
        try:
            subscriptions[name] = qel.parse_subscription(text)
        except qel.QueryError as error:
            problems.append(f"the stored subscription {name!r} no longer parses: {error}")
    axioms: set[qel.Axiom] = set()
    for number, (text, format) in enumerate(state.schemas, start=1):
        try:
            axioms |= qel.parse_schema(text, format)
        except qel.SchemaError as error:
            problems.append(f"the stored schema {number} no longer parses: {error}")
    withdrawn = {}
    for name, withdrawal in sorted(state.withdrawn.items()):
        try:
            query = qel.parse_subscription(withdrawal.query)
        except qel.QueryError:
            continue  # a withdrawn query that no longer parses is owed nothing more
        withdrawn[name] = (query, withdrawal.active_since, withdrawal.withdrawn_at)
    return ParsedState(advertisement, subscriptions, tuple(problems), frozenset(axioms), withdrawn)
