"""The messages super-peers exchange to keep the cube: frozen, keyword-only, slotted dataclasses.

Every field is a plain value (str, int, bool, None, tuples and str-keyed dicts of those), so that a
generic codec can encode them by field name; each class names itself on the wire with ``KIND``.
Messages validate and normalise themselves when built (lists become tuples, position lists are
sorted), so a decoded message compares equal to the one that was sent.

Node ids are strings; a node's address (``"host:port"``) travels wherever a node learns of a node it
may have to connect to. A *peer table* (``PeerTable``) maps node ids to ``(address, positions)``:
what those nodes hold, as they last announced it.

``epoch`` counts the cube's changes of dimension (each grow or shrink adds one); a message is only
processed by a node in the same epoch (``Grow`` / ``Shrink``: the epoch before), see
``hypercup.node``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final

from hypercup.errors import MessageError

PeerTable = dict[str, tuple[str, tuple[int, ...]]]
"""node id -> (address, positions held, ascending)."""

ROUTE: Final = "route"
SEARCH: Final = "search"
_PHASES: Final = (ROUTE, SEARCH)


def _check_int(owner: object, name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MessageError(f"{type(owner).__name__}.{name} must be an int >= {minimum}: {value!r}")


def _check_str(owner: object, name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise MessageError(f"{type(owner).__name__}.{name} must be a non-empty string: {value!r}")


def _positions(owner: object, name: str, value: object) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise MessageError(f"{type(owner).__name__}.{name} must be a list of positions: {value!r}")
    for position in value:
        _check_int(owner, name, position, 0)
    if len(set(value)) != len(value) or not value:
        raise MessageError(f"{type(owner).__name__}.{name} must list distinct positions: {value!r}")
    return tuple(sorted(value))


def _peer_table(owner: object, name: str, value: object) -> PeerTable:
    if not isinstance(value, Mapping):
        raise MessageError(f"{type(owner).__name__}.{name} must map node ids to entries")
    table: PeerTable = {}
    for node, entry in value.items():
        _check_str(owner, name, node)
        if not isinstance(entry, list | tuple) or len(entry) != 2:
            raise MessageError(
                f"{type(owner).__name__}.{name}[{node!r}] must be (address, positions): {entry!r}"
            )
        address, positions = entry
        _check_str(owner, name, address)
        table[node] = (address, _positions(owner, name, positions))
    return table


def _normalise(message: Any, **values: object) -> None:
    for name, value in values.items():
        object.__setattr__(message, name, value)


def _check_carried(owner: Any) -> None:
    """``carried``, ``carried_positions``: a failed member departing with the leaver, or none."""
    if not isinstance(owner.carried, str):
        raise MessageError(f"{type(owner).__name__}.carried must be a node id: {owner.carried!r}")
    if owner.carried:
        _normalise(
            owner,
            carried_positions=_positions(owner, "carried_positions", owner.carried_positions),
        )
        _check_int(owner, "carried_incarnation", owner.carried_incarnation, 0)
    elif owner.carried_positions:
        raise MessageError(f"{type(owner).__name__}.carried_positions without a carried node")
    else:
        _normalise(owner, carried_positions=())


class _Validated:
    """Checks the fields every message shares; subclasses add their own in ``_validate``."""

    __slots__ = ()

    def __post_init__(self) -> None:
        names = {f.name for f in fields(self)}  # type: ignore[arg-type]
        for name in (
            "epoch",
            "dimension",
            "position",
            "column",
            "root",
            "target",
            "incarnation",
            "newcomer_incarnation",
            "anchor_incarnation",
            "leaver_incarnation",
            "detours",
        ):
            if name in names:
                _check_int(self, name, getattr(self, name), 0)
        for name in (
            "address",
            "newcomer",
            "newcomer_address",
            "leaver",
            "leaver_address",
            "base_holder",
            "base_address",
            "absent",
            "avoid",
            "requester",
            "requester_address",
            "holder",
        ):
            if name in names:
                _check_str(self, name, getattr(self, name))
        for name in ("peers", "holders", "leaver_peers"):
            if name in names:
                _normalise(self, **{name: _peer_table(self, name, getattr(self, name))})
        for name in ("positions", "leaver_positions"):
            if name in names:
                _normalise(self, **{name: _positions(self, name, getattr(self, name))})
        self._validate()

    def _validate(self) -> None:
        """Per-message checks beyond the shared ones."""


# -- joining ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinRequest(_Validated):
    """Newcomer -> any member: please integrate me (the newcomer's id is the sender)."""

    KIND: ClassVar[str] = "hypercup.join_request"
    address: str
    incarnation: int = 0
    """The newcomer's incarnation (0: not told), carried to its ``Welcome``. The protocol does
    not use it; the runtime around it fills it in from the link the request came on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinRefused(_Validated):
    """Member -> newcomer: not now (``reason``): the newcomer's id is still in the cube (a
    restarted node whose old incarnation has not been repaired yet), or the contact takes part in
    a departure, which must run alone. The newcomer tries again later."""

    KIND: ClassVar[str] = "hypercup.join_refused"
    reason: str
    member: bool
    """Whether the contact is in the cube (else it is out of it itself: between two attempts
    to join again, or leaving)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinWalk(_Validated):
    """A join travelling to the holder of the lowest doubled column, which hands its mirror over.

    ``route``: toward the anchor position ``TOP - 1``, one dimension per hop. ``search``: a binary
    search from the anchor over the bits of the column, highest first (``bit`` is the next bit to
    test; -1 when done), or, for a walk the anchor of a full cube sent to a column its census
    found doubled, straight to that column (``position``; ``bit`` -1), one dimension per hop.
    ``admitted`` once the anchor counted it as in flight; ``anchor`` is then who to report to."""

    KIND: ClassVar[str] = "hypercup.join_walk"
    epoch: int
    newcomer: str
    newcomer_address: str
    newcomer_incarnation: int = 0
    phase: str
    position: int
    bit: int
    admitted: bool
    anchor: str | None
    anchor_address: str | None
    anchor_incarnation: int = 0
    """The anchor's process, as the runtime filled it in when the anchor sent the walk (0: not
    told). The member that takes the walk reports to the anchor, which it may know only from
    before a restart: its report, meant for that process, was dropped by the link."""

    def _validate(self) -> None:
        if self.phase not in _PHASES:
            raise MessageError(f"JoinWalk.phase must be one of {_PHASES}: {self.phase!r}")
        _check_int(self, "bit", self.bit, -1)
        if self.admitted != (self.anchor is not None) or (self.anchor is None) != (
            self.anchor_address is None
        ):
            raise MessageError("JoinWalk: an admitted walk names its anchor and its address")
        if self.anchor_incarnation and not self.admitted:
            raise MessageError("JoinWalk: a walk not admitted has no anchor's incarnation")
        if self.phase == SEARCH and not self.admitted:
            raise MessageError("JoinWalk: only an admitted walk searches")


