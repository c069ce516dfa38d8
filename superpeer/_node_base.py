"""What every part of ``SuperPeerNode`` shares: its state (built in one place, so that the
parts cannot disagree on it), the constants of its store's pending tables, and the plumbing
(sending, tracing, numbering). The parts are mixins over ``NodeBase``, as ``hypercup``'s
``Joins`` and ``Departures`` are over its ``NodeCore``; the spec is ``superpeer.node``'s
docstring."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import secrets
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import qel
import wire
from clocks import HybridClock, OffsetEstimator, correction_of, sample_of
from hypercup import HypercupNode
from hypercup.positions import tree_parent_position
from superpeer.access import AccessPointSession, Request
from superpeer.actions import (
    Action,
    ToConnection,
    ToSuperPeer,
)
from superpeer.core import CoreConfig, SuperPeerCore, trace_record
from superpeer.expiry import SubscriptionExpiries
from superpeer.locating import Locator, LocatorConfig
from superpeer.mailroom import Mailroom, mail_key
from superpeer.ratelimit import PeerRateLimiter, RateLimits
from superpeer.rendezvous import Rendezvous, RendezvousConfig
from superpeer.store import Store
from superpeer.trace import TraceRecord
from wire import messages as m
from wire.framing import Received

if TYPE_CHECKING:
    from superpeer._restoring import PreparedRestore

log = logging.getLogger("superpeer")
# peer messages the node handles itself (the core traces the others when it handles them)
OUTSIDE_CORE = (m.Delivered, m.Moved, m.Leave, m.Clock)
# backbone messages the node handles itself
FROM_ANY = (
    m.Evicted,
    m.CatchUp,
    m.ReplayRequest,
    m.Mail,
    m.HandoverDone,
    m.HandoverReceived,
    m.Adopt,
    m.Versions,
    m.AdoptLog,
    m.LogCopy,
    m.LogCopied,
)
"""What is taken from a departed or replaced incarnation too: it does not depend on its routing
state (mail is publications, kept once; an eviction names the incarnation it is about; a
leaver's hand-over of its peers, their versions and its publication log is theirs, not its
membership's: a leave across a cut ends with the leaver evicted, and what it handed over
reaches its successor only after the heal)."""
RENDEZVOUS_MESSAGES = (m.RendezvousRequest, m.RendezvousChunk)
DIRECT_LOOKUPS = (m.LocateDirect, m.LocateReply)
NODE_HANDLED = (
    m.Evicted,
    m.Heartbeat,
    m.CatchUp,
    m.ReplayRequest,
    m.Mail,
    m.Handover,
    m.HandoverDone,
    m.HandoverReceived,
    m.AdoptLog,
    m.LogCopy,
    m.LogCopied,
    *RENDEZVOUS_MESSAGES,
    *DIRECT_LOOKUPS,
)
RESOURCE_REQUESTS = (m.Fetch, m.Upload, m.Collect, m.Collected)
"""Peer messages for ``superpeer.rendezvous``; only ``Fetch`` is answered."""
T = TypeVar("T")
E = TypeVar("E", m.Subscribe, m.Publish)
Output = Action | TraceRecord
HANDOVERS = "handover"
HANDED = "handed"
"""Handovers answered, whose mail is kept until the asker says it has it."""
MAX_FORWARD_HOPS = 16
"""Forwarding addresses lead to where a peer is; a chain longer than this is a bug (logged)."""
MOVED = "moved"
ADOPTED = "adopted"
MOVES = "move-statement"
"""Per local peer, its last move statement (what a holder shows to claim the peer back from an
access point that returned with an older copy of its state)."""
CLOCK_LOG_SECONDS = 600.0
"""A clock found beyond ``max_clock_offset_seconds`` is logged at most this often."""
ATTACHED = "attached"
"""Per local peer, the last time it was attached here."""
WITHDRAWN = "withdrawn"
"""Per withdrawn subscription, its window (``NodeBase._withdrawn``): kept durably, so that a
catch-up after a restart still covers what it was owed while it stood."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    routing: CoreConfig = field(default_factory=CoreConfig)
    heartbeat_seconds: float | None = 1.0
    """A link idle this long carries a ``Heartbeat`` (None: no supervision, for simulations
    without failures)."""
    failure_seconds: float = 10.0
    """A neighbour silent this long has failed."""
    wedged_seconds: float = 60.0
    """A topology operation still unfinished after this long is wedged (what HyperCuP cannot
    untangle: a grow or shrink overtaking a repair): this node rejoins."""
    reform_seconds: float = 30.0
    """A neighbour declared failed and still unrepaired after this long cannot be repaired from
    this side (a cut left it without the members the repair needs): this node rejoins, and
    its side re-forms as a cube of its own (``superpeer._merging``, "Re-forming"); a
    rejoining node's contact silent this long is taken for out of reach."""
    admission_seconds: float = 10.0
    """TLS, ``Hello`` and identification of a peer connection, all of it."""
    max_unidentified_per_address: int = 32
    """Peer connections from one address that have not identified yet."""
    window: int = 64
    """Notifications sent to a peer and not yet acknowledged."""
    retention_seconds: float = 7 * 86400.0
    """How long mail is kept for a peer that does not come back."""
    max_kept_per_peer: int = 100_000
    """Mail kept per peer; beyond it, the oldest goes (counted and told)."""
    log_seconds: float = 3600.0
    """How long an origin keeps its publications for catch-up."""
    max_logged: int = 100_000
    log_copy: bool = True
    """An origin's log entry is copied to a neighbour before the publisher's ``Ack``
    (``superpeer._replication``): what it accepted survives its loss, disk and all. False: one
    copy, as durable as the origin's disk."""
    copy_wait_seconds: float = 1.0
    """A neighbour's ``LogCopied`` is waited for this long before the next neighbour is tried
    (and the ``Ack`` leaves with one copy after ``COPY_ATTEMPTS``)."""
    catchup_margin_seconds: float = 5.0
    """Catch-ups and replays ask for this much more hybrid time than strictly needed: a
    publication concurrent with a subscription may carry an earlier hybrid time by as much as a
    reading takes to reach every super-peer (``clocks``, rules 2 and 5), whatever the clocks'
    offsets; repeats are dropped."""
    max_clock_offset_seconds: float = 1.0
    """A neighbour's or an attached peer's clock further off than this (measured, ``clocks``)
    is reported: logged, in ``/readyz`` and the status (nothing is refused)."""
    max_clock_lead_seconds: float = 86400.0
    """A hybrid time further ahead of this node's wall time is not absorbed (``clocks``,
    rule 9)."""
    clock_sample_seconds: float = 10.0
    """A neighbour's clock is measured at least this often (a heartbeat on a busy link), an
    attached peer's likewise (``Clock``)."""
    merge_probe_seconds: float = 5.0
    """A member probes one super-peer its cube declared failed this often (each one backing off
    to five minutes): a partition that healed is noticed (``superpeer._merging``)."""
    merge_delay_seconds: float = 0.5
    """A member of the weaker of two cubes that met rejoins this long after it told its cube
    (the ``Merge`` broadcast leaves first)."""
    rejoin_seconds: float = 1.0
    """Wait before asking again after a join refused by a member, or by every contact in a
    round (one that is no member sends the next request at once: ``SuperPeerNode._refused``)."""
    handover_seconds: float = 5.0
    """Wait for a previous access point's answer before catching up from the origins."""
    catchup_retry_seconds: float = 10.0
    """A catch-up whose answer has not all come this long after it was asked (or after the
    last part of it that came) is asked again, then after twice as long, and so on until
    ``log_seconds``: the request or its answer may have been lost with a link (a super-peer
    mid-rejoin, a cut), and nothing else would ask again (``superpeer._catchup``). Looked at
    whenever the node's timer fires (heartbeats, housekeeping), so up to
    ``housekeeping_seconds`` late: ``next_deadline``, asked after every input, stays a
    running minimum of a few fields rather than one over every request."""
    housekeeping_seconds: float = 5.0
    """How often the node notes it is alive, expires mail and prunes its log."""
    mail_batch: int = 200
    """Notifications per ``Mail`` message at most (fewer when they would not fit a frame)."""
    max_held_requests: int = 1000
    """Requests of a peer held while its previous access point hands over the versions of its
    resources (``Migrations._release_held``); more close its connection."""
    max_frame_bytes: int = 1024 * 1024
    """The largest frame a link carries (``[limits] max_frame_bytes``): a ``Mail``, ``CatchUp``
    or ``AdoptLog`` is split to fit it (``superpeer._batches``)."""
    restore_collection_from: int = 10_000
    """A restore of this many subscriptions or more ends with a full garbage collection, before
    the join request leaves (``superpeer._restoring.prepare_restore``)."""
    placements_per_step: int = 50
    """Subscriptions placed in the poset per step at most: beyond, inputs wait and the timer
    places the next slice (``superpeer._backlog``), so that a burst never holds the runtime's
    loop for long (the digital library's 20,000th subscription takes some 15 ms to place on a
    loaded machine: 50, 0.7 s)."""
    catchup_batch: int = 200
    """Subscriptions per ``CatchUp`` request: a restart with 10^5 asked for all of them in one
    request of 27 MB, beyond any frame, and the daemon died sending it."""
    rendezvous: RendezvousConfig = field(default_factory=RendezvousConfig)
    locating: LocatorConfig = field(default_factory=LocatorConfig)
    rates: RateLimits = field(default_factory=RateLimits)
    """Per-peer rates of publications, subscriptions and look-ups (``superpeer.ratelimit``)."""


