"""``SuperPeerNode``: one super-peer, sans-IO. The daemon and the simulator drive the same object.

It owns everything a super-peer decides: the topology protocol (``hypercup.HypercupNode``), routing
(``SuperPeerCore``), peer connections (``AccessPointSession``: admission, identification, newest
connection wins), delivery to peers (``Mailroom``: durable mail, acknowledged window), link
supervision (heartbeats, silence, failure), recovery (catch-up from origins' publication logs,
migration of peers between access points, adoption of a leaving super-peer's peers) and restarts
(everything durable is in the ``Store``). Inputs are method calls with the time passed in; outputs
are ``superpeer.actions`` and ``TraceRecord`` s. The node reads no clock, opens no socket.

Inputs: ``start`` / ``leave``; ``superpeer_hello`` (another super-peer connected, with its
incarnation), ``superpeer_message``, ``superpeer_heard`` (any sign of life on a link),
``superpeer_unreachable`` (the runtime gave up on a link); ``accept`` / ``peer_message`` /
``peer_violation`` / ``connection_closed`` for peer connections; ``timer`` (call it at
``next_deadline``). The control commands read ``status``, ``peer_report``, ``subscription_report``
and call ``forget_peer``.

Rules, beyond the routing core's:

* **Incarnations.** Every start and every rejoin takes a new incarnation number from the store;
  super-peers learn each other's from ``Hello``. A neighbour that shows up with a newer one has
  restarted: it is declared failed at once (no need to wait for silence). So is a neighbour
  that asks to join (its ``JoinRequest``, or a walk for it): a member does not, so the
  incarnation in the table is gone, even if the new process was taken for it. A node that
  rejoined reads nothing its old incarnation was sent: the runtime closes the links that
  incarnation welcomed, and their senders' channels drop what was meant for it. So
  incarnations are also learnt second-hand where a message names a process it comes from:
  a member that welcomes a newcomer knows the newcomer's from its walk, and every member a
  walk reaches knows its anchor's (``JoinWalk.anchor_incarnation``), to which the take is
  reported.
* **Failure detection.** A link to a neighbour that has carried nothing for ``heartbeat_seconds``
  carries a ``Heartbeat``; a neighbour not heard from for ``failure_seconds`` is reported to the
  topology protocol (``neighbour_failed``; retried while the protocol is busy with another
  operation; after each further ``failure_seconds`` unrepaired, with a larger ``fallback``, in
  case the designated repairer failed too). If the node itself was stalled (its timer fired late
  by more than half of ``failure_seconds``: a paused process), everyone gets a fresh
  ``failure_seconds`` first.
* **Failures in the middle of topology operations.** Messages of a later epoch held back for
  ``failure_seconds``: the node asks for the change of dimension it missed. So does a node
  whose every neighbour's heartbeats name its root and another dimension for
  ``failure_seconds`` (nothing of the new epoch reached it: only heartbeats came); if that
  did not help ``failure_seconds`` later, it rejoins. The topology
  protocol ticks every ``failure_seconds`` (lost join admissions expire). A protocol busy for
  ``wedged_seconds`` without a break is wedged: the node rejoins, as after a protocol error; so
  is a join unanswered that long (its ``Welcome`` lost), however lively its contact.
  A rejoining node that finds every super-peer it knows out of the cube (refusing as
  non-members, or silent for ``reform_seconds``: a busy member can be silent a while, and a
  new cube beside a live one splits the network until the two meet, ``superpeer._merging``),
  and has the smallest id among those that answered, creates a new cube; the others join it.
  A failed neighbour unrepaired for ``reform_seconds`` means this side of a cut cannot repair
  it: the node rejoins (``superpeer._merging``, "Re-forming"). A refusal from a contact that
  is no member sends the next request at once (each contact once a round; then
  ``rejoin_seconds``); so does a contact heard of as a new incarnation that has not answered
  since (the request went with the old one): ``rejoin_seconds`` later, as the same
  incarnation, if it had said it was no member in this round; else ``failure_seconds``
  later, as a new one, as for a silent contact (``_contact_restarted_due``). A node that
  joins knows no root until its tree parent reports one (what its neighbours reported before
  is forgotten).
* **Eviction.** A member that hears from an incarnation that departed answers ``Evicted``; the
  evicted node (and one whose topology protocol broke) *rejoins*: a new incarnation, its durable
  state restored, its peers asked to reconnect.
* **Departures.** The node that takes a departed member's place (``hypercup.Departed``) broadcasts
  ``sp.departed``, naming the incarnation the repair named, or the one it had in its own table if
  that is newer (the repairer may never have heard from a node that rejoined behind a cut); every access point then asks the origins whose trees ran through the departed
  positions for what they published since it was last heard from (``CatchUp``, after the routes
  settled), and their answers (``Mail``) go into its peers' mail, where repeats are dropped.
* **Restart.** A node started on a store with peers in it restores them (detached), routes their
  subscriptions and advertisements once it is a member, asks the origins for what was published
  since it was last alive (or since it last heard from a super-peer it had lost and not found
  again, or a neighbour it had declared failed, if that is earlier: kept on disk, for a node
  that crashes while cut off), and replays its own publication log since then (a publication it
  accepted just before it crashed may not have left).
* **Copies** (``superpeer._replication``). An origin's log entry is copied to a neighbour (the
  first by name heard from within ``failure_seconds``; the next after ``copy_wait_seconds``
  unanswered; none after two, or with none to ask) before the publisher's ``Ack``, which waits
  for the copy's ``LogCopied`` (answers on a connection keep their order); the notification does
  not wait. Entries logged while a copy to that neighbour is in flight wait for its answer and
  go in one ``LogCopy`` (bounded by half a frame); a publication sent again while its copy is
  awaited is acknowledged once it is copied. An ``Ack`` given without a copy says so
  (``Ack.alone``), the entry owed one, and its publisher keeps the publication until an ``Ack``
  without it (``peer.kept``). Copies are log entries of the holder, answered in
  catch-ups and handed over with its log, never replayed as its own. A catch-up owed by an
  origin declared failed and not heard of since is asked of every live super-peer, restricted to that origin
  (``CatchUp.origin``); a leaver hands its log to its successor and one more neighbour.
* **Migration** (seed 004, Section 5.1). A peer that was attached to another super-peer says so
  first (``Moved``, signed). This node asks the previous one (``Handover``), which sends what it
  kept (``Mail``), forgets the peer (subscriptions retracted network-wide after ``settle_seconds``,
  registration dropped) and answers ``HandoverDone`` with the number of notifications sent. The
  previous one deletes that mail only when this node says it has all of it (``HandoverReceived``);
  ``HandoverDone`` also lists the rendezvous files it holds for the peer, which this node pulls and
  releases (``superpeer.rendezvous``); a short count (mail lost with a broken link or a rejoin)
  makes this node ask again. ``HandoverDone.unvouched_since`` says from when the previous one
  cannot vouch for its mail (a catch-up covering the peer was still to come there: a restart's,
  a broken route's, the peer's earlier move's, or one asked and not answered, whose answer a
  previous one that stops meanwhile never gets); this node asks the origins from then, since the
  previous one skips a peer that moved on in its catch-ups. What still reaches the previous one
  for the peer (its tree before the subscriptions go, a late catch-up, mail from further back)
  follows the peer's forwarding address, kept for ``retention_seconds`` (a late catch-up's
  answer goes on as a catch-up answer, which the access point where the peer is holds to the
  rule of order; what the previous one held, as mail it kept, delivered however old); a handover that
  describes a move older than the peer's latest arrival (both times on the peer's clock) is
  refused as stale, so forwarding addresses lead to where the peer is. Direct look-ups
  (``superpeer.locating``) and rendezvous requests that reach the previous one follow them too.
  If the previous one does not answer within ``handover_seconds``, the node asks the origins for
  what was published since the peer last heard from it, or since the previous one last told
  the peer (``Welcome``, ``Clock``) it may be missing things, if that is earlier
  (``Moved.missing_since``: what reached the previous one late, after the peer left, is lost
  if it is). An access point tells each peer, in its ``Welcome`` and every ``Clock``, that
  time for the peer (``missing_for``): what it may lack, a catch-up or handover it still owes
  the peer, and the earliest publication among the mail it holds for the peer and has not had
  acknowledged (``Mailroom.floor``: a backlog or a handed-over mailbox, lost with it). A
  peer that moved keeps its move statement's start until a ``Clock`` after the move's ``Ack``
  replaces it. The node keeps asking the previous one
  (durably) until it answers: when it comes back, what it kept is handed over. A previous one
  that holds the peer attached refuses for now (``HandoverDone.retry``): its connection may be
  dead without its knowing yet (a partition cut it from the peer; a final refusal once left it
  the peer's old subscriptions, and the mail they matched, for 36 minutes in a chaos run). It
  remembers the latest such request and answers it, checked afresh, when that connection ends;
  and it sends the peer a ``Clock`` with the refusal: a connection that stays silent for
  ``failure_seconds`` after it is closed as dead. This node treats the refusal as no answer yet
  (the catch-up, then asking again: the previous one may restart and forget). A peer that
  connects to the previous one again came back (its ``Moved`` follows): the request is forgotten
  there, and this node, asked for the peer in turn, forgets its own; a later copy of it is
  refused as stale once that connection ends, however it ends. A previous one that left names
  its successor (``Departed.successor``), whom this node asks instead; if that is this node and
  it holds no adoption of the peer (the leaver handed over while it was down), it catches up
  from the statement at once, as for a handover not answered (chaos seed 741).
* **Never hold the loop** (``superpeer._backlog``). Inputs that place subscriptions in the
  poset (``sp.forward``, ``peer.subscribe``, each subscription of an ``sp.adopt``) spend an allowance of
  ``placements_per_step``, renewed by each ``timer`` call; once it is spent, the input and
  *every input after it* wait in the backlog, in arrival order, and the timer is due at once:
  each call handles the next slice, and the runtime runs its other tasks between two calls. A
  burst of 20,000 thus never keeps the node from its heartbeats. What may go ahead: the timer
  (heartbeats, silence, every deadline) and signs of life (``superpeer_heard``; a waiting
  frame's sender counts as heard as it arrives, if its incarnation is the one known), which read
  and write nothing routing reads. The order rule: an input that waits is handled as if it had
  arrived when its turn came, after every input that arrived before it, and before every input
  that arrived after it. So whatever depends on a waiting subscription sees it placed: its own
  forwarding (the slice that places it routes it), an ``Unsubscribe`` or ``Retract`` of it, a
  ``Notification`` that arrived after it (from the same link or another), a ``CatchUp`` or
  ``Handover`` asked after it: each waits behind it. What goes ahead is only what could have
  happened anyway had the waiting frames been slower on the wire (the timer's work, a catch-up
  due, a neighbour's failure detected): late arrival is a case routing handles already (a
  ``Forward`` late by more than ``settle_seconds`` asks the origins to replay, ``Forward.since``;
  an ``Ack`` says when a subscription became active, which is when its turn came). No
  notification that a placed subscription matches is lost, and none is routed twice (the same
  code, in the same order). An ``Adopt``'s subscriptions are kept and placed in slices, ahead
  of the inputs after it (a crash in between loses the rest, as it lost a whole input not yet
  committed: the peer sends its subscriptions again when it connects); a node that leaves
  handles its whole backlog first. Routing every subscription held again (a change of
  the cube, a restarted neighbour, the settle window's end, an origin's departure or new
  elements) is sliced by the core itself (``superpeer.rerouting``, ``routings_per_step``): its
  timer is due at once while any is left, and inputs are handled between its slices, not
  behind them (each slice routes against the state as it is then).
* **Leaving.** A super-peer that leaves cleanly hands its peers (their subscriptions,
  advertisement and mail, and from when it cannot vouch for that mail: ``Adopt.unvouched_since``,
  as for a handover, from which the adopter's catch-up starts) and its log to a super-peer that
  answers (``Adopt``, ``AdoptLog``: a live neighbour, else any super-peer heard from within
  ``failure_seconds``), tells its
  attached peers where they went (``Goodbye.successor``), withdraws its advertisement and leaves
  the cube. A leaver that hears from none (a cut keeps it from all of them) hails every
  super-peer it knows and hands over to the first that answers, or, after ``reform_seconds``, to
  its first neighbour by name (its channel keeps what it hands over until the cut heals, and
  the daemon waits ``failure_seconds`` for the acknowledgements, logging what is left): handed
  to a neighbour not heard from, and dropped by a re-forming rule that fired during the leave,
  a leaver's mail and log went to nowhere (issue 33: 5 publications lost in the 300-s hosts
  run). A leaver never rejoins: a rule that would make it (cut off, evicted, wedged) hands over
  if it has not yet and stops. A leaver cut off while its walk is held may be declared failed
  and its place repaired meanwhile: the members answer it ``Evicted`` (which still reaches a
  node that left), and it stops, as it would at its ``Released``; a leave still unreleased after
  ``wedged_seconds`` (its walk lost) ends anyway, and what is left of its place is repaired as
  a failure's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import crypto
import qel
import wire
from hypercup import HypercupNode, JoinRequest, JoinWalk, NodeState, Welcome
from hypercup.errors import HypercupError, LocalProtocolError, RemoteProtocolError
from hypercup.events import Departed, Joined, JoinFailed, Left, Send, TopologyChanged
from poset.poset import collector_paused
from superpeer import versions
from superpeer._adoption import Adoptions
from superpeer._backlog import placements
from superpeer._batches import fitting
from superpeer._catchup import CatchUps
from superpeer._merging import Merges
from superpeer._migration import Migrations
from superpeer._node_base import (
    ATTACHED,
    DIRECT_LOOKUPS,
    FROM_ANY,
    HANDOVERS,
    MAX_FORWARD_HOPS,
    MOVED,
    NODE_HANDLED,
    OUTSIDE_CORE,
    RENDEZVOUS_MESSAGES,
    RESOURCE_REQUESTS,
    ForwardingAddress,
    NodeConfig,
    NodeStatistics,
    Output,
    PeerConnection,
    PlannedCatchUp,
    decoded_as,
    log,
)
from superpeer._replication import Replication
from superpeer._reports import Reports
from superpeer._restoring import prepare_restore, stored_subscriptions
from superpeer._timers import Timers
from superpeer.access import AccessPointSession, AccessState, Ended, Established, Reply, Request
from superpeer.actions import (
    CloseConnection,
    Deliver,
    Forgotten,
    Found,
    LogPublication,
    PauseReading,
    Repeated,
    Replay,
    Stopped,
    ToConnection,
    ToPeer,
    ToSuperPeer,
)
from superpeer.core import (
    Broadcast,
    PeerSubscription,
    SuperPeerCore,
    TopologyView,
    broadcast_key,
)
from superpeer.ratelimit import LOOKUPS, PUBLICATIONS, SUBSCRIPTIONS
from superpeer.routes import Whereabouts
from wire import messages as m
from wire.framing import Received
from wire.requests import answered_in_order, request_label

__all__ = ["NodeConfig", "NodeStatistics", "SuperPeerNode"]

MAX_ALTERNATES = 4
"""Other super-peers named to a peer that connects (``Welcome.alternates``)."""


class SuperPeerNode(CatchUps, Migrations, Adoptions, Replication, Merges, Timers, Reports):
    """One super-peer; see the module docstring. Its parts: ``CatchUps``, ``Migrations``,
    ``Adoptions``, ``Replication``, ``Merges``, ``Timers`` (over ``Backlog``) and ``Reports``
    (each in its own module), over ``NodeBase`` (its state and plumbing)."""

    # == lifecycle =================================================================================
    def start(self, now: float, contacts: list[tuple[str, str]]) -> list[Output]:
        """Start (or restart, on a store that holds state): create a cube when ``contacts`` is
        empty, else join through the first contact that accepts (node id, address)."""
        out: list[Output] = []
        self.incarnation = self.store.next_incarnation()
        alive = self.store.get_meta("alive_at")
        # hybrid time never goes back, whatever the wall clock says after a restart: on from
        # the last reading kept and the log's latest publication (``clocks``, rule 1)
        self.clock.restore(float(alive or 0.0))
        self.clock.restore(self.store.latest_logged() or 0.0)
        self.clock.unmeasured(now)  # its wall clock may have been set anywhere (``clocks``, 0)
        if alive is not None and (self.store.local_peers() or self.store.registered()):
            self._restored_since = float(alive) - self.config.catchup_margin_seconds
            apart = self.store.get_meta("apart_since")
            if apart:
                # it was cut off from some of the cube when it died: what they published since
                # never reached it (``superpeer._merging``); its own log is replayed from when
                # it was last alive only (what it accepted just before it died)
                since = float(apart) - self.config.catchup_margin_seconds
                self._catch_up_from = min(self._restored_since, since)
        previous = self.store.get_meta("neighbours")
        old_neighbours = []
        if previous:
            # tell the old neighbours at once that this incarnation replaced the one they knew
            for entry in previous.split(","):
                node, _, address = entry.partition("=")
                if node and node != self.node_id:
                    self.addresses[node] = address
                    old_neighbours.append((node, address))
                    self._send(node, m.Heartbeat(), now, out)
        # join through the old neighbours that answered first: they refuse until the old
        # incarnation's place is repaired, where another member might admit this one into a
        # cube still repairing it
        self._contacts = [c for c in contacts if c[0] != self.node_id]
        self._join_through({node for node, _ in old_neighbours}, now)
        if not self._contacts:
            self._topology(self.topology.create(), now, out)
        else:
            self._join(now, out)
        self._housekeeping_at = now
        return out

    def _join_through(self, old_neighbours: set[str], now: float) -> None:
        """The joins of the next ``5 * failure_seconds`` go through those of ``old_neighbours``
        among the contacts only (``_join``): they refuse while the cube still repairs this
        node's old place, where a member that never knew it would admit it a second time."""
        self._old_neighbours = old_neighbours & {node for node, _ in self._contacts}
        self._old_neighbours_until = now + 5 * self.config.failure_seconds

    def _join(self, now: float, out: list[Output]) -> None:
        self._join_at = None
        if self._prepared is None:
            self._prepared = prepare_restore(
                self.store, collect_from=self.config.restore_collection_from
            )
            if self._prepared.subscriptions:
                # that took a while on a large store: ask in the next input, at the runtime's
                # time then, or the contact would seem silent since before the request left
                self._join_at = now
                return
        self._silent_unhailed(now)
        if self._nobody_in_the_cube(now):
            # every super-peer this node knows is out of the cube (a failure in the middle of a
            # join or a grow broke them all): the smallest live one starts a new cube, the
            # others join it
            log.warning("event=cube_recreated node=%s", self.node_id)
            # and every other super-peer it knows is lost, to be probed: one it took for dead
            # or left aside (out of reach for a while) may be starting a cube of its own at
            # the same moment, and two cubes that never probe each other never merge (three
            # of six alive, each out of the cube: two cubes, for good)
            for node, _ in self._contacts:
                if node != self.node_id and node not in self._lost:
                    self._lose_silent(node, now)
            self._outside.clear()
            self._asked_this_round.clear()
            self._silent_since.clear()
            self._topology(self.topology.create(), now, out)
            self._probe_every_lost(now, out)
            return
        if now < self._old_neighbours_until and self._old_neighbours:
            # a restart: only the old neighbours, while they may still be repairing its place
            while self._contacts[0][0] not in self._old_neighbours:
                self._contacts.append(self._contacts.pop(0))
        elif self._hailed_at is not None:
            # cut off: first a contact that acknowledged the word this node sent every one
            # (``Timers._cut_off``) and was not found out of the cube or silent to a join yet;
            # the others may be across the cut, a failure timeout each (``superpeer._merging``,
            # "Re-forming"). (Not one heard from otherwise: two rejoining nodes whose requests
            # to each other kept them both lively asked each other for good, a replay at 16
            # super-peers, seed 29.)
            lively = [
                contact
                for contact in self._contacts
                if contact[0] not in self._asked_this_round
                and contact[0] not in self._outside
                and self._alive_at.get(contact[0], -math.inf) >= self._hailed_at
                and not self._unusable_until(contact[0], now)
            ]
            if lively:
                self._contacts.remove(lively[0])
                self._contacts.insert(0, lively[0])
        usable = [c for c in self._contacts if not self._unusable_until(c[0], now)]
        while usable and self._unusable_until(self._contacts[0][0], now):
            self._contacts.append(self._contacts.pop(0))
        contact_id, contact_address = self._contacts[0]
        if contact_id in self._asked_this_round:
            # every contact it may ask now was asked since the last wait (``_refused``)
            self._asked_this_round.clear()
            self._join_at = now + self.config.rejoin_seconds
            return
        self._asked_this_round.add(contact_id)
        self._contacts.append(self._contacts.pop(0))
        self.addresses[contact_id] = contact_address
        self._join_contact = (contact_id, now)
        self._contact_restarted = None
        self._joining_since = now
        log.info("event=joining node=%s contact=%s", self.node_id, contact_id)
        try:
            self._topology(self.topology.join_via(contact_id, contact_address), now, out)
        except HypercupError as error:
            log.warning("event=join_error node=%s error=%r", self.node_id, str(error))
            self._join_at = now + self.config.rejoin_seconds

    def _silent_unhailed(self, now: float) -> None:
        """The contacts that did not acknowledge the word this node sent them as it rejoined cut
        off (``_hailed_at``) are silent since then, asked or not: across the cut, each would
        otherwise cost a failure timeout, and its side's cube would wait for all of them (a
        side of ten of 16 super-peers out of the cube for 25 s)."""
        hailed = self._hailed_at
        if hailed is None or now < hailed + self.config.failure_seconds:
            return
        for node, _ in self._contacts:
            if node not in self._outside and self._alive_at.get(node, -math.inf) < hailed:
                self._outside[node] = False
                self._silent_since.setdefault(node, hailed)

    def _nobody_in_the_cube(self, now: float) -> bool:
        # the members of a cube this node could not stay in (a bridge across a cut) count
        # for nothing: they neither admit it usefully nor start a cube of its side
        contacts = {node for node, _ in self._contacts if not self._unusable_until(node, now)}
        if not contacts or not contacts <= set(self._outside):
            return not contacts and bool(self._contacts)
        alive = [node for node in contacts if self._outside[node]]
        if any(
            now - self._silent_since.get(node, now) < self.config.reform_seconds
            for node in contacts
            if not self._outside[node]
        ):
            return False
        # every contact silent that long is dead (or cut off for good): start a cube, or this
        # node would try them forever; else the smallest id among those alive outside starts it
        return not alive or self.node_id < min(alive)

    def _abandon_join(self, contact: str, now: float, out: list[Output]) -> None:
        """The member asked to admit this node has said nothing (it died, stalled, or left):
        ask another one, as a new incarnation, so that if the silent one admitted this node
        after all, the place it was given is repaired as a restarted node's."""
        log.warning("event=join_abandoned node=%s contact=%s", self.node_id, contact)
        self._lose_silent(contact, now)
        # silent now, whatever it answered before: a contact that once said it was out of the
        # cube, then stopped (a leaver whose walk never ended), stayed "alive" for good, and
        # every joiner named after it waited for it to start the cube (never one cube again)
        self._outside[contact] = False
        self._silent_since.setdefault(contact, now)
        self._join_again(now, out)

    def _contact_restarted_due(self) -> float | None:
        """When the join contact, heard of as a new incarnation (it rejoined or restarted)
        since it was asked, is given up if it has not answered (None: it is not). The request
        went with the old incarnation, or with the link dropped for the new one. The new one
        talks to this node all the same (it asks to join too), so the contact never seems
        silent, and the node waited ``wedged_seconds`` for nothing: after a cut longer than the
        watchdog, nobody started a cube for 30 s (``python -m bench.chaos_replay --cut-only
        60``, 16 super-peers). The wait: ``rejoin_seconds`` if the contact had said it was no
        member in this round (the frame that says the incarnation is new is often its answer,
        still in flight); else ``failure_seconds``, as for a silent contact, since a member may
        have passed the request on before it went, and the ``Welcome`` comes from another
        member (given up sooner, a killed member's repair met the place given meanwhile: 90 s
        to one cube)."""
        restarted, contact = self._contact_restarted, self._join_contact
        if restarted is None or contact is None or restarted[0] != contact[0]:
            return None
        outside = self._outside.get(contact[0])
        wait = self.config.rejoin_seconds if outside else self.config.failure_seconds
        return restarted[1] + wait

    def _ask_past_a_restarted_contact(self, contact: str, now: float, out: list[Output]) -> None:
        """The next contact is asked (``_contact_restarted_due``). As a new incarnation if the one
        asked may have been a member that passed the request on before it went (a place it was
        given after all is repaired as a restarted node's); as the same one if it had said it
        was no member in this round: a joining node answers at once and passes nothing on, and
        a new incarnation here made each node that had asked this one give it up in turn (32
        super-peers, after a 60-s cut: hundreds of new incarnations, never one cube)."""
        log.info("event=join_contact_restarted node=%s contact=%s", self.node_id, contact)
        self._silent_since.pop(contact, None)
        if not self._outside.get(contact):
            self._join_again(now, out)
            return
        self.topology = HypercupNode(self.node_id, self.address)
        self._join_contact = None
        self._join(now, out)

    def _join_again(self, now: float, out: list[Output]) -> None:
        """Ask again, through the next contact, as a new incarnation (what the last one was
        given, if anything, is repaired as a restarted node's place)."""
        self.incarnation = self.store.next_incarnation()
        out += [Forgotten(n, drain=False) for n in sorted(self.addresses) if n != self.node_id]
        self.topology = HypercupNode(self.node_id, self.address)
        self._join_contact = None
        self._asked_this_round.clear()  # it waited ``failure_seconds`` on the silent one
        self._join(now, out)

    def leave(self, now: float) -> list[Output]:
        """Leave cleanly: hand the peers to a super-peer that answers, tell them, withdraw what
        this origin announced, leave the cube (``Stopped`` follows ``hypercup.Left``). Heard from
        none, it hails them all first and waits (``_hand_over_due``)."""
        out: list[Output] = []
        if self.stopping:
            return out
        self.stopping = True
        self._leave_asked_at = now
        if self._waits_for_successor(now):
            hailed = self._hail(now, out)
            log.warning("event=leave_waits node=%s hailed=%s", self.node_id, ",".join(hailed))
            return out
        self._hand_over(now, out)
        return out

    def _waits_for_successor(self, now: float) -> bool:
        """A supervised member with neighbours that has heard from no super-peer it could hand
        its peers to: what it would hand over now would go where nothing answers."""
        return (
            self.core is not None
            and self.topology.state is NodeState.MEMBER
            and self.config.heartbeat_seconds is not None
            and bool(self.core.view.neighbours())
            and self.successor(now) is None
        )

    def _hand_over_due(self, now: float, out: list[Output]) -> None:
        """A leaver that waits for a successor: one answered, or ``reform_seconds`` passed."""
        asked = self._leave_asked_at
        if asked is None or self.adopter is not None:
            return
        if self.successor(now) is not None or now >= asked + self.config.reform_seconds:
            self._hand_over(now, out)

    def _hand_over(self, now: float, out: list[Output]) -> None:
        """The leave itself: the peers and the log to the successor (its first neighbour by
        name if none answers), a goodbye to each peer, the departure announced, the cube left."""
        self._handle_backlog(now, out, everything=True)  # what it holds goes with its peers
        core = self.core
        successor = None
        if core is not None and self.topology.state is NodeState.MEMBER:
            successor = self.successor(now)
            if successor is None:
                neighbours = sorted(core.view.neighbours())
                successor = neighbours[0] if neighbours else None
        self.adopter = successor or ""
        if successor is not None:
            log.info("event=hand_over node=%s adopter=%s", self.node_id, successor)
            for peer in sorted(set(self.store.local_peers()) | set(self._peer_connection)):
                self._adopt_out(peer, successor, now, out)
            second = self._live_neighbour([successor], now)
            self._adopt_log_out([successor] if second is None else [successor, second], now, out)
            assert core is not None
            self._core(
                core.announce_departure(
                    self.node_id,
                    self.incarnation,
                    tuple(sorted(core.view.positions)),
                    failed=False,
                    since=self.clock.now(now),
                    now=now,
                    successor=successor,
                    successor_address=self.addresses.get(successor, ""),
                ),
                now,
                out,
            )
        for connection in sorted(self._peer_connection.values()):
            goodbye = m.Goodbye(
                reason="the super-peer is leaving the network",
                successor=self.addresses.get(successor, "") if successor else "",
            )
            out.append(ToConnection(connection, goodbye, wire.encode(goodbye)))
            out.append(CloseConnection(connection, "leaving"))
        if core is not None:
            out += core.retire(now)
        self._leave_cube(now, out)

    def _leave_cube(self, now: float, out: list[Output]) -> None:
        if self.topology.state is not NodeState.MEMBER:
            self.stopped = True
            out.append(Stopped("left"))
            return
        try:
            leave = self.topology.leave(incarnation=self.incarnation, last_heard=self.clock.last)
            self._leaving_since = now
            self._topology(leave, now, out)
        except LocalProtocolError:
            self._join_at = now + self.config.rejoin_seconds  # busy: ``timer`` tries again
        except RemoteProtocolError as error:
            # what it knows of its neighbourhood does not fit together (no walk can start from
            # it): it stops, and its place is repaired as a failure's (a replay of the chaos
            # schedules in the simulator: the error came out of ``leave``)
            self._left_anyway(f"no leave walk: {error}", now, out)

    def _left_anyway(self, reason: str, now: float, out: list[Output]) -> None:
        """The leave walk will not end in ``Released``: the cube repaired this node's place as
        a failure's (its walk overlapped a cut, and its neighbours declared it failed), or the
        walk was lost. Its peers were handed over already: it stops, and whatever is left of
        its place is repaired as a failure's (issue 33: a leaver waited for good)."""
        if self.stopped:
            return
        log.warning("event=left_unreleased node=%s reason=%r", self.node_id, reason)
        self.stopped = True
        out.append(Stopped(f"left the cube ({reason})"))

    def successor(self, now: float) -> str | None:
        """The super-peer that adopts this node's peers and log when it leaves: a live neighbour
        (``_live_neighbour``: one that crashed and is not yet repaired would take the peers and
        their mail to nowhere), else any super-peer heard from within ``failure_seconds`` that
        is not lost, failed, left or out of reach (first by name: cut off from its neighbours,
        a leaver reaches the rest of its side), else None (``leave`` hails and waits)."""
        if self.core is None:
            return None
        live = self._live_neighbour([], now)
        if live is not None:
            return live
        recent = now - self.config.failure_seconds
        for node in sorted(self._alive_at):
            if (
                node != self.node_id
                and self._alive_at[node] > recent
                and node in self.addresses
                and node not in self._lost
                and node not in self._suspected
                and not self._has_left(node)
                and not self._unusable_until(node, now)
            ):
                return node
        return None

    # == the topology ==============================================================================
    def _topology(self, outputs: list, now: float, out: list[Output]) -> None:
        self._dropped_neighbours = {}
        for output in outputs:
            if isinstance(output, Send):
                self.addresses.setdefault(output.to, output.address)
                message = output.message
                if isinstance(message, Welcome) and message.incarnation:
                    self._admitting(output.to, message.incarnation, now, out)
                elif isinstance(message, JoinWalk) and message.anchor == self.node_id:
                    message = dataclasses.replace(message, anchor_incarnation=self.incarnation)
                self._send(output.to, message, now, out, address=output.address)
            elif isinstance(output, Joined):
                self._join_contact = None
                self._joined(now, out)
            elif isinstance(output, TopologyChanged):
                self._changed(output, now, out)
            elif isinstance(output, JoinFailed):
                self._refused(output, now)
            elif isinstance(output, Departed):
                self._took_place_of(output, now, out)
            elif isinstance(output, Left):
                self.stopped = True
                log.info("event=left node=%s", self.node_id)
                out.append(Stopped("left the cube"))

    def _refused(self, refusal: JoinFailed, now: float) -> None:
        """A contact refused to admit this node. A member (busy, or still repairing this node's
        old place) is asked again after ``rejoin_seconds``. A contact that is no member is
        known out of the cube at once (``_nobody_in_the_cube``): the next contact is asked
        at once, until ``_join`` comes to one it asked since the last wait (each contact it
        may ask now, skipping those left aside, once a round), and only then does the node
        wait ``rejoin_seconds``. After a cut longer than the watchdog, every member of a side has
        rejoined, and one that waited a second per contact took some 15 s at 32 super-peers
        to learn that nobody it knows is in a cube and start one
        (``python -m bench.chaos_replay --cut-only 60``)."""
        if self._join_contact is not None:
            self._silent_since.pop(self._join_contact[0], None)
            if refusal.member:
                self._outside.pop(self._join_contact[0], None)
            else:
                self._outside[self._join_contact[0]] = True
        self._join_contact = None
        log.info("event=join_refused node=%s reason=%r", self.node_id, refusal.reason)
        if not refusal.member:
            self._join_at = now
            return
        self._asked_this_round.clear()
        self._join_at = now + self.config.rejoin_seconds

    def _joined(self, now: float, out: list[Output]) -> None:
        self._merging = None
        self._hailed_at = None
        self._joined_at = now
        self._joined_clock = self.clock.now(now)
        self._heard_as_member = set()
        self._outside.clear()
        self._asked_this_round.clear()
        self._silent_since.clear()
        # the roots its neighbours reported were those of the cube it was in before: kept, a
        # newcomer whose new parent had been its neighbour there named that cube as its own
        # until the parent's next heartbeat, and a member of the cube it joined, probed, took
        # that cube (dissolved by then) for a stronger one and left (16 super-peers, seed 8:
        # never one cube again)
        self._reported_roots.clear()
        self._other_dimension.clear()
        view = self.topology.view()
        # the core's first messages (the restore below) go to neighbours this node may never
        # have met, before the ``TopologyChanged`` that follows ``Joined`` names their addresses
        known = self.topology.known_peers()
        self.addresses.update((node, address) for node, (address, _) in known.items())
        for node in known:
            # members of this cube, whatever an earlier one of this node's declared them
            # (two sides of a partition each declare the other failed; one side joins the other)
            self.departed.pop(node, None)
        prepared = self._prepared
        if prepared is not None and not prepared.still_current(self.store):
            # a peer was forgotten while the join was refused (``superpeer._restoring``)
            prepared = self._prepared = None
        self.core = SuperPeerCore(
            self.node_id,
            self.address,
            view,
            self.config.routing,
            incarnation=self.incarnation,
            poset=prepared.poset if prepared is not None else None,
            clock=self.clock,
            versions=versions.ResourceVersions(
                self.config.routing.versions, versions.StoredVersions(self.store)
            ),
        )
        log.info(
            "event=member node=%s incarnation=%d positions=%s",
            self.node_id,
            self.incarnation,
            sorted(view.positions),
        )
        self._trace_event(out, now, "member", kind="hypercup.joined")
        self._discipline_clock()
        # alive from now on (housekeeping renews it): a crash before the first renewal must
        # still catch up from here when it restarts, not skip the catch-up for want of a time
        self._keep_alive_at(self.clock.now(now))
        self._restore(now, out)
        early, self._before_member = self._before_member, []
        for sender, incarnation, received in early:
            out += self._superpeer_message(sender, incarnation, received, now)

    def _changed(self, change: TopologyChanged, now: float, out: list[Output]) -> None:
        self.addresses.update(change.addresses)
        view = change.view
        neighbours = view.neighbours()
        for neighbour in neighbours:
            self._last_heard.setdefault(neighbour, now)
        for gone in set(self._last_heard) - neighbours:
            del self._last_heard[gone]
            if self._has_left(gone):
                out.append(Forgotten(gone))  # re-opened by what was routed to it while it left
        for gone in set(self._neighbour_incarnations) - neighbours:
            self._dropped_neighbours[gone] = self._neighbour_incarnations.pop(gone)
        for gone in set(self.offsets) - neighbours:
            del self.offsets[gone]
            self._heartbeat_echo.pop(gone, None)
            self._clock_sampled.pop(gone, None)
        self._discipline_clock()
        self._suspected = {n: t for n, t in self._suspected.items() if n in neighbours}
        self.store.set_meta(
            "neighbours", ",".join(f"{n}={change.addresses[n]}" for n in sorted(neighbours))
        )
        if self.core is not None:
            self._core(self.core.topology_changed(view, now), now, out)

    def _took_place_of(self, departed: Departed, now: float, out: list[Output]) -> None:
        out.append(Forgotten(departed.node))
        self._renewed.add(departed.node)
        # the incarnation the repair (or the leaver) named: the one who noticed the failure
        # knew it, while the one taking its place may never have heard from it; else the one
        # it had as our neighbour, else the newest we heard of (with 0, nobody would evict it,
        # nor drop a link that still holds what was meant for it: chaos seed 43)
        incarnation = departed.incarnation or self._neighbour_incarnations.get(
            departed.node, self.incarnations.get(departed.node, 0)
        )
        # and at least the one this change took out of our table: the repairer may have known
        # only an older one (it never heard from a node that rejoined behind a cut, which then
        # went on as a member of a cube gone by, its messages taken: issue 33)
        incarnation = max(incarnation, self._dropped_neighbours.get(departed.node, 0))
        if departed.failed:
            self.departed[departed.node] = incarnation
        else:
            self._left[departed.node] = max(self._left.get(departed.node, 0), incarnation)
        self.statistics.repairs += int(departed.failed)
        self._trace_event(
            out,
            now,
            "repair" if departed.failed else "departure",
            kind="sp.departed",
            neighbour=departed.node,
        )
        if self.core is None:
            return
        since = self._departure_since(departed, now)
        if departed.failed:
            self._lose(departed.node, since, now)
        self._core(
            self.core.announce_departure(
                departed.node,
                incarnation,
                departed.positions,
                failed=departed.failed,
                since=since,
                now=now,
            ),
            now,
            out,
        )
        self._plan_catchup(departed.positions, since, now)

    # == other super-peers =========================================================================
    def superpeer_hello(
        self, node: str, incarnation: int, address: str, now: float
    ) -> list[Output]:
        """Super-peer ``node`` (at ``address``) opened a connection to this one."""
        if self._waits(0, lambda at: self._superpeer_hello(node, incarnation, address, at), now):
            return []
        return self._superpeer_hello(node, incarnation, address, now)

    def _superpeer_hello(
        self, node: str, incarnation: int, address: str, now: float
    ) -> list[Output]:
        out: list[Output] = []
        if address:
            self.addresses[node] = address
        self._incarnation(node, incarnation, now, out)
        self._heard(node, now)
        return out

    def superpeer_welcomed(self, node: str, incarnation: int, now: float) -> list[Output]:
        """A link to super-peer ``node`` connected, and the process there is ``incarnation``.
        A restart behind a link that connected again by itself is known at once: the new
        process acknowledges the link's frames, and those acknowledgements kept a neighbour
        that had died alive here (chaos seed 43: for 37 s, so that the catch-up after its
        repair started too late)."""
        return self.superpeer_hello(node, incarnation, "", now)

    def _admitting(self, node: str, incarnation: int, now: float, out: list[Output]) -> None:
        """This member welcomes incarnation ``incarnation`` of ``node`` into the cube, maybe
        without ever having heard from it (the join came through other members). It is known
        from now on: what was queued for an older one is dropped, and the ``Welcome`` goes on
        a link meant for this one. (Sent on a link that still held an older incarnation's
        frames, the ``Welcome`` was dropped with them when the new process answered, and the
        cube counted a member that never knew it was one: chaos seed 43.)"""
        self._incarnation(node, incarnation, now, out, admitted=True)

    def _incarnation(
        self, node: str, incarnation: int, now: float, out: list[Output], *, admitted: bool = False
    ) -> None:
        previous = self.incarnations.get(node, 0)
        self.incarnations[node] = max(incarnation, previous)
        if incarnation > previous:
            # a new process there, maybe on another clock: measure it afresh
            self.offsets.pop(node, None)
            self._heartbeat_echo.pop(node, None)
        if incarnation > previous > 0:
            if node in self._renewed:
                self._renewed.discard(node)
            else:
                # first: dropping the link drops what is queued on it, and what the core sends
                # the new incarnation below must go on a new one
                out.append(Forgotten(node, drain=False))
                if self._join_contact is not None and self._join_contact[0] == node:
                    self._contact_restarted = (node, now)
            if self.core is not None:
                self._core(self.core.neighbour_restarted(node, now), now, out)
        if not self._is_neighbour(node):
            return
        if admitted:
            self._neighbour_incarnations[node] = self.incarnations[node]
            return
        known = self._neighbour_incarnations.setdefault(node, self.incarnations[node])
        if incarnation > known:
            self._restarted(node, now, out)

    def superpeer_heard(self, node: str, now: float) -> None:
        """Any sign of life on a link with ``node`` (an acknowledgement, a frame)."""
        self._heard(node, now)

    def _heard(self, node: str, now: float) -> None:
        self._alive_at[node] = now
        if self._join_contact is not None and self._join_contact[0] == node:
            self._join_contact = (node, now)
        known = self._neighbour_incarnations.get(node)
        if known is not None and self.incarnations.get(node, 0) > known:
            # a new incarnation: the one in our table is still dead, and unrepaired (and was
            # last heard before: a catch-up after its repair starts from then)
            return
        if node in self._last_heard:
            self._last_heard[node] = now
            self._heard_as_member.add(node)
        self._suspected.pop(node, None)

    def _unusable_until(self, node: str, now: float) -> bool:
        until = self._unusable.get(node)
        if until is not None and until <= now:
            del self._unusable[node]
            return False
        return until is not None

    def _could_not_stay(self, now: float) -> None:
        """This node rejoins soon after it joined, and some neighbours never spoke to it: it
        reaches that cube only partly (through a bridge across a cut that has not healed).
        Its members known here are not contacts for ``wedged_seconds``: this side forms a cube
        of its own meanwhile, and the two merge when the cut heals (``superpeer._merging``).
        A neighbour is silent only once it had ``failure_seconds`` to speak: a node evicted
        a moment after its welcome (a neighbour whose table the welcome's update has not
        reached yet) has heard nothing of anyone, and marking them all unusable would leave it
        only the contacts that are gone (a leaver's address from its command line)."""
        if self._joined_at is None or not (
            self.config.failure_seconds <= now - self._joined_at <= self.config.wedged_seconds
        ):
            return
        neighbours = set(self._last_heard)
        if not neighbours - self._heard_as_member:
            return
        until = now + self.config.wedged_seconds
        for node in neighbours | self._heard_as_member:
            self._unusable[node] = until
        log.warning(
            "event=cube_out_of_reach node=%s silent=%s",
            self.node_id,
            sorted(neighbours - self._heard_as_member),
        )

    def _absorb(self, sender: str, incarnation: int, reading: float, now: float) -> None:
        """The hybrid time a frame of ``sender`` carried (``clocks``): pushed into this node's
        clock, and kept as when ``sender`` was last heard from (unless a newer incarnation
        speaks for it: the one in our table is dead, and its time is its last frame's)."""
        if not self.clock.observe(reading, now):
            self._clock_problem(
                sender,
                f"its hybrid time is {reading - now:.1f} s ahead of this node's clock, more than "
                f"max_clock_lead_seconds ({self.config.max_clock_lead_seconds:g}): not absorbed",
                now,
            )
        known = self._neighbour_incarnations.get(sender)
        if known is None or incarnation <= known:
            self._heard_clock[sender] = reading

    def _departure_since(self, departed: Departed, now: float) -> float:
        """The hybrid time a departed member was last heard from (``clocks``, rule 5): what its
        repairer (a neighbour of it) or itself, leaving, said, or this node's own, whichever is
        earliest. This node takes its place, so it may never have heard from it; if nobody
        said, three failure timeouts back (detection, a repairer that failed too, the repair)."""
        known = [departed.last_heard, self._heard_clock.get(departed.node, 0.0)]
        heard = [t for t in known if t > 0.0]
        if heard:
            return min(heard)
        return self.clock.now(now) - 3 * self.config.failure_seconds

    def superpeer_unreachable(self, node: str, now: float) -> list[Output]:
        """The runtime gave up on its link to ``node`` (its queue overflowed)."""
        if self._waits(0, lambda at: self._superpeer_unreachable(node, at), now):
            return []
        return self._superpeer_unreachable(node, now)

    def _superpeer_unreachable(self, node: str, now: float) -> list[Output]:
        out: list[Output] = []
        if self._is_neighbour(node):
            self._fail(node, now, out)
        return out

    def superpeer_message(
        self, sender: str, incarnation: int, received: Received, now: float
    ) -> list[Output]:
        """A message from super-peer ``sender`` (whose connection said ``incarnation``)."""
        cost = placements(received.message) if self.core is not None else 0
        if self._waits(
            cost, lambda at: self._superpeer_message(sender, incarnation, received, at), now
        ):
            if self.started and incarnation == self.incarnations.get(sender):
                self._heard(sender, now)  # a sign of life now, whenever its turn comes
            return []
        return self._superpeer_message(sender, incarnation, received, now)

    def _superpeer_message(
        self, sender: str, incarnation: int, received: Received, now: float
    ) -> list[Output]:
        message, message_id, size = received.message, received.message_id, received.size
        out: list[Output] = []
        if not self.started:
            self._trace(
                out, now, "drop", message, neighbour=sender, size=size, msg=message_id,
                reason="not started: no incarnation to answer as",
            )  # fmt: skip
            return out
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.statistics.received[kind] += 1
        self._incarnation(sender, incarnation, now, out)
        self._heard(sender, now)
        if received.clock:
            self._absorb(sender, incarnation, received.clock, now)
        if incarnation < self.incarnations[sender] and not isinstance(message, FROM_ANY):
            # still in flight from an incarnation that a newer one replaced: its state is gone
            self._trace(
                out, now, "drop", message, neighbour=sender, size=size, msg=message_id,
                reason=f"from incarnation {incarnation}, replaced by a newer one",
            )  # fmt: skip
            return out
        if (
            self.core is not None
            and self.departed.get(sender, -1) >= incarnation
            and not isinstance(message, FROM_ANY)
        ):
            # a member's judgement: a joining node has no cube to judge by (the one that
            # declared the sender failed may be the one that evicted this node; the sender's
            # cube is the one being joined), so what it gets waits for ``_joined``
            self._trace(
                out, now, "drop", message, neighbour=sender, size=size, msg=message_id,
                reason=f"incarnation {incarnation} departed the cube (evicted)",
            )  # fmt: skip
            self._evict(sender, incarnation, now, out)
            return out
        if (
            kind.startswith("hypercup.")
            or isinstance(message, NODE_HANDLED)
            or (isinstance(message, m.Adopt | m.Versions) and self.core is not None)
        ):
            # the node handles these itself (the core traces what it handles)
            self._trace(out, now, "receive", message, neighbour=sender, size=size, msg=message_id)
        if isinstance(message, m.Evicted):
            self._evicted(sender, incarnation, message, now, out)
            return out
        if kind.startswith("hypercup."):
            if isinstance(message, JoinRequest):
                # the link says which incarnation asks; its Welcome is meant for that one
                message = dataclasses.replace(message, incarnation=incarnation)
                self._asks_to_join(sender, incarnation, now, out)
            elif isinstance(message, JoinWalk):
                self._asks_to_join(message.newcomer, message.newcomer_incarnation, now, out)
                anchor = message.anchor
                if anchor is not None and anchor != self.node_id and message.anchor_incarnation:
                    # the take reports to that process (``JoinWalk.anchor_incarnation``)
                    self._incarnation(anchor, message.anchor_incarnation, now, out)
            self._hypercup(sender, message, now, out)
        elif isinstance(message, m.Heartbeat):
            self._heartbeat_in(sender, message, now)  # a sign of life, noted above
            self._heard_known(message)
            self._heard_identity(sender, incarnation, message, now, out)
        elif isinstance(message, m.CatchUp):
            self._serve_catchup(sender, message, now, out)
        elif isinstance(message, m.ReplayRequest):
            self._replay_for_late(Replay(sender, message.subscription, message.since), now, out)
        elif isinstance(message, m.Mail):
            self._mail_in(message, now, out)
        elif isinstance(message, m.Handover):
            self._handover_out(sender, message, now, out)
        elif isinstance(message, m.HandoverDone):
            self._handover_done(sender, message, now, out)
        elif isinstance(message, m.HandoverReceived):
            self._handover_received(sender, message)
        elif isinstance(message, m.AdoptLog):
            self._adopt_log_in(message)
        elif isinstance(message, m.LogCopy):
            self._copy_in(sender, message, now, out)
        elif isinstance(message, m.LogCopied):
            self._copied(sender, message, now, out)
        elif isinstance(message, RENDEZVOUS_MESSAGES):
            produced: list = []
            self.rendezvous.route(message, now, produced)
            self._core(produced, now, out)
        elif isinstance(message, DIRECT_LOOKUPS):
            produced = []
            self.locator.route(message, now, produced)
            self._core(produced, now, out)
        elif isinstance(message, m.Adopt) and self.core is not None:
            self._adopt_in(sender, message, now, out)
        elif isinstance(message, m.Versions) and self.core is not None:
            self._versions_in(message)
        elif self.core is None:
            # from members that already count this newcomer as a neighbour: its Welcome may
            # still be on its way (another sender, another link)
            self._before_member.append((sender, incarnation, received))
        else:
            # a broadcast may arrive again down another tree: only its first arrival counts
            fresh = not isinstance(message, Broadcast) or not self.core.has_seen(
                broadcast_key(message), now
            )
            self._core(
                self.core.superpeer_message(sender, message, size, now, message_id), now, out
            )
            if fresh:
                self._broadcast_in(message, now, out)
        return out

    def _broadcast_in(self, message: object, now: float, out: list[Output]) -> None:
        """What the node itself does with the first arrival of a broadcast (``sp.departed``,
        ``sp.reconnected``, ``sp.returned``, ``sp.merge``; the core relayed it and updated its
        routes)."""
        if isinstance(message, m.Departed) and message.node == self.node_id:
            if message.failed and message.incarnation == self.incarnation:
                # the cube declared this incarnation failed (it was paused, or cut off) and
                # the news came down a tree that still ran through it
                self._rejoin("the cube declared this super-peer failed", now, out)
        elif isinstance(message, m.Departed):
            # what is queued for it still goes out (a goodbye is answered): Forgotten drains
            if self.incarnations.get(message.node, 0) <= message.incarnation:
                # (not when a newer incarnation spoke already: the link is its)
                out.append(Forgotten(message.node))
                self._renewed.add(message.node)
            if message.failed:  # a node declared failed may still be alive: evict it
                self.departed[message.node] = max(
                    self.departed.get(message.node, 0), message.incarnation
                )
                self._lose(message.node, message.since, now)
            else:
                self._left[message.node] = max(self._left.get(message.node, 0), message.incarnation)
            if message.successor:
                self.successors[message.node] = message.successor
                if message.successor_address:
                    self.addresses.setdefault(message.successor, message.successor_address)
            # a clean departure too: what was in flight through the leaver when it went is
            # gone with it
            # from the earliest a neighbour of it heard of it: its repairer, or this node if it
            # was one and heard it last earlier (only then: a frame from long ago, a catch-up's
            # answer, says nothing about its last moments)
            since = message.since
            mine = self._heard_clock.get(message.node)
            if mine is not None and since - 3 * self.config.failure_seconds <= mine < since:
                since = mine
            self._plan_catchup(message.positions, since, now)
        elif isinstance(message, m.Reconnected):
            self._plan_catchup(message.positions, message.since, now)
        elif isinstance(message, m.Returned):
            self.returned[message.origin] = max(
                message.incarnation, self.returned.get(message.origin, 0)
            )
            self._returned(message, now, out)
            self._returned_from_apart(message, now)
        elif isinstance(message, m.Merge):
            self._merge_heard(message, now, out)

    def _hypercup(self, sender: str, message: object, now: float, out: list[Output]) -> None:
        try:
            self._topology(self.topology.receive(sender, message), now, out)  # type: ignore[arg-type]
        except HypercupError as error:
            self._topology_error(sender, error, now, out)

    def _topology_error(
        self,
        sender: str,
        error: HypercupError,
        now: float,
        out: list[Output],
        *,
        event: str = "topology_error",
    ) -> None:
        """The topology protocol refused an input (``sender``'s message, the messages it held
        back and went on with at a tick, or a failure to repair: ``event``): logged; a node it
        broke rejoins."""
        log.warning("event=%s node=%s sender=%s error=%r", event, self.node_id, sender, str(error))
        if self.topology.state is NodeState.BROKEN:
            self._rejoin(f"the topology protocol broke: {error}", now, out)

    def _asks_to_join(self, node: str, incarnation: int, now: float, out: list[Output]) -> None:
        """Incarnation ``incarnation`` of ``node`` asks to join (its ``JoinRequest``, or a walk
        for it), and our table has ``node`` as a neighbour: the incarnation there is gone (a
        member does not ask to join). Known as older, its restart was noticed already; but it
        may be recorded as this one, when the table came from a departure's walk and the first
        frame heard from ``node`` was the new process's (kill-pause at 16, seed 0: a member
        took a place with a walk's table that named a node repaired away meanwhile, took that
        node's new process for the neighbour, heard it ask to join every second, refused it as
        "still a member here" and never declared it failed, until the watchdog). So the one in
        the table is taken for an older one, and failed at once, as a restart is."""
        if (
            incarnation <= 0
            or not self._is_neighbour(node)
            or self._member_heartbeats.get(node, 0) >= incarnation
        ):
            # (that process heartbeated here as a member: a walk for it is a late repeat of
            # its join, which another contact made)
            return
        known = self._neighbour_incarnations.get(node)
        if known is not None and known < incarnation:
            return  # noticed as a restart already (``_incarnation``)
        self._neighbour_incarnations[node] = incarnation - 1
        self._restarted(node, now, out)

    def _back_in_place(
        self,
        node: str,
        incarnation: int,
        heartbeat: m.Heartbeat,
        now: float,
        out: list[Output],
    ) -> None:
        """A neighbour taken for restarted (a newer incarnation spoke: declared failed) that
        heartbeats as a member of this cube at the very positions this node's table gives it
        rejoined into that place: its old incarnation's place changed hands where this node
        did not see it (the repair's announcement lost in the faults around it), and the new
        one took the same position. It is the neighbour: the topology protocol stops taking
        it for failed, and so does this node. (On daemons, 15 of the 17 rejoins "unrepaired
        for 60 s" of a chaos run waited on a neighbour that was back, heartbeating, in place.)

        So is the same process, declared failed while one of the two was cut off (an
        ``isolate``, a side of a partition) and heartbeating in place since the heal: the
        repair this node started of it is dropped before it walks. Kept, it held this node
        busy after the heal with lookups sent while it was cut off, and other departures
        behind it, until the wedge watchdog, whose rejoins left more places to repair (the
        chaos schedules replayed in the simulator: every heal over 30 s had one). Nothing was
        repaired, so no ``sp.departed`` makes the access points catch up on what the link
        between the two may have dropped meanwhile (its channels keep what a cut holds, but
        not past their bound, nor what either end's routing dropped while it took the other
        for failed): this node broadcasts ``sp.reconnected``, and every access point catches
        up on what went through both places since it last heard from the neighbour, as after
        a departure."""
        known = self._neighbour_incarnations.get(node)
        if known is None or incarnation < known:
            return
        same = incarnation == known
        since = self.topology.last_heard_if_failed(node)
        if same and since is None:
            return
        mine = self.cube_identity()
        if mine is None or (heartbeat.dimension, heartbeat.root) != mine:
            return
        peer = self.topology.known_peers().get(node)
        held = sorted(peer[1]) if peer is not None else []
        if not held or held != sorted(heartbeat.positions):
            return
        log.warning(
            "event=neighbour_back node=%s neighbour=%s incarnation=%d positions=%s",
            self.node_id,
            node,
            incarnation,
            held,
        )
        self._neighbour_incarnations[node] = incarnation
        self._heard(node, now)  # a sign of life of the neighbour, from now on
        try:
            self._topology(self.topology.neighbour_alive(node), now, out)
        except HypercupError as error:
            self._topology_error(node, error, now, out)
            return
        if same and since is not None and self.core is not None:
            self._reconnected(node, held, since, now, out)

    def _reconnected(
        self, node: str, held: list[int], since: float, now: float, out: list[Output]
    ) -> None:
        """``sp.reconnected`` (``_back_in_place``), and this node's own catch-up."""
        assert self.core is not None
        positions = tuple(sorted({*held, *self.core.view.positions}))
        log.warning(
            "event=reconnected node=%s neighbour=%s positions=%s since=%.3f",
            self.node_id,
            node,
            list(positions),
            since,
        )
        message = m.Reconnected(
            origin=self.node_id,
            origin_position=self.core.view.root_position,
            neighbour=node,
            positions=positions,
            since=since,
        )
        produced: list = []
        self.core.broadcast(message, now, produced)
        self._core(produced, now, out)
        self._plan_catchup(positions, since, now)

    def _restarted(self, node: str, now: float, out: list[Output]) -> None:
        if self._is_neighbour(node):
            log.warning("event=neighbour_restarted node=%s neighbour=%s", self.node_id, node)
            self._fail(node, now, out)

    def _has_left(self, node: str) -> bool:
        """``node`` left cleanly and is out of our view, and no newer incarnation showed up."""
        return self._leaving(node) and not self._is_neighbour(node)

    def _leaving(self, node: str) -> bool:
        """``node`` announced its clean departure, and no newer incarnation showed up: it
        handed its peers and log over already, even while the repair has not taken it out of
        our view yet (its leave walk takes round trips)."""
        left = self._left.get(node)
        return left is not None and self.incarnations.get(node, 0) <= left

    def _dropped(self, target: str, message: object, now: float, out: list[Output]) -> bool:
        """Whether ``message`` is not sent, ``target`` having left (the one place this is
        decided, for the node's messages and the core's alike). The topology protocol's own
        messages still reach a leaver: its ``Released``; and so does ``Evicted``, which tells a
        leaver whose place was repaired as a failure's that no ``Released`` will come."""
        kind: str = type(message).KIND  # type: ignore[attr-defined]
        if (
            self._has_left(target)
            and not kind.startswith("hypercup.")
            and not isinstance(message, m.Evicted)
        ):
            self._trace(out, now, "drop", message, neighbour=target, reason="it left the network")
            return True
        return False

    def _is_neighbour(self, node: str) -> bool:
        return self.topology.is_neighbour(node)

    def _fail(self, node: str, now: float, out: list[Output]) -> None:
        newly = node not in self._suspected
        if newly:
            self.statistics.failures_detected += 1
            log.error("event=neighbour_failed node=%s neighbour=%s", self.node_id, node)
            self._trace_event(out, now, "neighbour_failed", kind="sp.heartbeat", neighbour=node)
        since = self._suspected.setdefault(node, now)
        if newly:
            # a restart of this node catches up from when it last heard from it, even if its
            # repair wedges (a cut overlapping another departure) and it is never lost
            self._keep_apart_since()
        self._retry_at = now + (self.config.heartbeat_seconds or self.config.rejoin_seconds)
        # still unrepaired after failure_seconds: the designated repairer may be dead too
        fallback = int((now - since) // self.config.failure_seconds)
        try:
            # the incarnation that failed: the one in our table, not a newer one that spoke
            incarnation = self._neighbour_incarnations.get(node, self.incarnations.get(node, 0))
            failed = self.topology.neighbour_failed(
                node,
                fallback=fallback,
                incarnation=incarnation,
                last_heard=self._heard_clock.get(node, 0.0),
                restarted=self.incarnations.get(node, 0) > incarnation,
            )
            self._topology(failed, now, out)
        except LocalProtocolError as error:
            log.info(
                "event=repair_deferred node=%s neighbour=%s reason=%r",
                self.node_id,
                node,
                str(error),
            )
        except HypercupError as error:
            self._topology_error(node, error, now, out, event="repair_error")

    def _rejoin(
        self,
        reason: str,
        now: float,
        out: list[Output],
        *,
        contacts: list[tuple[str, str]] | None = None,
        since: float | None = None,
        still_held: bool = False,
    ) -> None:
        """Out of the cube while alive (evicted, or the protocol broke): start again as a new
        incarnation, on the durable state, through the members this node knows (``contacts``
        first: the stronger cube of a merge), catching up from ``since`` (by default from when
        it last heard from a neighbour: the hybrid time that frame carried, ``clocks``, 5).
        ``still_held``: the cube has likely not replaced this incarnation yet (it stalled past
        ``failure_seconds``): it joins through its old neighbours first, as a restarted node
        does."""
        if self.stopping:
            # a leaver never rejoins (a new incarnation would drop the hand-over still queued
            # on its links: issue 33): it hands over if it has not yet, and stops
            if self.adopter is None:
                self._hand_over(now, out)
            self._left_anyway(reason, now, out)
            return
        log.error("event=rejoin node=%s reason=%r", self.node_id, reason)
        self.statistics.rejoins += 1
        self._could_not_stay(now)
        self._joined_at = None
        self._trace_event(out, now, "rejoin", kind="hypercup.join_request")
        heard = [self._heard_clock.get(n, self.clock.last) for n in self._last_heard]
        last_heard = min(heard, default=self.clock.now(now)) - self.config.catchup_margin_seconds
        since = last_heard if since is None else min(since, last_heard)
        # and from when it lost super-peers it has not found again: whatever makes it rejoin
        # (an eviction by the other side of a cut that healed), that side's publications since
        # then may be missing here
        apart = self._apart_since(now)
        if apart is not None:
            since = min(since, apart)
        # and from where a catch-up of the incarnation before began, if it was not answered
        # whole (it was asked on links this rejoin drops, or not asked yet), or where the one
        # before that was to begin (a rejoin before the restore)
        self._prune_unanswered(now)
        for earlier in (self._unanswered_since(), self._restored_since):
            if earlier is not None:
                since = min(since, earlier)
        self._unanswered.clear()
        first = [c for c in contacts or [] if c[0] != self.node_id and c[1]]
        for node, _ in first:
            # a stronger cube this node reached itself (a merge): whatever an earlier rejoin
            # found of it behind a cut, it is reachable now (or each merge would make a cube
            # of one again: issue 33)
            self._unusable.pop(node, None)
        known = [
            (n, a)
            for n, a in sorted(self.addresses.items())
            if n != self.node_id and not self._has_left(n) and n not in dict(first)
        ]
        # the members we heard from last are the likeliest to answer
        known.sort(key=lambda c: -self._last_heard.get(c[0], -math.inf))
        contacts = first + known
        # the neighbours of the incarnation that rejoins (none for a merge: the stronger
        # cube's members come first)
        neighbours = set(self._last_heard) if still_held and not first else set()
        # every peer connection, those still identifying too: one admitted before the rejoin
        # would finish its identification at a super-peer without a core (an assertion on
        # a daemon in the chaos run); the peers come back, or fail over, as after a Goodbye.
        # Not one that has not said Hello: it may be a super-peer's, whose link the runtime
        # takes over when its Hello comes (and a peer's Hello is then refused: not serving)
        for connection, entry in list(self._connections.items()):
            if entry.session.state is AccessState.AWAIT_HELLO:
                continue
            goodbye = m.Goodbye(reason="the super-peer is rejoining the network")
            out.append(ToConnection(connection, goodbye, wire.encode(goodbye)))
            self._close(connection, "rejoining", now, out)
        self.incarnation = self.store.next_incarnation()
        # every link said the old incarnation in its Hello: open them again as the new one (the
        # members drop what the old one sends), and drop what was queued for the old cube
        out += [Forgotten(node, drain=False) for node, _ in contacts]
        self.topology = HypercupNode(self.node_id, self.address)
        self.core = None
        self._last_heard.clear()
        self._suspected.clear()
        self._stale_claims.clear()
        self._neighbour_claims.clear()
        self._neighbour_incarnations.clear()  # the next cube's neighbours are new acquaintances
        self._busy_since = None
        self._lagging_since = None
        self._catchups.clear()
        self._replay.clear()  # the next member replays its log from ``since`` (``_restore``)
        self._timer_due = None
        self._before_member.clear()
        self._restored_since = since
        self._contacts = contacts
        self._hailed_at = None
        # as after a restart: through the old neighbours first, for a while, if the cube may
        # not have replaced this incarnation yet: they refuse until its place is repaired, where
        # a member that never knew it would admit it into a cube still repairing its old place,
        # and it would hold two (a pause overlapping a neighbour's crash). Not after a wedge or
        # a cut: the old neighbours may be where it cannot reach
        self._join_through(neighbours, now)
        if contacts:
            self._join(now, out)
        else:
            self._topology(self.topology.create(), now, out)

    # == the routing core ==========================================================================
    def _core(self, outputs: list, now: float, out: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, ToSuperPeer):
                if self._dropped(output.node, output.message, now, out):
                    continue
                self._last_sent[output.node] = now
                out.append(
                    self._to_superpeer(
                        output.node, output.message, output.data, output.message_id, output.address
                    )
                )
            elif isinstance(output, Deliver):
                self._deliver(output.peer, output.notify, now, out)
            elif isinstance(output, ToPeer):
                connection = self._peer_connection.get(output.peer)
                if connection is not None:
                    item = ToConnection(connection, output.message, output.data)
                    if answered_in_order(output.message):
                        self._answer(item, out)
                    else:
                        out.append(item)
            elif isinstance(output, Repeated):
                self._answer_repeat(output, out)
            elif isinstance(output, LogPublication):
                # the publication kept once: the log entry, the version record and the mail
                # of every local subscriber refer to it (``superpeer.store``, bodies)
                notification = output.notification
                key, held = self._keep_logged(notification)
                self.store.set_pending(
                    versions.RECORDS, *versions.record_of(notification, key if held else None)
                )
                self._replicate(notification, output.ack, now, out)
            elif isinstance(output, Found):
                produced: list = []
                self.rendezvous.found(output.request, output.superpeer, now, produced)
                self._core(produced, now, out)
            elif isinstance(output, Replay) and output.origin:
                request = m.ReplayRequest(subscription=output.subscription, since=output.since)
                self._send(output.origin, request, now, out, address=output.address)
            elif isinstance(output, Replay):
                self._replay_for_late(output, now, out)
            else:
                out.append(output)

    def _deliver(
        self,
        peer: str,
        notify: m.Notify,
        now: float,
        out: list[Output],
        *,
        kept: bool = False,
    ) -> None:
        """``notify`` for local peer ``peer``, into its mail for the subscriptions it is owed
        to (``clocks``, rules 2 and 3, in hybrid times). Whatever way it came, nothing is owed
        for a subscription the peer withdrew here before the publication, and a subscription is
        owed only what was published from when it was made, less the margin: what came along
        a route too, since a route that was in place for an older subscription
        (the same query made again, one covering it) carries what a link held up during a
        partition, published before a subscription made meanwhile. Mail kept by the peer's
        previous access point (``kept``) matched there while the subscription stood, and is
        owed however old it is (its time here is when the peer brought it)."""
        margin = self.config.catchup_margin_seconds
        published = notify.published_at
        made_at = self._subscribed_at.get(peer, {})

        def stands(sid: str) -> bool:
            made = made_at.get(sid)
            if made is None:
                ended = self._unsubscribed_at.get((peer, sid))
                if ended is not None and ended <= published:
                    return False
                # withdrawn since it matched (a replay or a catch-up on its way): what it was
                # owed still counts from when it was made
                made = self._withdrawn.get(peer, {}).get(sid, (None, -math.inf, None))[1]
            return kept or published >= made - margin

        if published >= self._latest_made.get(peer, math.inf) - margin and all(
            map(made_at.__contains__, notify.subscriptions)
        ):
            # every one it names stands, made here before it (less the margin): checked in
            # one pass, not one call per subscription
            standing = notify.subscriptions
        elif kept:
            # owed to every subscription still held (most of them, however many are named)
            doubtful = [sid for sid in notify.subscriptions if sid not in made_at]
            standing = (
                notify.subscriptions
                if not doubtful
                else tuple(sid for sid in notify.subscriptions if stands(sid))
            )
        else:
            standing = tuple(sid for sid in notify.subscriptions if stands(sid))
        if not standing:
            self._drop_notify(
                out,
                now,
                notify,
                peer,
                "published before its subscriptions here, or after they ended",
            )
            return
        if standing != notify.subscriptions:
            notify = dataclasses.replace(notify, subscriptions=standing)
        if peer in self._moved_away:
            # the peer moved away; its subscriptions here go after ``settle_seconds``
            self._forward(peer, (notify,), 1, now, out)
            return
        news = versions.narrowed(notify, self._asked_for_changes(peer))
        if news is None:
            self._drop_notify(
                out, now, notify, peer, "a change none of its subscriptions asked to hear of"
            )
            return
        out += self.mail.deliver(peer, news, now)

    def _asked_for_changes(self, peer: str) -> Callable[[str], bool]:
        """Which of ``peer``'s subscriptions asked to hear of changes (``on_change``): the
        core's, or between two incarnations (mail handed in while this node rejoins) the
        stored ones, which the next incarnation restores."""
        core = self.core
        if core is not None:
            return lambda sid: core.on_change(peer, sid)
        stored = stored_subscriptions(self.store.local_state(peer).subscriptions)
        return {subscribe.id for subscribe in stored if subscribe.on_change}.__contains__

    def _drop_notify(
        self, out: list[Output], now: float, notify: m.Notify, peer: str, reason: str
    ) -> None:
        self._trace(out, now, "drop", notify, peer=peer, reason=reason)

    def _forward(
        self,
        peer: str,
        notifications: tuple[m.Notify, ...],
        hops: int,
        now: float,
        out: list,
        *,
        purpose: str = "forward",
    ) -> None:
        """What reaches this node for a peer that moved away follows it, whatever way it came
        (its tree before the subscriptions here go, a catch-up asked before it moved, mail
        handed over or forwarded to this node before it learned that the peer moved on):
        dropping it here would lose it. Forwarding addresses point to where the peer went
        after its stay here and a stale handover is refused (``_check_handover``), so the
        chain ends where the peer is; ``MAX_FORWARD_HOPS`` bounds it all the same.

        ``purpose``: ``forward`` for what held here (kept: delivered there however old), or
        ``catchup`` for a catch-up answer passing through, which nothing here has held to
        the rule of order yet (``_mail_in``)."""
        forward = self._moved_away[peer]
        if hops > MAX_FORWARD_HOPS:
            log.error(
                "event=forward_dropped node=%s peer=%s notifications=%d hops=%d",
                self.node_id,
                peer,
                len(notifications),
                hops,
            )
            for notify in notifications:
                self._drop_notify(
                    out,
                    now,
                    notify,
                    peer,
                    "a forwarding address chain longer than MAX_FORWARD_HOPS",
                )
            return
        self.statistics.forwarded += len(notifications)
        chunks = fitting(
            notifications,
            lambda n: m.Mail(request="", purpose=purpose, peer=peer, notifications=(n,), last=True),
            count=self.config.mail_batch,
            frame_bytes=self.config.max_frame_bytes,
        )
        for chunk in chunks:
            mail = m.Mail(
                request="",
                purpose=purpose,
                peer=peer,
                notifications=tuple(chunk),
                last=True,
                hops=hops,
            )
            self._send(forward.node, mail, now, out, address=forward.address)

    def _restore(self, now: float, out: list[Output]) -> None:
        """A new member on a store that holds peers: route their state again; then, once the
        routes settled, catch up on what was published while this node was away.

        The peers' subscriptions go into the poset in one bulk insertion, before the join request
        left if this node joined (``superpeer._restoring``), else now."""
        core = self.core
        assert core is not None
        with collector_paused():
            self._restore_peers(core, now, out)
        for peer in self._peer_connection:
            core.attach(peer, now)
        core.versions.restore_stored()
        self._restore_withdrawals()
        for pending in self.store.pending(HANDOVERS):
            self._handover_due[pending] = now
        for peer, entry in self.store.pending(MOVED).items():
            self._moved_away[peer] = ForwardingAddress.restored(entry)
        since = self._restored_since
        restored = tuple(self.store.local_peers())
        merged: dict[str, object] = {}
        if self._merged_from is not None and self._merged_from[1] is not None:
            # back from the weaker of two cubes: the other side catches up on what it published
            merged = {"cube": self._merged_from[0], "since": self._merged_from[1]}
        if restored or since is not None:
            # (with no peer too: what its peers published before they left is in its log, and
            # a cube that had declared it failed catches up on it: ``superpeer._merging``)
            self._core_call(
                lambda o: core.broadcast(
                    m.Returned(
                        origin=self.node_id,
                        origin_position=core.view.root_position,
                        incarnation=self.incarnation,
                        peers=restored,
                        address=self.address,
                        **merged,  # type: ignore[arg-type]
                    ),
                    now,
                    o,
                ),
                now,
                out,
            )
        if since is not None:
            self._restored_since = None
            due = now + self.config.routing.settle_seconds
            catch_up = min(since, self._catch_up_from or since)
            self._catch_up_from = None
            self._catchups.append(PlannedCatchUp(due, catch_up, None, None))
            for data in self.store.logged_since(since):
                notification = decoded_as(data, m.Notification)
                if notification is not None and self._own_entry(notification):
                    # from the log: owed only to subscriptions older than it
                    again = dataclasses.replace(notification, replayed=True)
                    self._replay.append((due, again))

    def _restore_peers(self, core: SuperPeerCore, now: float, out: list[Output]) -> None:
        """The restore of the peers' own state: advertisements, schemas, subscriptions."""
        prepared, self._prepared = self._prepared, None
        subscriptions: list[PeerSubscription] = []  # all peers' at once: one bulk insertion
        if prepared is not None:  # placed in the core's poset already
            subscriptions = prepared.subscriptions
            for (peer, sid, _, _), expires in zip(
                prepared.subscriptions, prepared.expires, strict=True
            ):
                self.expiries.set(peer, sid, expires)
        for peer in self.store.local_peers():
            state = self.store.local_state(peer)
            core.attach(peer, now)
            connection = self._peer_connection.get(peer)
            if connection is None:
                core.detach(peer, now)
            if state.advertisement is not None:
                advertise = decoded_as(state.advertisement, m.Advertise)
                if advertise is not None:
                    self._core_call(
                        lambda o, a=advertise, p=peer: core.advertise(p, a.advertisement, now, o),
                        now,
                        out,
                    )
            schema = decoded_as(state.schema, m.PublishSchema)
            if schema is not None:
                self._core_call(
                    lambda o, s=schema, p=peer: core.publish_schema(p, frozenset(s.axioms), now, o),
                    now,
                    out,
                )
            for sid, made in state.subscribed_at.items():
                self._made_here(peer, sid, made)
            if prepared is None:
                for subscribe in stored_subscriptions(state.subscriptions):
                    subscriptions.append(
                        (peer, subscribe.id, subscribe.subscription, subscribe.on_change)
                    )
                    self.expiries.set(peer, subscribe.id, subscribe.expires)
        if prepared is not None:
            self._core_call(lambda o: core.subscribe_placed(subscriptions, now, o), now, out)
        else:
            self._core_call(lambda o: core.subscribe_many(subscriptions, now, o), now, out)

    def _core_call(self, call: Callable[[list], object], now: float, out: list[Output]) -> None:
        produced: list = []
        call(produced)
        self._core(produced, now, out)

    # == peers =====================================================================================
    def accept(self, remote: str, now: float) -> int | None:
        """A connection was accepted from ``remote`` (host:port); its id, or None when the address
        has too many connections that have not identified yet (the runtime closes it)."""
        host = remote.rpartition(":")[0] or remote
        if self._unidentified[host] >= self.config.max_unidentified_per_address:
            self.statistics.refused_connections += 1
            log.warning(
                "event=connection_refused remote=%s reason=%r",
                remote,
                "max_unidentified_per_address",
            )
            return None
        connection = self._next_connection
        self._next_connection += 1
        verifier = None
        if self.fingerprint is not None:
            fingerprint = self.fingerprint

            def verifier() -> crypto.Verifier:
                return crypto.Verifier(
                    node_id=self.node_id,
                    fingerprint=fingerprint,
                    registry=self.store,
                    address=remote,
                    random=self._random,
                    lifetime=self.config.admission_seconds,
                )

        session = AccessPointSession(
            connection,
            remote,
            node_id=self.node_id,
            address=self.address,
            opened_at=now,
            admission_seconds=self.config.admission_seconds,
            verifier=verifier,
            admit=self._admit,
            clock=self.clock,
            missing_since=self.missing_for,
            alternates=self.alternates,
        )
        self._connections[connection] = PeerConnection(session, host)
        self._unidentified[host] += 1
        return connection

    def alternates(self) -> tuple[str, ...]:
        """Where a peer of this node may go when it cannot reach this one (``Welcome``): the
        addresses of up to ``MAX_ALTERNATES`` other super-peers, this node's neighbours in the
        cube first, then the others it knows alive; none suspected, gone or left."""
        core = self.core
        neighbours = sorted(core.view.neighbours()) if core is not None else []
        named = [*neighbours, *self._live_superpeers(self.node_id)]
        found: list[str] = []
        for node in named:
            if node == self.node_id or node in self._suspected or self._has_left(node):
                continue
            address = self._address_of(node)
            if address and not self._gone(node) and address not in found:
                found.append(address)
                if len(found) == MAX_ALTERNATES:
                    break
        return tuple(found)

    def is_superpeer_connection(self, connection: int) -> None:
        """The connection turned out to be another super-peer's (the runtime handles it)."""
        self._forget_connection(connection)

    def _admit(self, hello: m.Hello) -> str | None:
        if self.core is None or self.stopping or self.topology.state is not NodeState.MEMBER:
            return "this super-peer is not serving peers (joining or shutting down)"
        return None

    def peer_message(
        self, connection: int, message: object, size: int, message_id: str, now: float
    ) -> list[Output]:
        """A message on peer connection ``connection``."""
        if self._waits(
            placements(message),
            lambda at: self._peer_message(connection, message, size, message_id, at),
            now,
        ):
            return []
        return self._peer_message(connection, message, size, message_id, now)

    def _peer_message(
        self, connection: int, message: object, size: int, message_id: str, now: float
    ) -> list[Output]:
        out: list[Output] = []
        entry = self._connections.get(connection)
        if entry is None:
            return out
        if not entry.session.established or isinstance(message, OUTSIDE_CORE + RESOURCE_REQUESTS):
            # the core traces what it handles; the handshake and acknowledgements are traced here
            who = message.node_id if isinstance(message, m.Hello) else entry.session.peer
            self._trace(out, now, "receive", message, peer=who, size=size, msg=message_id)
        for event in entry.session.receive(message, size, message_id, now):
            self._session_event(connection, entry, event, now, out)
        return out

    def peer_violation(self, connection: int, reason: str, now: float) -> list[Output]:
        """The runtime found peer connection ``connection`` broke a rule of the wire."""
        if self._waits(0, lambda at: self._peer_violation(connection, reason, at), now):
            return []
        return self._peer_violation(connection, reason, now)

    def _peer_violation(self, connection: int, reason: str, now: float) -> list[Output]:
        out: list[Output] = []
        entry = self._connections.get(connection)
        if entry is None:
            return out
        for event in entry.session.violation(reason):
            self._session_event(connection, entry, event, now, out)
        return out

    def connection_closed(self, connection: int, now: float) -> list[Output]:
        """Peer connection ``connection`` ended."""
        if self._waits(0, lambda at: self._connection_closed(connection, at), now):
            return []
        return self._connection_closed(connection, now)

    def _connection_closed(self, connection: int, now: float) -> list[Output]:
        out: list[Output] = []
        entry = self._connections.get(connection)
        if entry is None:
            return out
        entry.session.close()
        self._forget_connection(connection)
        self._answers_held.pop(connection, None)
        peer = entry.session.peer
        if peer is not None and self._peer_connection.get(peer) == connection:
            del self._peer_connection[peer]
            self.peer_offsets.pop(peer, None)  # measured while attached: a stale one misleads
            self._peer_clock_echo.pop(peer, None)
            self.store.set_pending(ATTACHED, peer, {"at": self.clock.now(now)})
            self.mail.detach(peer)
            self.rendezvous.detached(peer)
            if self.core is not None and peer in self.core.peers:
                self._core(self.core.detach(peer, now), now, out)
            log.info("event=peer_detached peer=%s", peer)
            self._handed_when_detached(peer, now, out)
        return out

    def _forget_connection(self, connection: int) -> None:
        entry = self._connections.pop(connection, None)
        if entry is not None and entry.counted:
            entry.counted = False
            self._unidentified[entry.host] -= 1
            if self._unidentified[entry.host] <= 0:
                del self._unidentified[entry.host]

    def _close(self, connection: int, reason: str, now: float, out: list[Output]) -> None:
        out.append(CloseConnection(connection, reason))
        out += self._connection_closed(connection, now)

    def _session_event(
        self, connection: int, entry: PeerConnection, event: object, now: float, out: list[Output]
    ) -> None:
        if isinstance(event, Reply):
            data = wire.encode(event.message)
            out.append(ToConnection(connection, event.message, data))
            self._trace(out, now, "send", event.message, peer=entry.session.peer, size=len(data))
        elif isinstance(event, Established):
            self._established(connection, entry, event, now, out)
        elif isinstance(event, Request):
            if self._refused_for_now:  # nearly always empty: nothing on a request's way
                refused = self._refused_for_now.get(entry.session.peer or "")
                if refused is not None:
                    refused.silent_by = None  # its connection is alive (``_refuse_for_now``)
            self._request(connection, entry, event, now, out)
        elif isinstance(event, Ended):
            if event.auth_failure is not None:
                self.statistics.auth_failures += 1
                self._trace_event(
                    out,
                    now,
                    "auth_failure",
                    kind=event.auth_failure,
                    peer=event.who,
                    msg=f"{entry.session.remote}: {event.reason}",
                )
                log.warning(
                    "event=auth_failure who=%s remote=%s code=%s reason=%r",
                    event.who,
                    entry.session.remote,
                    event.auth_failure,
                    event.reason,
                )
            elif event.reply is not None and isinstance(event.reply, m.LinkError):
                self.statistics.violations += 1
                self._trace_event(
                    out,
                    now,
                    "drop",
                    kind="link.error",
                    peer=entry.session.peer,
                    reason=event.reason[:200],
                )
            if event.reply is not None:
                out.append(ToConnection(connection, event.reply, wire.encode(event.reply)))
            self._close(connection, event.reason, now, out)

    def _established(
        self,
        connection: int,
        entry: PeerConnection,
        event: Established,
        now: float,
        out: list[Output],
    ) -> None:
        peer = event.peer
        if entry.counted:
            entry.counted = False
            self._unidentified[entry.host] -= 1
            if self._unidentified[entry.host] <= 0:
                del self._unidentified[entry.host]
        previous = self._peer_connection.get(peer)
        # it came back here after a move (its ``Moved`` follows): a handover refused while its
        # old connection seemed alive is not answered when that one closes
        self._refused_for_now.pop(peer, None)
        if previous is not None:
            self._close(previous, "the peer connected again (the newest connection wins)", now, out)
        self._peer_connection[peer] = connection
        self.store.set_pending(ATTACHED, peer, {"at": self.clock.now(now)})
        self._moved_away.pop(peer, None)
        self.store.set_pending(MOVED, peer, None)
        core = self.core
        assert core is not None
        core.attach(peer, now, entry.session.remote)
        log.info(
            "event=peer_identified peer=%s registered=%s address=%s",
            peer,
            event.registered,
            entry.session.remote,
        )
        out += self.mail.attach(peer, connection, now)
        self._clock_to_peer(peer, connection, now, out)
        produced: list = []
        self.rendezvous.attached(peer, produced)
        self._core(produced, now, out)

    def _request(
        self, connection: int, entry: PeerConnection, event: Request, now: float, out: list[Output]
    ) -> None:
        peer = entry.session.peer
        core = self.core
        message = event.message
        assert peer is not None
        if core is None:
            return
        if isinstance(message, m.Delivered):
            out += self.mail.acknowledged(peer, message.through, now)
            return
        if isinstance(message, m.Clock):
            self._peer_clock_in(peer, message, now)
            return
        if peer in self._held or (
            isinstance(message, m.Publish | m.Withdraw) and self._versions_coming(peer)
        ):
            # a change of a resource published through the previous access point needs its
            # versions, which that one's handover brings: held until then, and what follows it
            # too (the peer takes the answers in the order it asked)
            held = self._held.setdefault(peer, [])
            if len(held) >= self.config.max_held_requests:
                reason = (
                    f"more than max_held_requests ({self.config.max_held_requests}) requests "
                    "while the previous access point hands over your resources"
                )
                self._held.pop(peer)
                self._close(connection, reason, now, out)
                return
            held.append((connection, event))
            return
        if isinstance(message, m.Publish | m.Withdraw) and (
            reason := self._kept_elsewhere(peer, message)
        ):
            refused = m.Refused(request=request_label(message), reason=reason)
            self._core([ToPeer(peer, refused, wire.encode(refused))], now, out)
            return
        if self._over_rate(connection, peer, message, now, out):
            return
        self.statistics.received[type(message).KIND] += 1  # type: ignore[attr-defined]
        if isinstance(message, RESOURCE_REQUESTS):
            self._resource_request(peer, message, now, out)
            return
        if isinstance(message, m.Publish) and self._kept_logged_here(peer, message, now, out):
            return
        if isinstance(message, m.Moved):
            self._moved(peer, message, now, out)
            ack = m.Ack(request=request_label(message))
            self._answer(ToConnection(connection, ack, wire.encode(ack)), out)
            return
        if isinstance(message, m.Leave):
            self._core(core.leave(peer, now), now, out)
            for key in versions.forget_records(self.store, peer):
                self.store.set_pending(versions.RECORDS, key, None)
            self._forget_local(peer)
            self.store.remove(peer)  # gone for good: its identity may register afresh
            self.mail.detach(peer)
            self._close(connection, "the peer left", now, out)
            return
        if isinstance(message, m.Locate) and self._locate(peer, message, now, out):
            self._trace(out, now, "receive", message, peer=peer, size=event.size)
            return
        if isinstance(message, m.Subscribe | m.Publish):
            message = self._expiry_here(message, now)
        withdrawn = (
            core.subscription_of(peer, message.id) if isinstance(message, m.Unsubscribe) else None
        )
        active_since = withdrawn_at = 0.0
        if isinstance(message, m.Subscribe):
            active_since = self._activation(peer, message, now)
        elif isinstance(message, m.Unsubscribe):
            withdrawn_at = self.clock.now(now)
            if withdrawn is None and message.subscription is not None:
                self._withdrawn_elsewhere(peer, message, withdrawn_at)
        self._core(
            core.peer_message(
                peer,
                message,
                event.size,
                now,
                event.message_id,
                active_since=active_since,
                withdrawn_at=withdrawn_at,
            ),
            now,
            out,
        )
        if isinstance(message, m.Advertise):
            self.store.set_advertisement(peer, wire.encode(message))
        elif isinstance(message, m.PublishSchema):
            self._store_schema(peer)
        elif isinstance(message, m.Subscribe):
            # keep what the core holds: a second Subscribe with the same id and another query
            # is refused, and the first one stays (stored otherwise, a restart or an adoption
            # would bring back the refused query instead)
            held = core.subscription_of(peer, message.id)
            if held is not None:
                expires = self.expiries.at(peer, message.id)
                if held.key == message.subscription.key:
                    expires = message.expires
                    self.expiries.set(peer, message.id, expires)
                kept = m.Subscribe(
                    id=message.id,
                    subscription=held,
                    expires=expires,
                    on_change=core.on_change(peer, message.id),
                )
                made = self._made_here(peer, message.id, active_since)
                self.store.set_subscription(peer, message.id, wire.encode(kept), made)
                self._keep_reading()
        elif isinstance(message, m.Unsubscribe) and (
            withdrawn is not None or message.subscription is None
        ):
            self._unsubscribed(peer, message.id, withdrawn, withdrawn_at)

    def _withdrawn_elsewhere(self, peer: str, message: m.Unsubscribe, here: float) -> None:
        """A subscription the peer withdrew at a previous access point, told again after a move
        (``Unsubscribe.subscription``): kept with its window, as one withdrawn here, so that the
        move's catch-up covers what it was owed there (that access point may have failed before
        it caught up). Never later than now here, and not for an id the peer holds here."""
        assert message.subscription is not None
        ended = min(message.withdrawn_at, here)
        made = min(message.active_since, ended)
        known = message.id in self._withdrawn.get(peer, {})
        if ended > 0 and message.id not in self._subscribed_at.get(peer, {}) and not known:
            self._keep_withdrawal(peer, message.id, message.subscription, made, ended)

    def _activation(self, peer: str, message: m.Subscribe, now: float) -> float:
        """From when ``message`` is active here (``clocks``, rule 5): for a subscription held
        already, from when it was first held; for one the peer brings from another access
        point (``Subscribe.active_since``), from when it was active there, never later than
        now (what a catch-up finds for it is owed from then); for a new one, from now."""
        held = self._subscribed_at.get(peer, {}).get(message.id)
        if held is not None:
            return held
        now_clock = self.clock.now(now)
        if message.active_since > 0:
            return min(message.active_since, now_clock)
        return now_clock

    def _store_schema(self, peer: str) -> None:
        """Keep the union of ``peer``'s schemas as the core holds it (a refused one is not in
        it)."""
        assert self.core is not None
        axioms = self.core.schemas.of_peer(peer)
        data = wire.encode(m.PublishSchema(axioms=tuple(sorted(axioms, key=repr))))
        self.store.set_schema(peer, data if axioms else None)

    def _unsubscribed(
        self, peer: str, sid: str, withdrawn: qel.Subscription | None, ended: float
    ) -> None:
        """What the node keeps of a subscription retracted (by its peer, or expired) at hybrid
        time ``ended``."""
        self.expiries.set(peer, sid, None)
        self.store.set_subscription(peer, sid, None)
        standing = self._subscribed_at.get(peer, {})
        made = standing.pop(sid, -math.inf)
        if not standing:
            self._subscribed_at.pop(peer, None)
        self._unsubscribed_at.pop((peer, sid), None)  # the latest last: pruned from the front
        self._unsubscribed_at[(peer, sid)] = ended
        if withdrawn is not None:
            self._keep_withdrawal(peer, sid, withdrawn, made, ended)

    def _expire(self, now: float, out: list[Output]) -> None:
        """Subscriptions whose expiry passed are retracted; so is expired resources' content."""
        core = self.core
        if core is None:
            return
        for peer, sid in self.expiries.due(now):
            withdrawn = core.subscription_of(peer, sid)
            if withdrawn is None:
                continue
            produced: list = []
            core.unsubscribe(peer, sid, now, produced)
            self._core(produced, now, out)
            self._unsubscribed(peer, sid, withdrawn, self.clock.now(now))
        for owner, tombstone in core.versions.expire(self.clock.read(now)):
            self.store.set_pending(versions.RECORDS, *versions.version_record(owner, tombstone))

    def _resource_request(self, peer: str, message: object, now: float, out: list[Output]) -> None:
        produced: list = []
        if isinstance(message, m.Fetch):
            self.rendezvous.fetch(peer, message, now, produced)
        elif isinstance(message, m.Upload):
            self.rendezvous.upload(peer, message, now, produced)
        elif isinstance(message, m.Collect):
            self.rendezvous.collect(peer, message, produced)
        elif isinstance(message, m.Collected):
            self.rendezvous.collected(peer, message)
        self._core(produced, now, out)

    def _whereabouts(self, peer: str) -> Whereabouts:
        """Where this node knows ``peer`` to be (direct look-ups and rendezvous requests that
        reach it ask): moved on (its forwarding address: the subscriptions it left here may not
        have gone yet), attached here (online or not), or unknown."""
        forward = self._moved_away.get(peer)
        if forward is not None:
            return Whereabouts(forward=forward.node, forward_address=forward.address)
        state = None if self.core is None else self.core.peers.get(peer)
        if state is None:
            return Whereabouts()
        return Whereabouts(attached=True, online=state.attached, address=state.address)

    def _over_rate(
        self, connection: int, peer: str, message: object, now: float, out: list[Output]
    ) -> bool:
        """The peer's rate limits (``superpeer.ratelimit``). A publication over its rate goes
        on, and the connection is not read until the rate caught up; a subscription or
        look-up over its rate is refused (True), saying why and when to ask again, and the
        connection is not read until then either."""
        if isinstance(message, m.Publish | m.Withdraw):
            pause = self.rates.pause(peer, PUBLICATIONS, now)
            if pause > 0:
                out.append(PauseReading(connection, pause))
            return False
        if isinstance(message, m.Subscribe | m.Unsubscribe):
            kind = SUBSCRIPTIONS
        elif isinstance(message, m.Locate):
            kind = LOOKUPS
        else:
            return False
        wait = self.rates.refusal(peer, kind, now)
        if wait <= 0:
            return False
        rate = self.config.rates.of(kind)
        refused = m.Refused(
            request=request_label(message),  # type: ignore[arg-type]
            reason=(
                f"more {kind} than {rate.per_second:g} per second (bursts of {rate.burst}): "
                f"ask again in {wait:.3f} s"
            ),
            retry_after=wait,
        )
        self._core([ToPeer(peer, refused, wire.encode(refused))], now, out)
        out.append(PauseReading(connection, wait))
        return True

    def _look_up(self, public_id: str, request: str, now: float, out: list) -> None:
        """The rendezvous' network-wide look-up of an owner (answered by ``Found``)."""
        if self.core is not None:
            out += self.core.look_up(public_id, request, now)

    def _locate_everywhere(self, peer: str, message: m.Locate, now: float, out: list) -> None:
        """A direct look-up fell back to the network-wide one."""
        if self.core is not None:
            out += self.core.locate(peer, message, now)

    def _locate(self, peer: str, message: m.Locate, now: float, out: list[Output]) -> bool:
        """A look-up that names a super-peer goes there first (``superpeer.locating``); False:
        the core asks the network (or answers from here)."""
        core = self.core
        if core is None or not message.superpeer:
            return False
        limit = self.config.routing.max_lookups_per_peer
        waiting = core.lookups_waiting(peer) + self.locator.waiting(peer)
        produced: list = []
        if waiting >= limit:
            refused = m.Refused(
                request=request_label(message),
                reason=f"{waiting} look-ups are already waiting (max_lookups_per_peer = {limit})",
            )
            produced.append(ToPeer(peer, refused, wire.encode(refused)))
        elif not self.locator.start(peer, message, now, produced):
            return False
        self._core(produced, now, out)
        return True

    def _cube(self) -> tuple[TopologyView, dict[str, int]] | None:
        """The view and the origins' root positions the rendezvous routes with."""
        if self.core is None:
            return None
        positions = dict(self.core.origin_positions)
        positions[self.node_id] = self.core.view.root_position
        return self.core.view, positions