@dataclass(frozen=True, slots=True, kw_only=True)
class Welcome(_Validated):
    """Old holder -> newcomer: you now hold ``position``; ``peers`` hold its neighbours."""

    KIND: ClassVar[str] = "hypercup.welcome"
    epoch: int
    dimension: int
    position: int
    peers: PeerTable
    incarnation: int = 0
    """The newcomer's incarnation this admits (its ``JoinRequest.incarnation``): the old holder
    may never have heard from it, the join having come through other members."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NeighbourUpdate(_Validated):
    """These nodes now hold exactly these positions.

    With ``relay`` the receiver is the base holder of a column next to the change and passes the
    update on to the newcomer of its column, if it has one. With an ``ack_id`` the receiver answers
    ``UpdateAck`` once the update (and its relay) has been applied."""

    KIND: ClassVar[str] = "hypercup.neighbour_update"
    epoch: int
    holders: PeerTable
    relay: bool
    ack_id: int | None

    def _validate(self) -> None:
        if self.ack_id is not None:
            _check_int(self, "ack_id", self.ack_id, 0)
        if self.relay and self.ack_id is None:
            raise MessageError("NeighbourUpdate: a relayed update is acknowledged")
        if not self.holders:
            raise MessageError("NeighbourUpdate: holders is empty")


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateAck(_Validated):
    KIND: ClassVar[str] = "hypercup.update_ack"
    epoch: int
    ack_id: int

    def _validate(self) -> None:
        _check_int(self, "ack_id", self.ack_id, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinDone(_Validated):
    """New holder's old owner -> anchor: the join is complete and every table is updated."""

    KIND: ClassVar[str] = "hypercup.join_done"
    epoch: int
    newcomer: str
    newcomer_incarnation: int = 0
    """The incarnation whose walk is over (0: not told, an older sender): a report on an
    earlier incarnation's walk ends no wait for a later one's (``Joins._join_done``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Grow(_Validated):
    """Broadcast along the tree of position ``root``: every position ``x`` is mirrored into
    ``2**(dimension-1) | x``; the cube now has ``dimension`` dimensions."""

    KIND: ClassVar[str] = "hypercup.grow"
    epoch: int
    dimension: int
    root: int
    resent: bool = False
    """Sent again to a node that missed it (``ChangeRequest``), outside the tree."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Census(_Validated):
    """Down the tree of position ``root``, before the anchor of a full cube grows it: which
    columns are doubled still, and may the cube grow? (A departure can leave a column below
    the anchor's doubled while the anchor's is split; a grow then meets a super-peer holding
    two positions.) Each receiver answers its parent (at ``address``) once its children have."""

    KIND: ClassVar[str] = "hypercup.census"
    epoch: int
    origin: str
    """The anchor that asked (with ``census``, the census's name)."""
    census: int
    root: int
    address: str
    """The sender's, for the answer (the receiver may be out of the cube by now)."""
    wanted: int
    """The joins waiting at the anchor: at most this many doubled columns are reported."""

    def _validate(self) -> None:
        _check_str(self, "origin", self.origin)
        _check_int(self, "census", self.census, 1)
        _check_int(self, "wanted", self.wanted, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class CensusReply(_Validated):
    """Child -> parent: the lowest doubled columns in its subtree (at most ``wanted``), and
    whether nothing else there stands in a grow's way (a super-peer in another epoch or out
    of the cube, holding positions other than one or a doubled column, taking part in a take
    or a departure, or with a neighbour failed and unrepaired; a child that did not answer)."""

    KIND: ClassVar[str] = "hypercup.census_reply"
    epoch: int
    origin: str
    census: int
    doubled: tuple[int, ...]
    ready: bool

    def _validate(self) -> None:
        _check_str(self, "origin", self.origin)
        _check_int(self, "census", self.census, 1)
        if not isinstance(self.doubled, list | tuple):
            raise MessageError(f"CensusReply.doubled must be a list of columns: {self.doubled!r}")
        for column in self.doubled:
            _check_int(self, "doubled", column, 0)
        _normalise(self, doubled=tuple(sorted(set(self.doubled))))
        if not isinstance(self.ready, bool):
            raise MessageError(f"CensusReply.ready must be a bool: {self.ready!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shrink(_Validated):
    """Broadcast along the tree of position ``root`` (0): drop the top dimension. ``absent`` (the
    departing node) takes no part; its children in the tree hear from whoever started it."""

    KIND: ClassVar[str] = "hypercup.shrink"
    epoch: int
    dimension: int
    root: int
    absent: str
    resent: bool = False
    """Sent again to a node that missed it (``ChangeRequest``), outside the tree."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeRequest(_Validated):
    """A node still in epoch ``since`` holds messages of a later one: the ``Grow`` or ``Shrink``
    that began it never reached it (the tree it came down ran through a member that failed).
    The receiver sends the changes it applied since then again (``resent``)."""

    KIND: ClassVar[str] = "hypercup.change_request"
    since: int
    address: str
    """The asker's (after a shrink it may be no neighbour of the receiver any more)."""

    def _validate(self) -> None:
        _check_int(self, "since", self.since, 0)


# -- leaving ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveWalk(_Validated):
    """A departure (announced, or a failure being repaired) travelling to the last split column.

    It carries the departing node's positions and peer table, so that any node can take the
    departed node's steps (it may be dead) and so that its successor can take its place. ``route``:
    toward position 0. ``search``: binary search over the bits of the column, highest first."""

    KIND: ClassVar[str] = "hypercup.leave_walk"
    epoch: int
    dimension: int
    leaver: str
    leaver_address: str
    leaver_positions: tuple[int, ...]
    leaver_peers: PeerTable
    failed: bool
    phase: str
    position: int
    bit: int
    leaver_incarnation: int = 0
    """The departing node's incarnation, as the node that started the walk knew it (0: not
    known), carried to the ``Departed`` of its successor. The protocol does not use it."""
    leaver_heard: float = 0.0
    """When the departing node was last heard from, as the node that started the walk said
    (``Departed.last_heard``). The protocol does not use it."""
    carried: str = ""
    """A failed member that departs with ``leaver`` (``hypercup._departures``, "Overlapping
    failures"): the newcomer that held the mirror of the leaver's column, failed too. Its
    positions are among ``leaver_positions``; whoever takes them reports it departed too."""
    carried_positions: tuple[int, ...] = ()
    carried_incarnation: int = 0
    carried_heard: float = 0.0
    repairer: str = ""
    """The member that started the repair of a failed ``leaver`` ("" for a departure the
    leaver announced, or a sender that does not say): a second repair of one failure, started
    beside the first by a fallback repairer, is dropped where the two meet
    (``hypercup._departures``, "Once")."""
    failed_too: tuple[str, ...] = ()
    """Other members the nodes on the walk's way know to have failed (their own failed
    neighbours, and those named by the repair's lookups): the walk is never sent to one of
    them, since it would be lost with it (``hypercup._departures``, "Overlapping failures")."""

    def _validate(self) -> None:
        if self.phase not in _PHASES:
            raise MessageError(f"LeaveWalk.phase must be one of {_PHASES}: {self.phase!r}")
        _check_int(self, "bit", self.bit, -1)
        if not isinstance(self.failed_too, list | tuple):
            raise MessageError(
                f"LeaveWalk.failed_too must be a list of node ids: {self.failed_too!r}"
            )
        for node in self.failed_too:
            _check_str(self, "failed_too", node)
        _normalise(self, failed_too=tuple(sorted(set(self.failed_too))))
        _check_carried(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reclaim(_Validated):
    """-> the newcomer of the last split column: take the departing node's positions.

    If ``base_holder`` is the departing node, keep your mirror too (you now hold the whole column);
    otherwise give the mirror back to ``base_holder`` (``ReturnTop``)."""

    KIND: ClassVar[str] = "hypercup.reclaim"
    epoch: int
    dimension: int
    column: int
    base_holder: str
    base_address: str
    leaver: str
    leaver_address: str
    leaver_positions: tuple[int, ...]
    leaver_peers: PeerTable
    failed: bool
    leaver_incarnation: int = 0
    leaver_heard: float = 0.0
    carried: str = ""
    """As ``LeaveWalk.carried``."""
    carried_positions: tuple[int, ...] = ()
    carried_incarnation: int = 0
    carried_heard: float = 0.0

    def _validate(self) -> None:
        _check_carried(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReturnTop(_Validated):
    """Newcomer -> base holder of its column: the mirror is yours again; ``peers`` hold its
    neighbours."""

    KIND: ClassVar[str] = "hypercup.return_top"
    epoch: int
    column: int
    leaver: str
    peers: PeerTable


@dataclass(frozen=True, slots=True, kw_only=True)
class Released(_Validated):
    """-> the departing node: your positions have a new holder; you may go."""

    KIND: ClassVar[str] = "hypercup.released"


@dataclass(frozen=True, slots=True, kw_only=True)
class Lookup(_Validated):
    """Who holds ``target``? Routed toward it around the failed node ``avoid``; the first node that
    knows answers ``requester`` directly."""

    KIND: ClassVar[str] = "hypercup.lookup"
    epoch: int
    target: int
    avoid: str
    requester: str
    requester_address: str
    visited: tuple[str, ...] = ()
    """The members that passed it on, in order (the requester first): it is passed to none of
    them again. Only the last one excluded, a lookup went round one face of the cube, back
    through its requester, until its detours were spent, and was asked again the same way
    for 30 s (``python -m bench.chaos_replay --superpeers 16``, seed 2)."""
    detours: int = 0
    """Hops it took away from ``target`` so far, round failed members when no live hop was
    closer (at most the cube's dimension: ``Departures._route_lookup``)."""

    def _validate(self) -> None:
        if not isinstance(self.visited, list | tuple):
            raise MessageError(f"Lookup.visited must be a list of node ids: {self.visited!r}")
        for node in self.visited:
            _check_str(self, "visited", node)
        _normalise(self, visited=tuple(self.visited))


@dataclass(frozen=True, slots=True, kw_only=True)
class LookupReply(_Validated):
    KIND: ClassVar[str] = "hypercup.lookup_reply"
    epoch: int
    target: int
    holder: str
    address: str
    positions: tuple[int, ...]
    failed: bool = False
    """Whether the answering node's runtime reported ``holder`` failed (a neighbour of the node
    being repaired that failed too: the repair's walk must not be sent to it)."""
    failed_incarnation: int = 0
    failed_heard: float = 0.0
    """With ``failed``: the incarnation and last-heard time the answerer's runtime gave (for the
    ``Departed`` of a failed node carried by the repair: ``LeaveWalk.carried``)."""


Message = (
    JoinRequest
    | JoinRefused
    | JoinWalk
    | Welcome
    | NeighbourUpdate
    | UpdateAck
    | JoinDone
    | Grow
    | Census
    | CensusReply
    | Shrink
    | LeaveWalk
    | Reclaim
    | ReturnTop
    | Released
    | Lookup
    | LookupReply
)

MESSAGE_TYPES: Final[Mapping[str, type[Message]]] = {
    cls.KIND: cls
    for cls in (
        JoinRequest,
        JoinRefused,
        JoinWalk,
        Welcome,
        NeighbourUpdate,
        UpdateAck,
        JoinDone,
        Grow,
        Census,
        CensusReply,
        Shrink,
        ChangeRequest,
        LeaveWalk,
        Reclaim,
        ReturnTop,
        Released,
        Lookup,
        LookupReply,
    )
}
"""Every message class by its ``KIND``, for codecs."""