@dataclass
class RefusedForNow:
    """A handover refused because its peer is attached here (``Migrations._handover_out``),
    answered when the peer's connection ends."""

    asker: str
    request: m.Handover
    silent_by: float | None
    """The refusal sent the peer a ``Clock``, which a live peer answers: unless the peer says
    something on its connection first, the connection is closed as dead at this time (None: it
    did, the peer is there)."""


@dataclass
class ForwardingAddress:
    """Where a peer that moved away went (its forwarding address)."""

    node: str
    address: str
    forget_at: float | None
    """When its subscriptions here go (None: gone)."""
    expires_at: float
    """When the address is forgotten (``retention_seconds``: nothing kept lives longer)."""

    def saved(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def restored(cls, entry: dict) -> ForwardingAddress:
        forget_at = entry.get("forget_at", entry.get("until"))  # "until": stores before 2026-11
        expires_at = entry.get("expires_at", forget_at or 0.0)
        return cls(entry["node"], entry["address"], forget_at, expires_at)


@dataclass
class NodeStatistics:
    auth_failures: int = 0
    violations: int = 0
    refused_connections: int = 0
    failures_detected: int = 0
    repairs: int = 0
    rejoins: int = 0
    catchups_asked: int = 0
    catchups_asked_again: int = 0
    """Catch-up requests not answered in time, asked again (``CatchUps._ask_again``)."""
    catchups_served: int = 0
    recovered: int = 0
    replayed: int = 0
    """Notifications this origin sent again for subscriptions that reached it late."""
    gaps: int = 0
    """Gap notices put in local peers' inboxes (``superpeer._catchup``)."""
    copies_sent: int = 0
    """Log entries this origin sent a neighbour to copy (``superpeer._replication``)."""
    copies_kept: int = 0
    """Neighbours' log entries copied here."""
    unreplicated: int = 0
    """Publications acknowledged with this origin's copy alone (no neighbour answered)."""
    copied_late: int = 0
    """Of those, the entries copied to a neighbour since (``superpeer._replication``, rule 6)."""
    copied_again: int = 0
    """Entries copied again after the holder of their copy was lost (rule 9)."""
    handovers_in: int = 0
    handovers_out: int = 0
    waited: int = 0
    """Inputs (and pieces of an ``Adopt``) that waited behind a burst of placements
    (``superpeer._backlog``)."""
    forwarded: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    bytes_sent: Counter[str] = field(default_factory=Counter)


@dataclass
class PeerConnection:
    session: AccessPointSession
    host: str
    counted: bool = True
    """Still counted against its address's limit of unidentified connections."""


@dataclass(slots=True)
class PendingCopy:
    """Log entries copied together, in one ``LogCopy`` (``superpeer._replication``), and the
    publishers' connections whose answers wait for its ``LogCopied``."""

    request: str
    notifications: list[m.Notification]
    size: int
    """Their encodings' bytes (a ``LogCopy`` fits a frame)."""
    connections: list[int] = field(default_factory=list)
    """The publishers' connections where an ``Ack`` waits, each once, in order."""
    tried: list[str] = field(default_factory=list)
    """The neighbours sent it, in order."""
    deadline: float = 0.0
    """When the last of them is given up on (sent: in ``_copies``; queued behind a copy in
    flight to the same neighbour: not yet)."""
    owed: tuple[str, ...] = ()
    """For a copy made late (rule 6): the keys of the entries it copies in the record of
    copies owed; none for a copy made before an ``Ack``."""
    remade_through: float | None = None
    """For a copy made again (rule 9): the time up to which the first span to copy again is
    copied once it is answered."""

    @property
    def late(self) -> bool:
        """Made late (rule 6) or again (rule 9): it releases no answer, and is one at a time."""
        return bool(self.owed) or self.remade_through is not None


@dataclass
class AskedCatchUp:
    """A catch-up asked of another super-peer and not answered whole yet."""

    target: str
    """The super-peer asked: the origin itself, or one holding copies of ``origin``'s log."""
    origin: str
    """The origin it was asked about ("": the target's own log, gap notices and all)."""
    entries: tuple[tuple[str, str, qel.Subscription, float, float], ...]
    """What it asked for: (peer, subscription id, subscription, since, until)."""
    waiting: set[str]
    """The peers whose answer is still to come (the last ``Mail`` for each ends it)."""
    asked_at: float
    """Local time it was first asked (given up ``log_seconds`` later)."""
    due: float
    """Local time it is asked again if still not answered whole."""
    tries: int = 1

    @property
    def since(self) -> float:
        """The earliest hybrid time it asks from."""
        return min(entry[3] for entry in self.entries)


@dataclass
class PlannedCatchUp:
    due: float
    since: float
    peers: frozenset[str] | None
    """Only these peers' subscriptions (None: every local peer's)."""
    origins: frozenset[str] | None
    """Only these origins (None: every origin that covers a subscription)."""
    subscriptions: dict[str, dict[str, qel.Subscription]] | None = None
    """The subscriptions to catch up for (a moved peer's, as they were when it arrived); None:
    each peer's current ones, each since it was made here at the earliest."""
    until: float = math.inf
    """For ``subscriptions``: until when they stood for the peer (after that, the ones it has
    here do, and routing brings what they match)."""


class NodeBase:
    """The state of a ``SuperPeerNode`` and the plumbing its parts share."""

    def __init__(
        self,
        node_id: str,
        address: str,
        store: Store,
        config: NodeConfig | None = None,
        *,
        fingerprint: str | None = None,
        random: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.store = store
        self.config = config or NodeConfig()
        self.fingerprint = fingerprint
        """This node's TLS key fingerprint: peers identify themselves (None: plaintext)."""
        self._random = random
        self.incarnation = 0
        self.clock = HybridClock(max_lead=self.config.max_clock_lead_seconds)
        """This node's hybrid time (``clocks``): every frame to another super-peer carries it."""
        self.offsets: dict[str, OffsetEstimator] = {}
        """Per super-peer it exchanged heartbeats with, that one's clock offset."""
        self.peer_offsets: dict[str, OffsetEstimator] = {}
        """Per attached peer, its clock offset (``Clock``)."""
        self._heartbeat_echo: dict[str, tuple[float, float]] = {}
        """Per neighbour, the ``wall`` of the last heartbeat it sent here and when it came."""
        self._alive_at: dict[str, float] = {}
        """Per super-peer, when anything last came from it (a frame, an acknowledgement): a
        rejoining node asks those first (``SuperPeerNode._join``)."""
        self._hailed_at: float | None = None
        """When this node, rejoining cut off (``Timers._cut_off``), sent every contact a word:
        one that did not acknowledge it within ``failure_seconds`` is silent since then."""
        self._known_turn: dict[str, int] = {}
        """Per neighbour, where its heartbeats' next ``Heartbeat.known`` begins."""
        self._learnt: set[str] = set()
        """The super-peers whose addresses this node learnt from heartbeats (``MAX_KNOWN``)."""
        self._clock_sampled: dict[str, float] = {}
        """Per neighbour, when this node last sent it a heartbeat (the next one, busy link or
        not, is due ``clock_sample_seconds`` later)."""
        self._heard_clock: dict[str, float] = {}
        """Per super-peer, the hybrid time of the last frame received from it (``clocks``,
        rule 5: what a departure's catch-up starts from)."""
        self._peer_clock_echo: dict[str, tuple[float, float]] = {}
        """Per attached peer, the ``wall`` of its last ``Clock`` and when it came."""
        self._peer_clocks_at = 0.0
        """When the attached peers' clocks are next measured (``Clock``, to all of them)."""
        self._offset_logged: dict[str, float] = {}
        """When an offset beyond ``max_clock_offset_seconds`` was last logged, per clock."""
        self._reported_roots: dict[str, str] = {}
        """Per neighbour, the holder of position 0 it last reported (``superpeer._merging``)."""
        self._other_dimension: dict[str, tuple[int, float]] = {}
        """Per neighbour whose heartbeats name this node's root and another dimension than its
        view's: this node's dimension then, and since when (``_catch_up_dimension``)."""
        self._asked_dimension: float | None = None
        """The start of the disagreement on the dimension this node asked its neighbours
        about (``_catch_up_dimension``)."""
        self._stale_claims: dict[str, tuple[int, float]] = {}
        """Members whose heartbeats claim a place this node's table gives to another live
        neighbour: the incarnation that claims it, and since when (``superpeer._merging``,
        "Stale holders")."""
        self._neighbour_claims: dict[str, tuple[frozenset[int], float]] = {}
        """Per neighbour, the positions its last heartbeat claimed, and when: a holder that
        claims a place no more is not taken for its holder (``superpeer._merging``, "Stale
        holders")."""
        self._merging: tuple[float, list[tuple[str, str]], str, tuple[int, str]] | None = None
        """This node's cube is the weaker of two that met: when to rejoin, through whom, the
        root of the cube it leaves, and the identity of the one it joins."""
        self._meetings: dict[tuple[int, str], dict[str, tuple[str, float]]] = {}
        """Per other cube met (dimension, root), its members heard from: address, when."""
        self._probed_members: dict[tuple[int, str], dict[str, float]] = {}
        """Per other cube met, the members of it this node probed because one of them named
        them (``Evicted.members``), and when."""
        self._merged_from: tuple[str, float | None] | None = None
        """The last merge: the root of the cube this node left, and from when it catches up
        (from every origin: a side that churned while apart may have missed its own side's
        publications too)."""
        self._lost: dict[str, tuple[float, float]] = {}
        """Super-peers out of reach (declared failed, or silent to a join): the hybrid time
        each was last heard from, and when (this node's time) it was lost."""
        self._probes: dict[str, float] = {}
        """Per lost super-peer, when to probe it next (a healed partition)."""
        self._probe_tries: dict[str, int] = {}
        self._probe_at = 0.0
        self._joined_at: float | None = None
        """When this incarnation became a member."""
        self._joined_clock: float | None = None
        """Its hybrid time then (a merge catches up from there at the latest)."""
        self._apart_hint: float | None = None
        """The earliest ``Merge.since`` heard (``superpeer._merging``)."""
        self._heard_as_member: set[str] = set()
        """The neighbours heard from since then."""
        self._member_heartbeats: dict[str, int] = {}
        """Per neighbour, the newest incarnation whose heartbeats claimed positions (one that is
        a member, not a process still joining: ``SuperPeerNode._asks_to_join``)."""
        self._unusable: dict[str, float] = {}
        """Members of a cube this node could not stay in, and until when they are no contacts
        (``SuperPeerNode._could_not_stay``)."""
        self.topology = HypercupNode(node_id, address)
        self.core: SuperPeerCore | None = None
        self.mail = Mailroom(
            node_id,
            store,
            window=self.config.window,
            tracing=self.config.routing.tracing,
            clock=self.clock,
            recoverable_seconds=self.config.catchup_margin_seconds / 2,
        )
        self.statistics = NodeStatistics()
        self.rates = PeerRateLimiter(self.config.rates)
        self.rendezvous = Rendezvous(
            node_id,
            store,
            send=self._send,
            where=self._cube,
            whereabouts=self._whereabouts,
            look_up=self._look_up,
            config=self.config.rendezvous,
        )
        self.locator = Locator(
            node_id,
            address,
            send=self._send,
            where=self._cube,
            whereabouts=self._whereabouts,
            fallback=self._locate_everywhere,
            config=self.config.locating,
        )
        self.addresses: dict[str, str] = {}
        self.incarnations: dict[str, int] = {}
        """The newest incarnation heard of, per super-peer."""
        self._neighbour_incarnations: dict[str, int] = {}
        """Per current neighbour, the incarnation heard from while it is our neighbour: a newer
        one means it restarted (and the one in our view is dead)."""
        self._dropped_neighbours: dict[str, int] = {}
        """Neighbours the topology input being handled dropped from the table, with their
        incarnation there: the ``Departed`` that follows names the departed node's."""
        self.departed: dict[str, int] = {}
        """Super-peers declared failed, with the incarnation that failed: it is evicted if it
        speaks again, and its log is not asked for catch-ups until a newer one is heard of."""
        self.returned: dict[str, int] = {}
        """The incarnation each super-peer announced itself back in (``sp.returned``): a node
        that comes back with no advertisement spreads no ``Elements`` to say it is alive, and
        its log holds what it accepted while apart."""
        self._left: dict[str, int] = {}
        """Super-peers that left cleanly, with the incarnation that left: once out of our view,
        nothing more is sent to them (a link to a process that exited would wait forever)."""
        self._renewed: set[str] = set()
        """Super-peers whose link was dropped when they departed: what was sent to them since is
        for their next incarnation (a ``Welcome`` when it joins again), which its ``Hello`` must
        not drop as if it were for the old one."""
        self.successors: dict[str, str] = {}
        """Departed super-peers whose peers another one adopted (where to ask for them)."""
        self.stopping = False
        self.stopped = False
        self._leaving_since: float | None = None
        """When this node's leave walk started (``SuperPeerNode._left_anyway``)."""
        self._leave_asked_at: float | None = None
        """When this node was asked to leave, None before (a leaver that hears from nobody waits
        at most ``reform_seconds`` for a successor: ``SuperPeerNode._hand_over_due``)."""
        self.adopter: str | None = None
        """The super-peer this leaver handed its peers and log to, once it has ("": none)."""
        self._contacts: list[tuple[str, str]] = []
        self._outside: dict[str, bool] = {}
        """Contacts found out of the cube in this round of attempts to join: True if one
        answered so (alive), False if it said nothing."""
        self._asked_this_round: set[str] = set()
        """Contacts asked to admit this node since it last waited ``rejoin_seconds``
        (``SuperPeerNode._refused``)."""
        self._silent_since: dict[str, float] = {}
        """When each contact that says nothing first failed to answer: a member is silent at
        most ``wedged_seconds`` (busy that long, it rejoins and answers as a non-member), so
        only one silent longer counts as out of the cube (else a new cube splits the network)."""
        self._join_at: float | None = None
        self._join_contact: tuple[str, float] | None = None
        """The member a join attempt asked, and when it was last heard from (or asked): one
        silent for ``failure_seconds`` is dead or stalled, and the join goes elsewhere."""
        self._contact_restarted: tuple[str, float] | None = None
        """The contact asked to admit this node, and when a new incarnation of it was heard
        of while the answer was awaited (``SuperPeerNode._contact_restarted_due``)."""
        self._joining_since: float | None = None
        """When the current join request went out: a join still unanswered ``wedged_seconds``
        later is wedged (its ``Welcome`` lost), however lively its contact."""
        self._old_neighbours: set[str] = set()
        self._old_neighbours_until = -math.inf
        self._last_heard: dict[str, float] = {}
        self._last_sent: dict[str, float] = {}
        self._suspected: dict[str, float] = {}
        """Neighbours taken for failed and not repaired yet, and since when."""
        self._retry_at = 0.0
        self._busy_since: float | None = None
        self._lagging_since: float | None = None
        self._tick_at = 0.0
        """When the topology protocol's next tick is due (``HypercupNode.tick``)."""
        """Since when the topology protocol has held messages of an epoch it has not reached."""
        """Since when the topology protocol has had an operation in progress, without a break."""
        """When to ask the topology protocol again about suspected neighbours (it may have been
        busy with another operation)."""
        self._timer_due: float | None = None
        self._backlog: deque[tuple[int, Callable[[float], list[Output]]]] = deque()
        """Inputs waiting behind a burst of placements, with how many each places
        (``superpeer._backlog``)."""
        self._allowance = self.config.placements_per_step
        """Placements this step may still make (renewed by each ``timer`` call)."""
        self._continue_at: float | None = None
        """When the backlog was last left waiting (the timer is due from then)."""
        self._connections: dict[int, PeerConnection] = {}
        self._next_connection = 1
        self._unidentified: Counter[str] = Counter()
        self._peer_connection: dict[str, int] = {}
        self._catchups: list[PlannedCatchUp] = []
        self._copies: dict[str, PendingCopy] = {}
        """Log entries sent for copying whose answer is awaited, by request
        (``superpeer._replication``)."""
        self._copies_queued: dict[str, PendingCopy] = {}
        """Per neighbour, log entries to copy there once the copy in flight to it is answered
        (``superpeer._replication``, rule 2)."""
        self._answers_held: dict[int, deque[list]] = {}
        """Per peer connection, answers in the order they were made, each with the copy it
        waits for ("" once none): they leave from the front (``superpeer._replication``)."""
        self._copying = True
        """Whether the last publication acknowledged had its copy (a change is logged)."""
        self._owed_copies: int | None = None
        """How many log entries wait for a copy made late (rule 6; counted from the store at
        first need, after a restart too)."""
        self._copy_owed_in_flight: str | None = None
        """The request of the copy made late, or again, now awaited, if any (one at a time)."""
        self._copy_spans: dict[str, list] | None = None
        """Where this origin's entries are copied, and what is to be copied again
        (``superpeer._replication``, rule 9; read from the store at first need)."""
        self._copied_origins: dict[str, float] | None = None
        """Per origin whose copies this log holds or held, the earliest time of one (rule 7;
        read from the store at first need)."""
        self._handed: float | None = None
        """The latest floor of a log a leaver handed here (rule 7; read from the store at first
        need)."""
        self._unanswered: dict[str, AskedCatchUp] = {}
        """Catch-ups asked of other super-peers and not answered whole yet, by request. Asked
        again after ``catchup_retry_seconds`` (``CatchUps._ask_again``); a rejoin before the
        answer (the request or the answer lost with the old incarnation's links) asks again
        from its start (``SuperPeerNode._rejoin``); so does the next catch-up from an origin
        lost again before it answered (``Merges._lose``)."""
        self._subscribed_at: dict[str, dict[str, float]] = {}
        """Per peer, when each of its subscriptions standing here in this incarnation was made
        (catch-up never asks for what was published before a subscription existed). By peer:
        a notification naming a peer's thousand subscriptions is checked against its own
        dictionary, one look-up per id of the strings it holds (``_deliver``)."""
        self._unsubscribed_at: dict[tuple[str, str], float] = {}
        """When each subscription withdrawn here in this incarnation was withdrawn, in the
        order of the withdrawals; forgotten past the log's horizon, as the withdrawal windows
        are (``Timers._housekeeping``): a peer making and withdrawing subscriptions under new
        ids grew it for as long as the daemon ran."""
        self._latest_made: dict[str, float] = {}
        """Per peer, the latest time one of its subscriptions here was made (``_made_here``),
        never lowered when one goes: a bound, so a notification published after it less the
        margin is owed to every subscription it names that still stands (``_deliver``: a peer
        holding a thousand matching subscriptions cost a thousand look-ups per notification)."""
        self._withdrawn: dict[str, dict[str, tuple[qel.Subscription, float, float]]] = {}
        """Subscriptions withdrawn in the last ``log_seconds``, with when they were made and
        withdrawn: a repair catches up for them too, for the time they were active (a route
        broken before the withdrawal may have lost what they were owed)."""
        self.expiries = SubscriptionExpiries()
        self._moved_away: dict[str, ForwardingAddress] = {}
        self._handover_due: dict[str, float] = {}
        """Pending handovers (request -> when to ask again)."""
        self._handover_tries: dict[str, int] = {}
        self._refused_for_now: dict[str, RefusedForNow] = {}
        """Per peer attached here, the latest handover refused because of that: the connection
        may be dead without this node knowing yet (``Migrations._handed_when_detached``). Not
        kept on disk: the asker asks again until answered."""
        self._awaiting: set[str] = set()
        """Handovers whose first answer (or the catch-up instead) is still awaited."""
        self._handed_in: dict[str, set[str]] = {}
        """Per handover asked for, the notifications (mail keys) and versions its answers
        brought so far: the previous access point keeps everything until told, so each answer
        holds all the earlier ones did; an answer is complete when as many distinct ones came
        as it counts."""
        self._held: dict[str, list[tuple[int, Request]]] = {}
        """Per peer, its requests held while the versions of its resources are on their way
        from its previous access point (``Migrations._release_held``), in arrival order."""
        self._restored_since: float | None = None
        self._catch_up_from: float | None = None
        """A restart's catch-up from the origins starts here when it is earlier than
        ``_restored_since``: this node was cut off from some of the cube when it died."""
        self._prepared: PreparedRestore | None = None
        """The peers' subscriptions, decoded and placed before the join request left, for the core
        the join makes (``superpeer._restoring``)."""
        self._replay: list[tuple[float, m.Notification]] = []
        self._before_member: list[tuple[str, int, Received]] = []
        self._housekeeping_at = 0.0
        self._message_number = 0

    def _keep_withdrawal(
        self, peer: str, sid: str, subscription: qel.Subscription, made: float, ended: float
    ) -> None:
        """Keep the window of a subscription withdrawn at hybrid time ``ended`` (in memory, and
        in the store for a restart)."""
        self._withdrawn.setdefault(peer, {})[sid] = (subscription, made, ended)
        subscribe = m.Subscribe(id=sid, subscription=subscription)
        entry = {
            "peer": peer,
            "id": sid,
            "subscribe": wire.encode(subscribe).hex(),
            "made": made if math.isfinite(made) else None,
            "ended": ended,
        }
        self.store.set_pending(WITHDRAWN, withdrawal_key(peer, sid), entry)
        self._keep_reading()

    def _keep_reading(self) -> None:
        """Keep the latest reading given as ``alive_at`` with a subscription's time kept in the
        store: a restart runs on from there (``clocks``, rule 0), never below that time."""
        self._keep_alive_at(self.clock.last)

    def _keep_alive_at(self, reading: float) -> None:
        """Write ``alive_at``: a restart catches up from there, less the margin. The mail held
        unwritten that was published before that is written first, in the same transaction
        (``superpeer._unwritten``): so the mail not on disk after a crash was published no
        earlier than the ``alive_at`` on disk less the margin, and the catch-up from there
        finds it again."""
        self.store.flush_mail(before=reading - self.config.catchup_margin_seconds)
        self.store.set_meta("alive_at", repr(reading))

    def _forget_withdrawal(self, peer: str, sid: str) -> None:
        kept = self._withdrawn.get(peer, {})
        kept.pop(sid, None)
        if not kept:
            self._withdrawn.pop(peer, None)
        self.store.set_pending(WITHDRAWN, withdrawal_key(peer, sid), None)

    def _restore_withdrawals(self) -> None:
        """The windows kept before a restart (an entry that no longer decodes is dropped)."""
        for key, entry in self.store.pending(WITHDRAWN).items():
            subscribe = decoded_as(bytes.fromhex(entry.get("subscribe", "")), m.Subscribe)
            if subscribe is None:
                self.store.set_pending(WITHDRAWN, key, None)
                continue
            made = entry.get("made")
            window = (subscribe.subscription, -math.inf if made is None else made, entry["ended"])
            self._withdrawn.setdefault(entry["peer"], {}).setdefault(entry["id"], window)

    def _expiry_here(self, message: E, now: float) -> E:
        """A request's expiry in this node's terms (``clocks``, rules 7 and 8): the lifetime
        left on the sender's clock (``expires - sent_at``) from now, on this node's own clock for
        a subscription (only this node judges it), in hybrid time for a publication (every
        access point on its way judges it)."""
        if message.expires is None or not message.sent_at:
            return message
        left = message.expires - message.sent_at
        base = now if isinstance(message, m.Subscribe) else self.clock.read(now)
        return dataclasses.replace(message, expires=base + left, sent_at=0.0)

    # -- clocks (``clocks``) ------------------------------------------------------------------
    def clock_report(self, now: float) -> dict[str, object]:
        """The clocks as this node sees them: hybrid time's lead over its own wall clock
        (signed), the correction its neighbours' clocks give its own (None: not measured since
        it started), the measured offsets (the other clock minus this one) of its neighbours
        and peers, and what exceeds ``max_clock_offset_seconds``."""

        def offsets(estimators: dict[str, OffsetEstimator]) -> dict[str, dict[str, float]]:
            return {
                name: {"offset": round(e.offset, 6), "error": round(e.error or 0.0, 6)}
                for name, e in sorted(estimators.items())
                if e.offset is not None
            }

        peers = offsets(self.peer_offsets)
        correction = self.clock.correction
        largest = max(peers.items(), key=lambda item: abs(item[1]["offset"]), default=None)
        return {
            "hybrid_lead_seconds": round(self.clock.lead(now), 6),
            "correction_seconds": None if correction is None else round(correction, 6),
            "refused_readings": self.clock.refused,
            "neighbours": offsets(self.offsets),
            "peers": peers,
            "largest_peer_offset": None
            if largest is None
            else {"peer": largest[0], "offset": largest[1]["offset"]},
            "max_clock_offset_seconds": self.config.max_clock_offset_seconds,
            "beyond_bound": self.clocks_beyond_bound(),
        }

    def clocks_beyond_bound(self) -> list[str]:
        """The clocks measured further off than ``max_clock_offset_seconds``, in sentences."""
        bound = self.config.max_clock_offset_seconds
        found = []
        for kind, estimators in (("super-peer", self.offsets), ("peer", self.peer_offsets)):
            for name, estimator in sorted(estimators.items()):
                if estimator.beyond(bound):
                    found.append(f"{kind} {name}'s clock is off by {estimator.offset:+.3f} s")
        return found

    def _discipline_clock(self) -> None:
        """The physical part of this node's hybrid time from its neighbours' clocks (``clocks``,
        rule 0): the median of those measured and its own; its own wall clock as it is when it
        is a member with no neighbour (nobody to measure). Unchanged while none is measured."""
        core = self.core
        neighbours = core.view.neighbours() if core is not None else set(self.offsets)
        if core is not None and not neighbours:
            if self.clock.correction is None:
                self.clock.discipline(0.0)
            return
        measured = [
            offset
            for n in sorted(neighbours)
            if (e := self.offsets.get(n)) is not None and (offset := e.offset) is not None
        ]
        if measured:
            self.clock.discipline(correction_of(measured))

    def _clock_sample(
        self, kind: str, name: str, estimators: dict[str, OffsetEstimator], sample, now: float
    ) -> None:
        """One measurement of ``name``'s clock (a neighbour's or a peer's)."""
        if sample is None:
            return
        estimator = estimators.setdefault(name, OffsetEstimator())
        estimator.add(sample)
        if estimators is self.offsets:
            self._discipline_clock()
        if estimator.beyond(self.config.max_clock_offset_seconds):
            offset = estimator.offset
            self._clock_problem(
                name,
                f"{kind} {name}'s clock is off by {offset:+.3f} s (+/- {estimator.error:.3f}), "
                f"more than max_clock_offset_seconds ({self.config.max_clock_offset_seconds:g})",
                now,
            )

    def _clock_to_peer(self, peer: str, connection: int, now: float, out: list[Output]) -> None:
        """A ``Clock`` for an attached peer, echoing its last one (``clocks.sample_of``), with
        this node's hybrid time, from when what it delivers may be incomplete (a cut, a
        catch-up, begun since the peer's ``Welcome``: ``Clock.missing_since``), and the other
        super-peers it may go to now (``Clock.alternates``)."""
        echo, received = self._peer_clock_echo.get(peer, (0.0, now))
        clock = m.Clock(
            wall=now,
            echo=echo,
            held=max(0.0, now - received),
            clock=self.clock.now(now),
            missing_since=self.missing_for(peer) or 0.0,
            alternates=self.alternates(),
        )
        data = wire.encode(clock)
        out.append(ToConnection(connection, clock, data))
        self._trace(out, now, "send", clock, peer=peer, size=len(data))

    def _peer_clock_in(self, peer: str, clock: m.Clock, now: float) -> None:
        """A peer's answer to a ``Clock``: a measurement of its clock."""
        if clock.echo:
            sample = sample_of(clock.echo, clock.wall - clock.held, clock.wall, now)
            self._clock_sample("peer", peer, self.peer_offsets, sample, now)
        self._peer_clock_echo[peer] = (clock.wall, now)

    def _clock_problem(self, name: str, what: str, now: float) -> None:
        """Logged at most once every ``CLOCK_LOG_SECONDS`` per clock."""
        if now - self._offset_logged.get(name, -math.inf) < CLOCK_LOG_SECONDS:
            return
        self._offset_logged[name] = now
        log.warning("event=clock_offset node=%s clock=%s problem=%r", self.node_id, name, what)

    @property
    def started(self) -> bool:
        """Whether ``start`` ran: before, the node has no incarnation and takes no message
        from another super-peer (its answers would say incarnation 0)."""
        return self.incarnation > 0

    def _keep_logged(self, notification: m.Notification) -> tuple[str, bool]:
        """``notification`` in this node's publication log, as its origin logged it (its own,
        a neighbour's copy, a leaver's hand-over): its key, and whether the store keeps its
        publication once, as a body the rest refers to (``Store.log_publication``)."""
        key = mail_key(notification.owner, notification.publication.id, notification.version)
        held = self.store.log_publication(
            key,
            wire.encode(notification),
            notification.published_at,
            wire.packed_publication(notification.publication),
        )
        return key, held

    def _made_here(self, peer: str, sid: str, made: float) -> float:
        """When ``peer``'s subscription ``sid`` was made here: ``made``, unless known already."""
        at = self._subscribed_at.setdefault(peer, {}).setdefault(sid, made)
        if at > self._latest_made.get(peer, -math.inf):
            self._latest_made[peer] = at
        return at

    def _next_id(self) -> str:
        self._message_number += 1
        return f"{self.node_id}~{self.incarnation}#{self._message_number}"

    def _send(
        self, target: str, message: object, now: float, out: list[Output], *, address: str = ""
    ) -> None:
        if self._dropped(target, message, now, out):
            return
        message_id = self._next_id()
        data = wire.encode(message, message_id)
        self._last_sent[target] = now
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.statistics.sent[kind] += 1
        self.statistics.bytes_sent[kind] += len(data)
        out.append(self._to_superpeer(target, message, data, message_id, address))
        if self.config.routing.tracing:
            out.append(
                trace_record(
                    self.node_id,
                    now,
                    "send",
                    message,
                    neighbour=target,
                    size=len(data),
                    msg=message_id,
                )
            )

    def _to_superpeer(
        self, target: str, message: object, data: bytes, message_id: str, address: str
    ) -> ToSuperPeer:
        """The send as the runtime carries it out: to ``address`` if given, else where
        ``target`` is known to be, and meant for the incarnation of it this node knows (the
        channel drops it if a newer one is there by then)."""
        return ToSuperPeer(
            target,
            message,
            data,
            message_id,
            address or self.addresses.get(target, ""),
            self.incarnations.get(target, 0),
            self.clock.carried(),
        )

    def _trace(self, out: list[Output], now: float, event: str, message: object, **fields) -> None:
        if self.config.routing.tracing:
            out.append(trace_record(self.node_id, now, event, message, **fields))

    def _trace_event(
        self,
        out: list[Output],
        now: float,
        event: str,
        *,
        kind: str,
        neighbour: str | None = None,
        peer: str | None = None,
        msg: str | None = None,
        reason: str | None = None,
    ) -> None:
        if self.config.routing.tracing:
            out.append(
                TraceRecord(
                    ts=now,
                    node=self.node_id,
                    event=event,
                    kind=kind,
                    neighbour=neighbour,
                    peer=peer,
                    msg=msg,
                    reason=reason,
                )
            )


def tree_positions_between(root: int, position: int) -> set[int]:
    """The positions from ``position`` up to ``root`` in ``root``'s tree, both included."""
    path = {position}
    current: int | None = position
    while current is not None and current != root:
        current = tree_parent_position(root, current)
        if current is not None:
            path.add(current)
    return path


def decoded_as(data: bytes | None, cls: type[T]) -> T | None:
    if data is None:
        return None
    try:
        message, _ = wire.decode(data)
    except wire.WireError:
        log.error("event=unreadable_state kind=%s", cls.__name__)  # noqa: TRY400 -- no traceback: the state is what is wrong
        return None
    return message if isinstance(message, cls) else None


def withdrawal_key(peer: str, sid: str) -> str:
    """The store key of a withdrawn subscription's window (unambiguous whatever the id holds)."""
    return json.dumps([peer, sid])
