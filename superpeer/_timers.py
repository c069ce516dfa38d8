"""Time (``superpeer.node``, "Failure detection", "Failures in the middle of topology
operations"): the node's one timer, what it checks when it fires, and heartbeats."""

from __future__ import annotations

import math

from clocks import sample_of
from hypercup import HypercupError, NodeState
from superpeer._backlog import Backlog
from superpeer._node_base import (
    Output,
    log,
)
from superpeer.actions import Forgotten
from wire import messages as m


class Timers(Backlog):
    """What the node does when time passes."""

    def next_deadline(self) -> float | None:
        # asked after every input (the runtime arms its one timer with it): a running minimum,
        # no list of candidates
        due = min(self._housekeeping_at, self._peer_clocks_at)
        if self._continue_at is not None:
            due = min(due, self._continue_at)  # the next slice of a burst (``_backlog``)
        if self._probes and self.core is not None:
            due = min(due, self._probe_at)
        if self._merging is not None:
            due = min(due, self._merging[0])
        for at in (self._join_at, self._timer_due):
            if at is not None and at < due:
                due = at
        if self._leaving_since is not None and self.topology.state is NodeState.LEAVING:
            due = min(due, self._leaving_since + self.config.wedged_seconds)
        if self._leave_asked_at is not None and self.adopter is None:
            due = min(due, self._leave_asked_at + self.config.reform_seconds)
        if self._join_contact is not None and self.topology.state is NodeState.JOINING:
            # (only while joining, as ``timer`` handles it: a deadline the timer does nothing
            # about would be asked for again at once, for ever)
            due = min(due, self._join_contact[1] + self.config.failure_seconds)
            restarted = self._contact_restarted_due()
            if restarted is not None:
                due = min(due, restarted)
            if self._joining_since is not None:
                due = min(due, self._joining_since + self.config.wedged_seconds)
        core = self.core
        if core is not None:
            expiry = core.versions.next_expiry()  # hybrid time (``clocks``, rule 7)
            if expiry is not None:
                expiry -= self.clock.lead()
            for at in (
                core.next_deadline(),
                self.expiries.next_deadline(),
                expiry,
                self.rendezvous.next_deadline(),
            ):
                if at is not None and at < due:
                    due = at
        for entry in self._connections.values():
            at = entry.session.get_timer()
            if at is not None and at < due:
                due = at
        if core is not None:
            # (asked and replayed once a member: none is due meanwhile. A catch-up planned
            # while joining, for a moved peer whose previous access point did not answer, was
            # due at once, and the timer fired for it at the same instant for ever: the
            # partition property, 9 super-peers, a rejoin with handovers pending)
            for catchup in self._catchups:
                due = min(due, catchup.due)
            for at, _ in self._replay:
                due = min(due, at)
        for at in self._handover_due.values():
            due = min(due, at)
        copied = self._copy_deadline()
        if copied is not None and copied < due:
            due = copied
        for refused in self._refused_for_now.values():
            if refused.silent_by is not None:
                due = min(due, refused.silent_by)
        at = self.locator.next_deadline()
        if at is not None and at < due:
            due = at
        for forward in self._moved_away.values():
            due = min(due, forward.forget_at or math.inf, forward.expires_at)
        if self.config.heartbeat_seconds is not None and core is not None:
            due = min(due, self._supervision_due())
        return due

    def busy(self) -> bool:
        """Work that is waited for (not the periodic kind): the simulator runs until none is.
        Whether ``waiting_for`` has anything to say, asked after every input, so without
        building the sentences."""
        state = self.topology.state
        return (
            self._join_at is not None
            or bool(self._backlog)
            or (self.core is not None and (self.core.settling() or self.core.rerouting() > 0))
            or bool(self._catchups)
            or bool(self._replay)
            or bool(self._awaiting)
            # (a copy made late, or again, is background work: an origin whose neighbour
            # never answers would be busy for ever)
            or any(not batch.late for batch in self._copies.values())
            or bool(self._copies_queued)
            or self.locator.next_deadline() is not None
            or any(forward.forget_at is not None for forward in self._moved_away.values())
            or bool(self._suspected)
            or self._merging is not None
            or state in (NodeState.JOINING, NodeState.LEAVING)
            or (state is NodeState.MEMBER and self.topology.busy())
        )

    def waiting_for(self) -> list[str]:
        """What the node waits for, for humans (``superpeer status``) and the simulator."""
        reasons = []
        if self._backlog:
            reasons.append(f"inputs behind a burst of subscriptions: {len(self._backlog)}")
        if self._join_at is not None:
            reasons.append("a join to retry")
        if self.core is not None and self.core.settling():
            reasons.append("routes to settle")
        if self.core is not None and self.core.rerouting():
            reasons.append(f"subscriptions to route again: {self.core.rerouting()}")
        if self._catchups:
            reasons.append("catch-ups to ask")
        if self._replay:
            reasons.append("publications to replay")
        if self._awaiting:
            reasons.append("handovers (first answer)")
        waiting = self.copies_waiting()
        if waiting:
            reasons.append(f"copies of log entries (their Ack waits): {waiting}")
        if self.locator.next_deadline() is not None:
            reasons.append("look-ups sent to the super-peer their asker named")
        if any(forward.forget_at is not None for forward in self._moved_away.values()):
            reasons.append("peers that moved away (their subscriptions to forget)")
        if self._suspected:
            reasons.append(f"failed neighbours to repair: {sorted(self._suspected)}")
        if self._merging is not None:
            reasons.append("a merge into the stronger cube that met this one")
        state = self.topology.state
        if state in (NodeState.JOINING, NodeState.LEAVING):
            reasons.append(f"the topology protocol ({state.value})")
        elif state is NodeState.MEMBER and self.topology.busy():
            reasons.append("a topology operation")
        return reasons

    def _supervision_due(self) -> float:
        interval = self.config.heartbeat_seconds
        assert interval is not None and self.core is not None
        neighbours = self.core.view.neighbours()
        due = [self._last_sent.get(n, -1e18) + interval for n in neighbours]
        due += [
            self._clock_sampled[n] + self.config.clock_sample_seconds
            for n in neighbours
            if n in self._clock_sampled
        ]
        due += [
            t + self.config.failure_seconds
            for n, t in self._last_heard.items()
            if n in neighbours and n not in self._suspected
        ]
        if self._suspected:
            due.append(self._retry_at)
        if self._busy_since is not None:
            due.append(self._busy_since + self.config.wedged_seconds + interval)
        if self._lagging_since is not None:
            due.append(self._lagging_since + self.config.failure_seconds)
        return min(due, default=self._housekeeping_at)

    def timer(self, now: float) -> list[Output]:
        out: list[Output] = []
        self._hand_over_due(now, out)
        self._handle_backlog(now, out)
        if (
            self._leaving_since is not None
            and self.topology.state is NodeState.LEAVING
            and now >= self._leaving_since + self.config.wedged_seconds
        ):
            self._left_anyway("no release after wedged_seconds", now, out)
            return out
        if self._join_at is not None and now >= self._join_at:
            if self.stopping:
                self._join_at = None
                self._leave_cube(now, out)
            elif self.topology.state is NodeState.IDLE:
                self._join(now, out)
            else:
                self._join_at = None
        if self._join_contact is not None and self.topology.state is NodeState.JOINING:
            contact, heard = self._join_contact
            # (the deadlines' own sums: ``now - heard >= failure_seconds`` can miss by an ulp
            # at the deadline, and the timer is then asked for that deadline again, for ever)
            if now >= heard + self.config.failure_seconds:
                self._abandon_join(contact, now, out)
            elif (restarted := self._contact_restarted_due()) is not None and now >= restarted:
                self._ask_past_a_restarted_contact(contact, now, out)
            elif (
                self._joining_since is not None
                and now >= self._joining_since + self.config.wedged_seconds
            ):
                # members talk to it as a neighbour already, its contact too: the Welcome that
                # made it one was lost (a link that dropped it as meant for an older incarnation)
                log.warning("event=join_wedged node=%s contact=%s", self.node_id, contact)
                self._join_again(now, out)
        if self.core is not None:
            self._core(self.core.timer(now), now, out)
        for connection, entry in list(self._connections.items()):
            for event in entry.session.handle_timer(now):
                self._session_event(connection, entry, event, now, out)
        if self.config.heartbeat_seconds is not None and self.core is not None:
            self._supervise(now, out)
        self._ask_catchups(now, out)
        self._ask_again(now, out)
        self._merge_due(now, out)
        self._probe_lost(now, out)
        self._replay_due(now, out)
        self._handover_timer(now, out)
        self._copy_timeouts(now, out)
        self._copy_owed(now, out)
        self._copy_again(now, out)
        self._forget_moved(now, out)
        self._expire(now, out)
        if self.core is not None:
            produced: list = []
            self.rendezvous.timer(now, produced)
            self.locator.timer(now, produced)
            self._core(produced, now, out)
        if now >= self._peer_clocks_at:
            self._peer_clocks_at = now + self.config.clock_sample_seconds
            for peer, connection in sorted(self._peer_connection.items()):
                self._clock_to_peer(peer, connection, now, out)
        if now >= self._housekeeping_at:
            self._housekeeping(now, out)
        return out

    def _supervise(self, now: float, out: list[Output]) -> None:
        interval = self.config.heartbeat_seconds
        assert interval is not None and self.core is not None
        expected = self._timer_due
        if expected is not None and now - expected > self.config.failure_seconds / 2:
            # this process was stalled (paused): give everyone a fresh chance before judging
            stalled = now - expected
            log.warning("event=stalled node=%s seconds=%.1f", self.node_id, stalled)
            if stalled >= self.config.failure_seconds - interval and self.core.view.neighbours():
                # silent that long, its neighbours have most likely declared it failed and
                # repaired its place; holding on to it (when no eviction reaches it) would keep
                # a second member at those positions (alone in the cube, nobody replaced it)
                self._rejoin(f"stalled for {stalled:.1f} s", now, out, still_held=True)
                return
            for neighbour in self._last_heard:
                self._last_heard[neighbour] = now
        if self._cut_off(now, out):
            return
        wedged = self._wedged(now)
        if wedged is not None:
            self._rejoin(f"the topology protocol is wedged: {wedged}", now, out)
            return
        self._catch_up_epochs(now, out)
        if self._catch_up_dimension(now, out):
            return
        if now >= self._tick_at:
            self._tick_at = now + self.config.failure_seconds
            try:
                self._topology(self.topology.tick(), now, out)
            except HypercupError as error:
                # a wait given up at the tick lets held-back messages go on, which may not fit
                self._topology_error("", error, now, out)
                if self.topology.state is not NodeState.MEMBER:
                    return
        retry = now >= self._retry_at
        neighbours = self.core.view.neighbours()
        # gone from the view: repaired, or the cube moved on
        self._suspected = {n: t for n, t in self._suspected.items() if n in neighbours}
        if retry and self._suspected:
            self._retry_at = now + interval
        sampling = self.config.clock_sample_seconds
        for neighbour in sorted(neighbours):
            # a busy link carries one at least every ``clock_sample_seconds`` (counted from
            # when it became a neighbour: an idle one carries them anyway)
            if (
                now - self._last_sent.get(neighbour, -1e18) >= interval
                or now - self._clock_sampled.setdefault(neighbour, now) >= sampling
            ):
                self._send(neighbour, self._heartbeat(neighbour, now), now, out)
            heard = self._last_heard.setdefault(neighbour, now)
            silent = now >= heard + self.config.failure_seconds
            suspected = neighbour in self._suspected
            if not ((silent and not suspected) or (suspected and retry)):
                continue
            if self._is_neighbour(neighbour):
                self._fail(neighbour, now, out)
                if self.core is None:
                    return  # it rejoined: the new incarnation supervises its own neighbours
            else:  # the cube is changing around it: look again soon
                self._suspected.setdefault(neighbour, now)
                self._retry_at = now + interval
        self._timer_due = self._supervision_due()

    def _heartbeat(self, neighbour: str, now: float) -> m.Heartbeat:
        """A heartbeat that also echoes the neighbour's last one (``clocks.sample_of``) and
        says which cube this is (``superpeer._merging``)."""
        self._clock_sampled[neighbour] = now
        echo, received = self._heartbeat_echo.get(neighbour, (0.0, now))
        positions = tuple(sorted(self.core.view.positions)) if self.core is not None else ()
        return m.Heartbeat(
            wall=now,
            echo=echo,
            held=max(0.0, now - received),
            positions=positions,
            **self._identity_fields(),  # type: ignore[arg-type]
            **self._known_fields(neighbour),  # type: ignore[arg-type]
        )

    def _heartbeat_in(self, sender: str, heartbeat: m.Heartbeat, now: float) -> None:
        """A neighbour's heartbeat: a measurement of its clock when it echoes one of ours."""
        if heartbeat.echo:
            sample = sample_of(heartbeat.echo, heartbeat.wall - heartbeat.held, heartbeat.wall, now)
            self._clock_sample("super-peer", sender, self.offsets, sample, now)
        if heartbeat.wall:
            self._heartbeat_echo[sender] = (heartbeat.wall, now)

    def _catch_up_epochs(self, now: float, out: list[Output]) -> None:
        """Messages of a later epoch held back for ``failure_seconds``: the ``Grow`` or
        ``Shrink`` that began it came down a tree through a member that failed. Ask their
        senders for it (again every ``failure_seconds``)."""
        if not self.topology.lagging():
            self._lagging_since = None
            return
        if self._lagging_since is None:
            self._lagging_since = now
        elif now >= self._lagging_since + self.config.failure_seconds:
            log.warning("event=missed_change node=%s epoch=%d", self.node_id, self.topology.epoch)
            self._lagging_since = now
            self._topology(self.topology.ask_for_missed_changes(self.addresses), now, out)

    def _catch_up_dimension(self, now: float, out: list[Output]) -> bool:
        """Every neighbour's heartbeats name this node's root and another dimension than its
        view's, for ``failure_seconds`` while it was neither busy nor lagging: it missed a
        change of dimension, and no message of the new epoch reached it to say so (the
        ``Grow`` or ``Shrink`` came down a tree through a member that failed, and only
        heartbeats followed). It asks them for the changes, as a lagging node asks the senders
        of what it holds back; if that does not help in ``failure_seconds`` more, it rejoins
        (returns True). Left alone, a member stayed in a cube of dimension 5 beside its
        neighbours' of 4 for the rest of the run, taken for a second cube (``python -m
        bench.chaos_replay --superpeers 16 --first-seed 28``). Every neighbour, because one
        that says another dimension may be the one that missed the change."""
        core = self.core
        assert core is not None
        mine = core.view.dimension
        neighbours = core.view.neighbours()
        known = [self._other_dimension.get(node) for node in neighbours]
        if (
            not neighbours
            or self.topology.busy()
            or self.topology.lagging()
            or any(entry is None or entry[0] != mine for entry in known)
        ):
            self._asked_dimension = None
            return False
        since = max(entry[1] for entry in known if entry is not None)
        if now - since >= 2 * self.config.failure_seconds:
            self._rejoin(
                "its neighbours say the cube changed dimension, and it missed it", now, out
            )
            return True
        if now - since >= self.config.failure_seconds and self._asked_dimension != since:
            self._asked_dimension = since
            log.warning("event=missed_dimension node=%s dimension=%d", self.node_id, mine)
            asked = self.topology.ask_for_missed_changes(self.addresses, also=sorted(neighbours))
            self._topology(asked, now, out)
        return False

    def _cut_off(self, now: float, out: list[Output]) -> bool:
        """Whether this node re-formed (``superpeer._merging``, "Re-forming"): a neighbour
        declared failed is still unrepaired after ``reform_seconds``, which a repair on this
        side cannot finish (a cut left it without the members it needs: position 0, the only
        links between two of its members). It rejoins, the failed neighbours and the
        super-peers it lost left aside as contacts (they are where it cannot reach), and its
        side forms a cube of its own."""
        if not self._suspected:
            return False
        unrepaired, since = min(self._suspected.items(), key=lambda item: item[1])
        if now - since <= self.config.reform_seconds:
            return False
        reason = f"{unrepaired} unrepaired for {now - since:.0f} s"
        for node in sorted(set(self._suspected) | set(self._lost)):
            self._unusable[node] = now + self.config.wedged_seconds
        self._rejoin(f"cut off: {reason}", now, out)
        if self.stopping:
            return True  # a leaver stopped instead
        # a word to every other contact: those on this side acknowledge it at once, and are
        # asked first (``SuperPeerNode._join``)
        asked = self._join_contact[0] if self._join_contact is not None else None
        for node in self._hail(now, out, besides=asked):
            out.append(Forgotten(node))
        self._hailed_at = now
        return True

    def _hail(self, now: float, out: list[Output], *, besides: str | None = None) -> list[str]:
        """A word (a heartbeat) to every super-peer this node knows but itself, ``besides`` and
        those out of reach: those that can answer acknowledge it at once (``_alive_at``), so a
        node cut off learns who is on its side. Returns whom it hailed."""
        hailed = []
        for node in sorted(self.addresses):
            if node in (self.node_id, besides) or self._unusable_until(node, now):
                continue
            self._send(node, m.Heartbeat(wall=now), now, out)
            hailed.append(node)
        return hailed

    def _wedged(self, now: float) -> str | None:
        """Why the topology protocol is wedged (None if it is not): busy for longer than any
        operation takes: what HyperCuP cannot untangle (two neighbouring members failing at
        once, a grow or shrink overtaking a repair) leaves it so. A crash-recovery is the way
        out: this node rejoins (as after a stall), its neighbours repair its place, or, if
        every member is wedged, they start a new cube. The reason names what it waited on
        (``HypercupNode.activity``), for the log."""
        wedged = self.config.wedged_seconds
        if not self.topology.busy():
            self._busy_since = None
            return None
        if self._busy_since is None:
            self._busy_since = now
        if now - self._busy_since > wedged:
            return f"busy for {now - self._busy_since:.0f} s with {self.topology.activity()}"
        return None

    def _replay_due(self, now: float, out: list[Output]) -> None:
        core = self.core
        if core is None or not self._replay:
            return
        due = [n for at, n in self._replay if at <= now]
        self._replay = [(at, n) for at, n in self._replay if at > now]
        for notification in due:
            produced: list = []
            core.dispatch_own(notification, now, produced)
            self._core(produced, now, out)

    def _housekeeping(self, now: float, out: list[Output]) -> None:
        self._housekeeping_at = now + self.config.housekeeping_seconds
        # older withdrawals and log entries are past any catch-up; counted back so that the
        # window keeps at least what it must, whichever way the clock is corrected (``clocks``, 11)
        horizon = self.clock.earlier(now) - self.config.log_seconds
        self._prune_unanswered(now)
        self.rates.prune(now)
        for peer, withdrawn in list(self._withdrawn.items()):
            for sid in [sid for sid, (_, _, ended) in withdrawn.items() if ended < horizon]:
                self._forget_withdrawal(peer, sid)
        withdrawals = self._unsubscribed_at
        while withdrawals and next(iter(withdrawals.values())) < horizon:
            del withdrawals[next(iter(withdrawals))]
        if self.core is not None:
            self._keep_alive_at(self.clock.now(now))
        out += self.mail.expire(
            now - self.config.retention_seconds, self.config.max_kept_per_peer, now
        )
        self.store.prune_log(horizon, self.config.max_logged)
        # a notification can come back as long as an origin's log holds it (catch-up)
        self.store.forget_delivered(now - self.config.log_seconds - 60.0)
        self.store.drop_bodies()  # what the mail, the log and the versions above let go
