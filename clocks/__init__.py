"""Time between machines, in one place: the rules of order, the hybrid clock, measured offsets.

No delivery rule of this network compares two machines' wall clocks. A wall clock is read by one
process and used by that process alone (its timers, its traces, its display), or it enters a
*hybrid logical clock* (Kulkarni et al., 2014): every super-peer keeps a ``HybridClock`` whose
reading is at least its *disciplined* wall time (rule 0) and more than any hybrid time it
received, and every frame between super-peers carries the sender's reading
(``superpeer.channel``: the sequenced frame's header; the simulator's links likewise). Hybrid
times taken on different super-peers are therefore ordered as causality orders them: an event
that could know of another (a chain of messages leads from one to the other) has the larger
time. Concurrent events are ordered by the hybrid times alone, which all run within ``L`` of the
fastest disciplined clock in the backbone, ``L`` being how long a reading takes to reach every
super-peer (heartbeats on idle links, ``[limits] heartbeat_seconds``, times the cube's
dimension). ``L``, not the clocks' offsets, is what ``[recovery] catchup_margin_seconds`` must
cover. A hybrid clock runs on from the latest reading it absorbed at the rate of its own clock
(``HybridClock``), so the fastest clock's lead outlives it: if it stops speaking (restarted
slower, set right), hybrid time does not stand still until the wall clocks catch up, and an
interval of hybrid time stays an interval of real time, give or take ``L``, whatever the clocks
do. That is why no single clock may put a lead into hybrid time (rule 0): a lead taken on one
side of a partition orders that side's events after the other side's concurrent ones, and
outlives the heal.

This list is meant to be exhaustive: every interaction whose correctness depends on time passing
between nodes, the channel its timestamp travels on, and what breaks past the configured bounds.

0. **Discipline** (``HybridClock.discipline``, ``correction_of``): the physical part of a
   reading is the node's wall time plus a correction, the median of its own clock and its
   neighbours' measured offsets (rule 9's ``OffsetEstimator``; of an even count the lower,
   the slower clock), renewed with every measurement and every change of neighbours. A clock
   set far off among correct neighbours follows them; theirs do not follow it. A restarted
   node trusts its wall clock in nothing until it has measured a neighbour
   (``HybridClock.unmeasured``): its hybrid time runs on from the last reading it kept (behind
   by how long it was down) and is brought up by the first reading it absorbs; a node alone in
   its cube has nobody to measure and takes its wall clock as it is, and so does a node's
   first start (it kept no reading to run on from). HAZARD: a majority of a node's neighbours
   off the same way moves it with them; a node restarted under a wrong clock that finds nobody
   and founds a cube alone, or started for the first time under one, gives readings off by
   its clock's error (one lead for the whole cube, harmless to order while it is whole). A
   restarted node's readings lag until the first reading it absorbs (normally its old
   neighbours' answer to the heartbeat it sends them as it starts): an event it accepts
   before that may be ordered before a concurrent one elsewhere by up to its downtime.
   ``[limits] max_clock_offset_seconds`` reports the offsets behind the first two.

1. **A publication's time** (``Notification.published_at``): the origin's hybrid time when it
   accepted the change, strictly increasing per origin (across restarts too: the reading is
   kept in the store with ``alive_at``). It orders the origin's log (catch-ups and replays read
   it) and is compared with the times below. Travels in the notification. A version accepted
   twice (sent again, through another access point, after an ``Ack`` that said ``alone``) has
   the first acceptance's time: every log keeps the earlier of two entries of one version
   (``Store.log_publication``), whichever comes last; the later one's live deliveries stand.
2. **A subscription's activation** at its access point: the access point's hybrid time when it
   accepted the ``Subscribe`` (kept durably with the subscription). A notification is delivered
   for it only if ``published_at >= activation - margin``, whichever way it came: from an
   origin's log (a catch-up, a replay, a repeat after a restart) or along a route. A route is no
   proof of order: one built for an older subscription (withdrawn since, or covering the new
   one) carries what a link held up during a partition, published before a subscription made
   meanwhile. What the subscription's own route carries is later than its activation, causally.
   Only mail the peer's previous access point hands over is owed however old (it matched there
   while the subscription stood). HAZARD: a publication accepted at most ``L`` after the
   subscription, with no message between the two super-peers meanwhile, may carry an earlier
   hybrid time; the margin keeps it. A margin shorter than ``L`` can lose it; a longer one lets
   publications made up to ``margin`` before the subscription through (allowed, never owed).
3. **A withdrawal** (``Unsubscribe``, an expiry, a move away): the access point's hybrid time
   when it accepted it. A notification with an earlier ``published_at`` that arrives late (a
   link held it up) is still delivered, for ``retracted_seconds`` of local time
   (``SuperPeerCore._retracted``); one with a later time is not. The ``Ack`` says that time
   (``Ack.withdrawn_at``); the peer tells the withdrawal again, with the subscription's window,
   after a move (``Unsubscribe.subscription``), so that the next access point's catch-up covers
   the window in that access point's terms. HAZARD: a publication concurrent with the
   withdrawal (within ``L``) may fall either way.
4. **A late subscription** (``Forward.since``): the hybrid time its access point accepted it;
   an origin that receives it more than ``settle_seconds`` of hybrid time later replays what it
   published since (``Replay``, ``ReplayRequest.since``). The receiver's clock has absorbed the
   sender's, so the difference is real time elapsed, less at most ``L``: a replay too many is a
   repeat the access point drops; HAZARD: a delay between ``settle_seconds`` and
   ``settle_seconds + L`` may go unnoticed, and only a catch-up after a failure covers it.
5. **Catch-ups** (``CatchUp`` entries ``since, until``; ``superpeer._catchup``): windows of
   hybrid time, answered from the origin's log by ``published_at``. Their starting points are
   hybrid times known causally: the reading a departed member's last frame carried
   (``Departed.since``, from the member that took its place, else the asker's own), the node's
   own reading when it last heard from its neighbours before a restart or a rejoin (``alive_at``),
   the latest reading a moved peer had from its previous access point (``Moved.since``), the
   reading from which that access point could not vouch for the mail it handed over
   (``HandoverDone.unvouched_since``: the start of a catch-up of its own still to come). An
   earlier starting point only costs a longer read of the log; the access points and the
   inboxes drop repeats.
6. **Moves** (``Moved.since``, ``Handover.since``): the latest hybrid time the previous access
   point gave the peer, in its ``Welcome`` (``Welcome.clock``) or a later ``Clock``
   (``Clock.clock``; never the peer's own wall time of that contact, which would move the
   catch-up by the peer's clock error), and which the peer carries to the next access point in
   its ``Hello`` (``Hello.clock``, absorbed there): two move statements of one peer are ordered
   causally, so a stale handover (a move older than the peer's latest arrival) is recognised
   whatever the access points' clocks say.
7. **A resource's expiry** (``Publish.expires``): the peer sends it with its own wall time
   (``Publish.sent_at``); the owner's access point turns the remaining lifetime into its hybrid
   time, and every access point judges it by its own hybrid time (``Notification.expires``).
   HAZARD: hybrid time runs with the fastest clock the backbone has had since it started, so a
   resource may expire early by as much as that clock's lead over true time (bounded by
   ``max_clock_lead_seconds``, see 9); a slow clock never makes it late.
8. **A subscription's expiry** (``Subscribe.expires``, sent with ``Subscribe.sent_at``): judged
   by its access point alone, on its own clock, from the remaining lifetime the peer gave. A
   peer's skewed clock moves an absolute expiry ("until 12:00") by the peer's own error, never
   by the access point's.
9. **Absorbing a reading** (``HybridClock.observe``): a reading more than
   ``max_clock_lead_seconds`` ahead of the receiver's disciplined wall time is not absorbed (and
   is counted): one clock set a year ahead must not drag every hybrid clock with it (what would
   expire every resource). HAZARD: the messages of a super-peer whose clock leads by more than
   that are then ordered by its own clock: rules 2 to 6 may misjudge them. ``[limits]
   max_clock_offset_seconds`` is the alarm below that bound: every super-peer measures its
   neighbours' and its peers' offsets (``OffsetEstimator``, NTP's on-wire calculation over
   heartbeats and the peer session's ``Clock`` messages), exports them, logs and reports
   ``/readyz`` not ready when one exceeds it.
10. **Certificates** (``crypto.tls``): validity starts ``CLOCK_SKEW`` (a day) before issue, as
    public CAs backdate, so a verifier whose clock is behind the issuer's accepts a new one; a
    handshake refused for validity says so with both times.
11. **Local timers and windows** (failure detection, heartbeats, settle windows, backoff; how
    far back a log is kept or read, how long a withdrawal is remembered): one
    process's clock, which the super-peer daemon reads as a ``SteadyWallClock`` (a wall time read
    at start, then advanced by the monotonic clock, slewing toward the wall clock by at most
    500 ppm): a wall clock stepped while it runs moves no timer; a restart takes the new wall
    time (and ``alive_at`` keeps the hybrid time from going back). A window that bounds how far
    back hybrid times are kept or read counts back from the earlier of the wall time and the
    hybrid time (``HybridClock.earlier``): hybrid time may run ahead of the wall clock (a
    faster neighbour's reading) or behind it (this node's clock disciplined back, rule 0), and
    such a window holds at least what it must either way.
"""

from clocks._hybrid import TICK, HybridClock, earliest
from clocks._offsets import OffsetEstimator, Sample, correction_of, sample_of
from clocks._steady import MAX_SLEW, SteadyWallClock

__all__ = [
    "MAX_SLEW",
    "TICK",
    "HybridClock",
    "OffsetEstimator",
    "Sample",
    "SteadyWallClock",
    "correction_of",
    "earliest",
    "sample_of",
]
