"""Healing a partition (``superpeer.node``, "Partitions"): two cubes that meet become one, and
what each side published while they were apart reaches the other side from the origins' logs.

A cube cut in two becomes two cubes: each side declares the other side's members failed and
repairs without them, or re-forms (its members rejoin, and find the other side silent), and goes
on delivering inside itself. When the cut heals nothing in the topology protocol notices. The
rules:

* **Re-forming.** HyperCuP repairs route through the cube (a walk to position 0, lookups
  to members next to a position), so a side without position 0, or whose members are
  neighbours of none of its other members, repairs nothing. A neighbour declared failed and
  still unrepaired after ``reform_seconds`` is taken for that (``Timers._cut_off``): the
  member rejoins, its failed neighbours and the super-peers it lost left aside as contacts
  for ``wedged_seconds``; it sends every other contact a word, asks first those that
  acknowledge it, takes the others for silent since then, and a contact silent for
  ``reform_seconds`` for out of reach (``SuperPeerNode._nobody_in_the_cube``). The smallest
  of its side starts a cube, and probes every super-peer it lost at once.
* **Directory.** A rejoining member finds its side through the super-peers it knows, and
  its neighbours may all be across the cut: every heartbeat names up to
  ``KNOWN_PER_HEARTBEAT`` super-peers its sender knows, neither end of the link nor one it
  lost or saw leave (``Heartbeat.known``), each link in turn through the sender's list; a
  node keeps the addresses it did not have, ``MAX_KNOWN`` at most.
* **Who is which cube.** Every member knows its cube's *identity*: the holder of position 0
  (the *root*) and the dimension. The root's holder knows itself; every other member learns it
  from its parent in the tree rooted at position 0 (``Heartbeat.root``, ``.dimension``), so it
  follows every change of the cube within a heartbeat per hop.
* **Who was lost.** A member remembers the super-peers it lost: those its cube declared failed
  (``sp.departed``, its own repairs) and those it could not reach when it (re)joined, each with
  the hybrid time it was last heard from (``clocks``, rule 5); the earliest of those times, and
  of the neighbours it declared failed itself (repaired or not), is kept on disk, for the
  catch-up of a restart (``superpeer.node``, "Restart"). It probes them, one every
  ``merge_probe_seconds``, each again after at most ``MAX_PROBE_SECONDS``: a probe is a
  heartbeat with the cube's identity (the link is dropped once it drained, so a dead one holds
  no connection open). A lost super-peer heard of again in this cube (a neighbour, or a probe
  that names this cube) is no longer lost.
* **Meeting.** A super-peer that hears a probe naming another cube, or an ``Evicted`` from one
  (a member answers anything its cube declared departed with ``Evicted`` and its identity),
  compares the two: the *stronger* stays (the larger dimension, then the smaller root id: every
  member of either cube decides alike; an ``Evicted`` from a super-peer that is a neighbour in
  the receiver's own view means the receiver was replaced while its view went stale, and it
  rejoins). If it is in the stronger one it answers the prober with
  ``Evicted``. If it is in the weaker one, and it heard from two members of the stronger one
  (one, if that one may be alone: dimension 1 or less) in the last ``MEETING_SECONDS``, it
  broadcasts ``Merge`` to its
  cube and, ``merge_delay_seconds`` later (the broadcast drains first), rejoins through them
  (reachable now, whatever an earlier rejoin found of them behind the cut), unless its cube
  is the stronger by then (a newcomer, or another cube's merge, made it so meanwhile: it would
  dissolve for a weaker cube whose members were leaving for it).
  Every member of the weaker cube that hears the ``Merge`` probes those contacts, and follows
  when they answer it (a newcomer that has not heard its cube's identity yet takes it from a
  ``Merge`` its parent sent): a member leaves its cube only for a cube it reaches itself, twice over.
  (A *bridge*, a super-peer that reaches both sides of a cut that has not healed, is the only one
  that meets the other side: it never takes its cube along, and the other side never dissolves
  into a cube it reaches through one super-peer only.) An ``Evicted``
  from its own cube (the same root) means it was replaced while unreachable (paused, cut off
  alone): it rejoins, as before. A rejoin is a new incarnation on its durable state
  (``SuperPeerNode._rejoin``): its peers reconnect, its subscriptions and advertisements are
  routed in the one cube.
* **Stale holders.** Two overlapping repairs can leave a member holding a place the cube gave
  to another, with nothing telling it: it goes on heartbeating the neighbours of that place,
  under the same root. A neighbour's heartbeat says which positions its sender holds
  (``Heartbeat.positions``); a member that is not the sender's neighbour in its own view, whose
  table gives one of those positions to another neighbour, alive and not suspected, for
  ``failure_seconds`` on end while its own protocol is idle, answers ``Evicted`` (naming the
  holder, unless the holder's own heartbeat of the last ``failure_seconds`` no longer claims
  it: it handed the place over and the update has not come yet); the stale member, evicted by
  a neighbour of its own view, rejoins. Likewise when
  none of those positions is next to one the receiver holds: the sender's table gives it a
  place it holds no more (it moved on, say rejoined elsewhere, while the departure walk that
  gave the sender its own place carried the older table), and the sender, hearing from it,
  would never correct that entry (a kill and a pause together, 32 super-peers in the
  simulator: two members never learnt their cube's root).
* **Filling in.** A member of the weaker cube catches up, from every origin's log, on what was
  published since it first lost a super-peer of the other side (the earliest lost one's time,
  less the margin). It announces itself with ``sp.returned`` naming the cube it comes from and
  that time; every member that was not in that cube asks it for what it published since (the
  ``sp.returned`` itself says the origin is back: one whose publishers left or moved while it was
  apart has nothing to advertise, and a catch-up would otherwise skip it as failed). Repeats
  are dropped; a log that no longer reaches back that far answers with a gap notice
  (``superpeer._catchup``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from hypercup import NodeState
from superpeer._node_base import NodeBase, Output, PlannedCatchUp, log
from superpeer.actions import Forgotten
from superpeer.core import tree_parent
from wire import messages as m

MAX_PROBE_SECONDS: Final = 30.0
"""The longest wait between two probes of one lost super-peer (so a healed partition is noticed
within about that long even by a member that lost just one)."""
MEETING_SECONDS: Final = 60.0
"""How long a meeting with a member of another cube counts toward leaving for it."""
MEMBERS_NAMED: Final = 3
"""How many of its neighbours a member names in an ``Evicted`` to a member of a weaker cube."""
KNOWN_PER_HEARTBEAT: Final = 4
"""How many super-peers a heartbeat names (``Heartbeat.known``); more in one are not read."""
MAX_KNOWN: Final = 4096
"""The most super-peers a node learns of from heartbeats: a directory that reached it stops
growing (what it learnt stays; addresses learnt otherwise are not counted)."""


class Merges(NodeBase):
    """Cube identities, lost super-peers, meetings of two cubes, and the catch-ups after."""

    # == identity ===================================================================================
    def cube_identity(self) -> tuple[int, str] | None:
        """(dimension, holder of position 0) of this node's cube; None while it is not a member
        or has not heard it yet."""
        core = self.core
        if core is None or self.topology.state is not NodeState.MEMBER:
            return None
        view = core.view
        if 0 in view.positions:
            return view.dimension, self.node_id
        parent = tree_parent(view, 0)
        root = self._reported_roots.get(parent) if parent is not None else None
        return None if not root else (view.dimension, root)

    def _identity_fields(self) -> dict[str, object]:
        identity = self.cube_identity()
        if identity is None:
            return {}
        return {"dimension": identity[0], "root": identity[1]}

    # == the directory ===============================================================================
    def _known_fields(self, neighbour: str) -> dict[str, object]:
        """The next super-peers this node knows, for a heartbeat to ``neighbour`` (each link has
        its own turn through them, so every neighbour hears of all): neither the two ends nor
        one that left or that this node lost (a side of a cut names only its own)."""
        names = sorted(
            node
            for node, address in self.addresses.items()
            if address
            and node not in (self.node_id, neighbour)
            and node not in self._lost
            and not self._has_left(node)
        )
        if not names:
            return {}
        start = self._known_turn.get(neighbour, 0) % len(names)
        chosen = (names + names)[start : start + min(KNOWN_PER_HEARTBEAT, len(names))]
        self._known_turn[neighbour] = start + len(chosen)
        return {"known": tuple((node, self.addresses[node]) for node in chosen)}

    def _heard_known(self, heartbeat: m.Heartbeat) -> None:
        """Super-peers a heartbeat names: addresses this node did not have (one it has is
        its own evidence, fresher or as good)."""
        for node, address in heartbeat.known[:KNOWN_PER_HEARTBEAT]:
            if len(self._learnt) >= MAX_KNOWN:
                return
            if node != self.node_id and address and node not in self.addresses:
                self.addresses[node] = address
                self._learnt.add(node)

    def _heard_identity(
        self,
        sender: str,
        incarnation: int,
        heartbeat: m.Heartbeat,
        now: float,
        out: list[Output],
    ) -> None:
        """A heartbeat names its sender's cube: a neighbour's is this node's own (how it learns
        its root); anyone else's is a probe, and another cube met here if it names another.
        One that names no cube but claims positions comes from a member whose view puts it
        next to this node while its tree parent never told it the root: the claim is checked
        as any other member's (such a member, holding a place repaired away, heard from its
        neighbours and never learnt a root: not one cube for the simulated hour). A member that
        lags (it missed a change of dimension) judges no other cube by its stale identity."""
        if self.core is None:
            return
        if heartbeat.positions and self._is_neighbour(sender):
            self._neighbour_claims[sender] = (frozenset(heartbeat.positions), now)
        if not heartbeat.root:
            if heartbeat.positions and not self._is_neighbour(sender) and self.cube_identity():
                self._check_claim(sender, incarnation, heartbeat.positions, now, out)
            return
        if self._is_neighbour(sender):
            identity = self.cube_identity()
            if not heartbeat.positions and identity is not None and heartbeat.root != identity[1]:
                # a probe: the sender is in another cube and takes this node for lost (it
                # re-formed, or was the last one standing, while this node still heard from
                # it): out of this cube, failed at once (two members of a cube cut apart, one
                # in a cube of its own, the other kept it in its table for good, each waiting
                # on the other: a replay at 8 super-peers, seed 13)
                log.warning(
                    "event=neighbour_elsewhere node=%s neighbour=%s cube=%s",
                    self.node_id,
                    sender,
                    heartbeat.root,
                )
                self._fail(sender, now, out)
                return
            mine = self.core.view.dimension
            if heartbeat.dimension == mine:
                self._reported_roots[sender] = heartbeat.root
                self._other_dimension.pop(sender, None)
            else:
                # (recorded once per dimension of this node's: since its last change)
                identity = self.cube_identity()
                known = self._other_dimension.get(sender)
                if (
                    identity is not None
                    and heartbeat.root == identity[1]
                    and (known is None or known[0] != mine)
                ):
                    self._other_dimension[sender] = (mine, now)
            self._found(sender, now)
            if heartbeat.positions:
                self._member_heartbeats[sender] = max(
                    incarnation, self._member_heartbeats.get(sender, 0)
                )
            self._back_in_place(sender, incarnation, heartbeat, now, out)
            return
        mine = self.cube_identity()
        if mine is None or self.topology.lagging():
            # lagging, this node missed a change of dimension: its cube's identity is stale,
            # and a member of the new cube would be taken for another cube's, and evicted
            return
        if heartbeat.root == mine[1]:
            self._found(sender, now)  # a member of this cube after all
            self._check_claim(sender, incarnation, heartbeat.positions, now, out)
            return
        theirs = (heartbeat.dimension, heartbeat.root)
        self._met(theirs, mine, sender, incarnation=incarnation, now=now, out=out)

    def _check_claim(
        self, sender: str, incarnation: int, claimed: tuple[int, ...], now: float, out: list[Output]
    ) -> None:
        """A member that is not this node's neighbour sent it a neighbour's heartbeat: its view
        puts it next to this node. If this node's table gives a position it claims to another
        neighbour, alive and unsuspected, and goes on doing so for ``failure_seconds`` while
        nothing changes here (counted from the first such claim of the claiming incarnation: a
        process just welcomed claims its place before the update saying so reaches this node,
        and its earlier incarnation's claims say nothing of it), the claim is stale: two
        overlapping repairs took one place twice and nothing told the loser. So is a claim next
        to no position this node holds: the sender's table gives this node a place it left. It
        is told (``Evicted``: a neighbour in its own view evicts it, so it rejoins)."""
        if not claimed or self.topology.busy():  # a merge probe claims none
            self._stale_claims.pop(sender, None)
            return
        view = self.topology.view()
        table = view.table
        others = sorted(
            {
                table[p]
                for p in claimed
                if table.get(p, sender) != sender
                and table[p] not in self._suspected
                and self._still_claims(table[p], p, now)
            }
        )
        beside = any(_adjacent(p, q) for p in claimed for q in view.positions)
        if not others and beside:
            self._stale_claims.pop(sender, None)
            return
        claimant, since = self._stale_claims.get(sender, (incarnation, now))
        if claimant != incarnation:  # a new incarnation's claim is a new one: it was just
            claimant, since = incarnation, now  # welcomed, and the update is on its way here
        self._stale_claims[sender] = (claimant, since)
        if now - since < self.config.failure_seconds:
            return
        del self._stale_claims[sender]
        log.warning(
            "event=stale_claim node=%s member=%s positions=%s held_by=%s",
            self.node_id,
            sender,
            list(claimed),
            others,
        )
        reason = (
            f"{self.node_id}'s table gives positions {list(claimed)} to {', '.join(others)}"
            if others
            else f"{self.node_id} holds {sorted(view.positions)}, next to none of {list(claimed)}"
        )
        self._evict(sender, incarnation, now, out, reason=reason)

    def _still_claims(self, holder: str, position: int, now: float) -> bool:
        """Whether ``holder``, which this node's table gives ``position``, may still hold it:
        not if its own heartbeat of the last ``failure_seconds`` claims other positions only.
        It handed that place over, and the update saying so has not reached this node (a take
        waiting on the acks of a member that was evicted meanwhile: 16 super-peers, seed 8,
        where the newcomer holding it was evicted and refused everywhere as still a member)."""
        heard = self._neighbour_claims.get(holder)
        if heard is None or now - heard[1] > self.config.failure_seconds:
            return True
        return position in heard[0]

    # == meetings ===================================================================================
    def _evict(
        self, sender: str, incarnation: int, now: float, out: list[Output], *, reason: str = ""
    ) -> None:
        """``sender``'s ``incarnation`` departed this cube (or is in another one, or holds a
        place it holds no more: ``reason``): tell it, and which cube this is."""
        core = self.core
        neighbours = sorted(core.view.neighbours()) if core is not None else []
        members = tuple(
            (node, self.addresses[node])
            for node in neighbours[:MEMBERS_NAMED]
            if node != sender and self.addresses.get(node)
        )
        evicted = m.Evicted(
            reason=reason or f"{sender} incarnation {incarnation} is not a member of this cube",
            incarnation=incarnation,
            address=self.address,
            members=members,
            **self._identity_fields(),  # type: ignore[arg-type]
        )
        self._send(sender, evicted, now, out)

    def _evicted(
        self, sender: str, incarnation: int, message: m.Evicted, now: float, out: list[Output]
    ) -> None:
        if message.incarnation != self.incarnation:
            return  # an older incarnation's
        if self.topology.state is NodeState.LEAVING:
            # its place was repaired as a failure's while its walk was held (a cut)
            self._left_anyway(f"evicted: {message.reason}", now, out)
            return
        if self.topology.state is not NodeState.MEMBER:
            return  # one that is not a member any more
        mine = self.cube_identity()
        if (
            not message.root
            or mine is None
            or message.root == mine[1]
            or self._is_neighbour(sender)
        ):
            # the cube replaced this incarnation while it was unreachable (paused, cut off
            # alone): whatever its own view says (one of its neighbours there evicts it), it
            # is not a member any more
            self._rejoin(f"evicted: {message.reason}", now, out)
            return
        theirs = (message.dimension, message.root)
        self._met(
            theirs, mine, sender, incarnation=incarnation, address=message.address, now=now, out=out
        )
        if self._merging is None and stronger(theirs, mine):
            self._probe_members(theirs, message.members, now, out)

    def _probe_members(
        self,
        theirs: tuple[int, str],
        members: tuple[tuple[str, str], ...],
        now: float,
        out: list[Output],
    ) -> None:
        """Probes the members of the stronger cube that one of them named (``Evicted.members``)
        and that this node has not heard from in this meeting: their answers are the second
        member it must reach itself before its cube merges (``_met``)."""
        met = self._meetings.get(theirs, {})
        probed = self._probed_members.setdefault(theirs, {})
        for node, address in members:
            if node == self.node_id or node in met or not address:
                continue
            if now - probed.get(node, -MEETING_SECONDS) < MEETING_SECONDS:
                continue  # asked already in this meeting
            probed[node] = now
            self.addresses.setdefault(node, address)
            probe = m.Heartbeat(wall=now, **self._identity_fields())  # type: ignore[arg-type]
            self._send(node, probe, now, out, address=address)
            out.append(Forgotten(node))  # once drained: no link kept

    def _met(
        self,
        theirs: tuple[int, str],
        mine: tuple[int, str],
        sender: str,
        *,
        incarnation: int,
        address: str = "",
        now: float,
        out: list[Output],
    ) -> None:
        """Another cube (``theirs``) met this one through ``sender`` (its ``incarnation``, as
        its link said): the weaker one joins the stronger (``stronger``). Not when the other
        root is a member this cube declared failed less than ``failure_seconds`` ago and the
        sender is not one it lost: the sender is a member of this cube that has not heard of
        the root's successor yet (the news goes down the tree a heartbeat per hop), and would
        otherwise be taken for another cube (two neighbours failing together, one of them the
        root)."""
        lost = self._lost.get(theirs[1])
        if (
            lost is not None
            and now - lost[1] < self.config.failure_seconds
            and sender not in self._lost
            and sender not in self.departed
        ):
            return
        if not stronger(theirs, mine):
            # this one stays; the other hears so (and dissolves) when it is told which this is
            self._evict(sender, incarnation, now, out)
            return
        met = self._meetings.setdefault(theirs, {})
        met[sender] = (address or self.addresses.get(sender, ""), now)
        for member in [n for n, (_, at) in met.items() if now - at > MEETING_SECONDS]:
            del met[member]
        if len(met) < min(2, fewest_members(theirs[0])):
            # reached one member of it only (maybe a bridge across a cut that has not healed):
            # ask another one it may know of (the super-peers this node lost)
            return
        contacts = [(n, a) for n, (a, _) in sorted(met.items(), key=lambda i: -i[1][1]) if a]
        self._merge_into(theirs, contacts, mine[1], now, out)

    def _merge_into(
        self,
        into: tuple[int, str],
        contacts: list[tuple[str, str]],
        root: str,
        now: float,
        out: list[Output],
    ) -> None:
        """This node's cube (its holder of position 0 is ``root``) is the weaker of two that
        met: tell the whole cube, then rejoin through ``contacts``."""
        if self._merging is not None:
            return
        core = self.core
        assert core is not None
        log.warning(
            "event=cubes_met node=%s cube=%s into=%s dimension=%d contact=%s",
            self.node_id,
            root,
            into[1],
            into[0],
            contacts[0][0],
        )
        merge = m.Merge(
            origin=self.node_id,
            origin_position=core.view.root_position,
            incarnation=self.incarnation,
            root=root,
            into_root=into[1],
            into_dimension=into[0],
            contacts=tuple(contacts),
            since=self._apart_since(now) or 0.0,
        )
        self._core_call(lambda o: core.broadcast(merge, now, o), now, out)
        self._merging = (now + self.config.merge_delay_seconds, contacts, root, into)

    def _merge_heard(self, message: m.Merge, now: float, out: list[Output]) -> None:
        """A member of this cube found it the weaker of two: probe the members of the stronger
        one it met; this node follows when they answer it (``_met``)."""
        mine = self.cube_identity()
        core = self.core
        if mine is None and core is not None and self.topology.state is NodeState.MEMBER:
            # a newcomer whose parent has not said yet which cube this is (the Merge came
            # right behind its Welcome): the Merge says, when it comes from that parent (it
            # would stay behind alone, unaware, in a cube that no longer is: issue 33)
            parent = tree_parent(core.view, 0)
            if parent is not None and parent in (message.root, message.origin):
                self._reported_roots[parent] = message.root
                mine = self.cube_identity()
        if mine is None or mine[1] != message.root or message.origin == self.node_id:
            return
        if message.since and (self._apart_hint is None or message.since < self._apart_hint):
            self._apart_hint = message.since
        for node, address in message.contacts:
            if node == self.node_id or not address:
                continue
            self.addresses.setdefault(node, address)
            probe = m.Heartbeat(wall=now, **self._identity_fields())  # type: ignore[arg-type]
            self._send(node, probe, now, out, address=address)

    def _merge_due(self, now: float, out: list[Output]) -> None:
        if self._merging is None or now < self._merging[0]:
            return
        _, contacts, root, into = self._merging
        self._merging = None
        if self.topology.state is not NodeState.MEMBER:
            return
        mine = self.cube_identity()
        if mine is not None and not stronger(into, mine):
            # this cube grew while the Merge drained (a newcomer joined it, or another cube
            # merged into it) and is now the one that stays: leaving for the cube it met would
            # dissolve the stronger cube into the weaker, and the weaker's members, meeting it
            # meanwhile, were leaving for it (three super-peers cycled so for 90 s, each
            # dissolving the cube the next one was joining)
            log.warning(
                "event=merge_dropped node=%s cube=%s dimension=%d into=%s dimension=%d",
                self.node_id, mine[1], mine[0], into[1], into[0],
            )  # fmt: skip
            return
        since = self._apart_since(now)
        # what the weaker cube judged (who departed) means nothing in the stronger one, whose
        # members it had declared failed (who holds position 0 is forgotten at any join:
        # ``_joined``); who was lost stays lost until found again (a cube may merge into
        # another while both are still apart from a third)
        self.departed.clear()
        self._stale_claims.clear()
        self._meetings.clear()
        self._probed_members.clear()
        self._apart_hint = None
        self._merged_from = (root, since)
        self._rejoin(
            "its cube met a stronger one after a partition",
            now,
            out,
            contacts=contacts,
            since=since,
        )

    def _apart_since(self, now: float) -> float | None:
        """When this node's side may have begun to miss what the other side published: the
        earliest time a super-peer it lost (in the last ``log_seconds``) was last heard from,
        less the margin (``clocks``, rule 5), or an earlier merge's if that was earlier."""
        recent = [
            since - self.config.catchup_margin_seconds
            for since, at in self._lost.values()
            if now - at <= self.config.log_seconds
        ]
        if self._merged_from is not None and self._merged_from[1] is not None:
            recent.append(self._merged_from[1])  # an earlier merge's, while apart from a third
        if self._apart_hint is not None:
            recent.append(self._apart_hint)  # what the member that found the other cube said
        if self._joined_clock is not None:
            # at the latest when it joined this cube, which the other side was never part of
            recent.append(self._joined_clock - self.config.catchup_margin_seconds)
        return min(recent, default=None)

    # == the lost, and probes =======================================================================
    def _lose(self, node: str, since: float, now: float) -> None:
        """``node`` is out of reach (declared failed, or silent to a join): it was last heard
        from at the hybrid time ``since``. Probe it from now on."""
        if node == self.node_id or not since:
            return
        # a catch-up from it not answered yet (asked of the incarnation now lost, which may
        # never answer) is asked again from its start, once it is found again
        pending = self._unanswered_since(node)
        if pending is not None:
            since = min(since, pending + self.config.catchup_margin_seconds)
        known = self._lost.get(node)
        self._lost[node] = (min(since, known[0]) if known else since, now)
        self._probe_tries.pop(node, None)
        self._probes[node] = now + self.config.merge_probe_seconds
        self._keep_apart_since()

    def _earliest_apart(self) -> float | None:
        """The earliest hybrid time a super-peer still lost, or a neighbour declared failed, was
        last heard from (None: none is)."""
        heard = [since for since, _ in self._lost.values()]
        for node in self._suspected:
            since = self._heard_clock.get(node)
            heard.append(since if since is not None else self.clock.last)
        return min(heard, default=None)

    def missing_since(self) -> float | None:
        """From when what this access point delivers may be incomplete (None: nothing says
        so): the earliest time a super-peer it lost or a neighbour it declared failed was last
        heard from, or a catch-up it has still to ask or to have answered starts. A peer that
        (re)connects is told (``Welcome.missing_since``), and its next move statement starts
        no later: the access point it moves to then catches up on what this one may never
        have received. A peer that reconnected to a super-peer cut off from part of the cube,
        which then left before it found that part again, moved with a statement from its
        reconnection, after the publications it had missed (a ten-minute chaos run: 102
        lost)."""
        starts = [self._earliest_apart(), self._unanswered_since()]
        earliest = min((t for t in starts if t is not None), default=None)
        return None if earliest is None else earliest - self.config.catchup_margin_seconds

    def missing_for(self, peer: str) -> float | None:
        """From when what this access point delivers to ``peer`` may be incomplete, as far as
        the peer's next move statement is concerned (None: nothing says so): ``missing_since``,
        a catch-up or a handover still owed for the peer (``_unvouched_since``), and the mail
        held for it and not acknowledged, from its earliest publication (``Mailroom.floor``):
        an access point lost for good takes what it held with it, and the next one catches up
        from here. Told in every ``Welcome`` and ``Clock`` to the peer."""
        starts = [self.missing_since(), self._unvouched_since(peer) or None]
        held = self.mail.floor(peer)
        if held is not None:
            starts.append(held - self.config.catchup_margin_seconds)
        return min((t for t in starts if t is not None), default=None)

    def _keep_apart_since(self) -> None:
        """The earliest time a super-peer still lost, or a neighbour declared failed, was last
        heard from, on disk: a restart catches up from there (a node that crashes while cut off
        has missed what the other side published since the cut, not only since it died: issue
        33). Gone once every lost one is found again."""
        earliest = self._earliest_apart()
        kept = self.store.get_meta("apart_since") or ""
        wanted = "" if earliest is None else repr(earliest)
        if kept != wanted:
            self.store.set_meta("apart_since", wanted)

    def _lose_silent(self, node: str, now: float) -> None:
        """A contact silent to a join: lost since it was last heard from (or three failure
        timeouts ago, if never)."""
        since = self._heard_clock.get(node)
        if since is None:
            since = self.clock.now(now) - 3 * self.config.failure_seconds
        self._lose(node, since, now)

    def _found(self, node: str, now: float | None = None) -> float | None:
        """``node`` is in this cube (a neighbour, or it named this cube): not lost. Returns from
        when it was lost (the hybrid time it was last heard from, less the margin; None if it was
        not). With ``now``: what it published while it was lost from here (evicted by this side
        of a cut, and back by a plain rejoin, not a merge) is in its log, and this node asks it
        for that once routes settle."""
        lost = self._lost.pop(node, None)
        if lost is None:
            return None
        self._probes.pop(node, None)
        self._probe_tries.pop(node, None)
        self._keep_apart_since()
        since = lost[0] - self.config.catchup_margin_seconds
        if now is not None and (self.store.local_peers() or self._withdrawn):
            due = now + self.config.routing.settle_seconds
            self._catchups.append(PlannedCatchUp(due, since, None, frozenset({node})))
            # asked again from there: what was asked of it before and not answered is in it
            for request in [r for r, e in self._unanswered.items() if e.target == node]:
                del self._unanswered[request]
        return since

    def _probe_lost(self, now: float, out: list[Output]) -> None:
        """One lost super-peer at most, the one waiting longest: a cut that healed is noticed
        even if nothing was in flight across it."""
        core = self.core
        if core is None or now < self._probe_at or not self._probes:
            return
        self._probe_at = now + self.config.merge_probe_seconds
        neighbours = core.view.neighbours()
        due = [
            (at, node)
            for node, at in self._probes.items()
            if at <= now and self._probeable(node, neighbours)
        ]
        if not due:
            return
        _, node = min(due)
        self._probe(node, now, out)

    def _probe_every_lost(self, now: float, out: list[Output]) -> None:
        """Every lost super-peer at once: a member that just started a cube looks for the rest
        of its side in one round trip, not one super-peer every ``merge_probe_seconds`` (16
        super-peers cut 4 | 12: three of the four made cubes of their own, with fifteen lost
        each, and met some 20 s later)."""
        if self.core is None:
            return
        neighbours = self.core.view.neighbours()
        for node in sorted(self._probes):
            if self._probeable(node, neighbours):
                self._probe(node, now, out)

    def _probeable(self, node: str, neighbours: Collection[str]) -> bool:
        """A lost super-peer is probed unless it is a neighbour again, or its address unknown."""
        return node not in neighbours and bool(self.addresses.get(node))

    def _probe(self, node: str, now: float, out: list[Output]) -> None:
        tries = self._probe_tries.get(node, 0) + 1
        self._probe_tries[node] = tries
        wait = min(self.config.merge_probe_seconds * 2**tries, MAX_PROBE_SECONDS)
        self._probes[node] = now + wait
        if now - self._lost[node][1] > self.config.retention_seconds:
            self._found(node)  # gone that long: nothing it kept is kept anywhere any more
            return
        probe = m.Heartbeat(wall=now, **self._identity_fields())  # type: ignore[arg-type]
        self._send(node, probe, now, out)
        out.append(Forgotten(node))  # once drained (or the handshake timed out): no link kept

    # == filling in =================================================================================
    def _returned_from_apart(self, message: m.Returned, now: float) -> None:
        """``message.origin`` rejoined from another cube (a merge after a partition): what it
        published while apart is in its log, unless this node was in that cube too. Rejoined
        otherwise (evicted by this side of a cut) after this node had lost it: what it
        published since it was lost (``_found``)."""
        if not message.cube or not message.since:
            self._found(message.origin, now)
            return
        if self._merged_from is not None and self._merged_from[0] == message.cube:
            return  # it comes from the cube this node came from: it had those already
        lost = self._found(message.origin)
        if not (self.store.local_peers() or self._withdrawn):
            return
        due = now + self.config.routing.settle_seconds
        origins = frozenset({message.origin})
        since = message.since if lost is None else min(message.since, lost)
        self._catchups.append(PlannedCatchUp(due, since, None, origins))


def fewest_members(dimension: int) -> int:
    """The fewest members a cube of ``dimension`` has: each holds one position, or two."""
    return max(1, 2**dimension // 2)


def stronger(theirs: tuple[int, str], mine: tuple[int, str]) -> bool:
    """Whether the cube ``theirs`` (dimension, root) is the one that stays when it meets
    ``mine``: the larger dimension (fewer rejoins), then the smaller root id."""
    return (-theirs[0], theirs[1]) < (-mine[0], mine[1])


def _adjacent(a: int, b: int) -> bool:
    """Whether cube positions ``a`` and ``b`` differ in one bit (neighbours in any dimension)."""
    return (a ^ b).bit_count() == 1
