"""The census a full cube's anchor takes before it grows (see ``hypercup.node`` for the overview).

Why. The anchor judges the cube full from its own column alone: joins split columns in prefix
order, so its column, the last, is split only when every column is. Departures keep that order
only when they run one at a time: where several overlap (a partition's side repairing many
failures at once), a search that passes over a failed column can leave columns below the anchor's
doubled while the anchor's is split. A grow then reaches super-peers holding two positions, each
of which breaks and rejoins, and the cube falls apart under the joins that waited (32
super-peers cut once: 47 s to one cube after the heal, where 30 is the bound).

How. ``Census`` goes down the anchor's broadcast tree (N - 1 messages); every super-peer answers
its parent once its children have (``CensusReply``, N - 1 more): the lowest doubled columns in
its subtree (at most as many as joins wait at the anchor) and whether anything else there stands
in a grow's way (``_census_of_self``). The anchor then sends each waiting join straight to a
doubled column it was told of (a column split meanwhile sends the walk back to the anchor, as a
search that found one split), or grows when there is none and nothing stood in the way, or
asks again at its next tick. A child that fails, or does not answer within ``CENSUS_TICKS``,
counts as standing in the way. The census is advice taken one round trip before the grow: a
departure between the two can still meet the grow, as before (``hypercup.node``, "Limitation").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hypercup._core import NodeCore, NodeState
from hypercup._neighbourhood import Neighbourhood
from hypercup.messages import Census, CensusReply
from hypercup.positions import top_bit

CENSUS_TICKS = 2
"""Ticks of the runtime (``failure_seconds`` each) a super-peer waits for its children's census
answers; then it answers its parent with what it has, as not ready."""
_ANSWERED_KEPT = 16
"""Census names a super-peer remembers having answered: a census that reaches it twice (its
holdings are irregular, so a second parent counts it as a child) is not forwarded twice."""


@dataclass
class CensusWait:
    """A census this super-peer forwarded to its children (or, at the anchor, started)."""

    parent: str | None
    """Who to answer (None: this node is the anchor that asked)."""
    parent_address: str
    epoch: int
    wanted: int
    waiting: set[str]
    doubled: list[int]
    ready: bool
    ticks: int = 0


@dataclass
class Censuses:
    """A super-peer's censuses under way, and the ones it answered lately."""

    waits: dict[tuple[str, int], CensusWait] = field(default_factory=dict)
    answered: deque[tuple[str, int]] = field(default_factory=lambda: deque(maxlen=_ANSWERED_KEPT))
    taken: int = 0
    """How many this super-peer started (the next one's name)."""
    paused: bool = False
    """The last one found the cube neither growable nor with a doubled column: the next waits
    for a tick."""

    def asked_by(self, origin: str) -> bool:
        return any(key[0] == origin for key in self.waits)


class CensusTaking(NodeCore):
    """Taking a census and answering one; ``Joins`` acts on the anchor's result."""

    def __init__(self, node_id: str, address: str) -> None:
        super().__init__(node_id, address)
        self._census = Censuses()

    _census_taken: Callable[[list[int], bool, int], None]
    """At the anchor: the census of epoch ``epoch`` found these doubled columns, and whether
    nothing else stood in a grow's way (defined by ``Joins``)."""

    def _census_of_self(self, hood: Neighbourhood) -> tuple[list[int], bool, bool]:
        """This node's doubled column, if it holds one; whether its holdings are regular (one
        position, or a doubled column: it has one place in every tree); and whether nothing
        here stands in a grow's way."""
        positions = hood.positions
        if hood.dimension == 0:
            return [], True, True
        top = top_bit(hood.dimension)
        base = min(positions)
        doubled = [base] if positions == {base, base | top} and base < top else []
        regular = len(positions) == 1 or bool(doubled)
        # (not the messages it holds back: a grow waits for none of them, and one of a later
        # epoch, a stray of a cube gone by, is held for good: 32 super-peers, seed 18, a cube
        # of sixteen that never grew for sixteen joins)
        busy = (
            self._changing_tables()
            or self._repair is not None
            or self._reclaiming is not None
            or bool(self._deferred or self._failed)
        )
        return doubled, regular, regular and not busy

    def _start_census(self, wanted: int) -> None:
        """At the anchor of a full cube whose joins wait: asks its tree (or, with nobody in it,
        takes the result at once)."""
        hood = self._member_hood()
        root = min(hood.positions)
        doubled, _, ready = self._census_of_self(hood)
        children = list(dict.fromkeys(hood.view().children(root)))
        if not children:
            self._census_taken(doubled, ready, self._epoch)
            return
        self._census.taken += 1
        key = (self.node_id, self._census.taken)
        wait = CensusWait(None, self.address, self._epoch, wanted, set(), doubled, ready)
        self._census.waits[key] = wait
        census = Census(
            epoch=self._epoch,
            origin=self.node_id,
            census=key[1],
            root=root,
            address=self.address,
            wanted=wanted,
        )
        self._ask_children(key, wait, children, census)

    def _ask_children(
        self, key: tuple[str, int], wait: CensusWait, children: list[str], census: Census
    ) -> None:
        hood = self._member_hood()
        for child in children:
            if child in self._failed:
                wait.ready = False
                continue
            wait.waiting.add(child)
            self._send(child, hood.address_of(child), census)
        if not wait.waiting:
            self._census_finished(key)

    def _on_census(self, sender: str, message: Census) -> None:
        """Answers at once where this node cannot forward (out of the cube, another epoch or
        cube, irregular holdings, asked twice); else forwards to its children."""
        key = (message.origin, message.census)
        hood = self._hood
        repeated = key in self._census.waits or key in self._census.answered
        if (
            self._state is not NodeState.MEMBER
            or hood is None
            or message.epoch != self._epoch
            or repeated
            or message.root >> hood.dimension
        ):
            self._answer(sender, message, [], repeated and self._state is NodeState.MEMBER)
            return
        doubled, regular, ready = self._census_of_self(hood)
        if not regular:
            # irregular holdings have no single place in the tree, and nothing below can
            # make the answer "grow"
            self._answer(sender, message, [], False)
            return
        view = hood.view()
        if view.parent(message.root) != sender:
            # a census of a cube this node's epoch happens to match (two sides of a cut)
            self._answer(sender, message, [], False)
            return
        wait = CensusWait(
            sender, message.address, self._epoch, message.wanted, set(), doubled, ready
        )
        self._census.waits[key] = wait
        forwarded = replace(message, address=self.address)  # the answer comes back here
        self._ask_children(key, wait, list(dict.fromkeys(view.children(message.root))), forwarded)

    def _answer(self, to: str, message: Census, doubled: list[int], ready: bool) -> None:
        key = (message.origin, message.census)
        self._census.answered.append(key)
        self._reply(to, message.address, key, epoch=message.epoch, doubled=doubled, ready=ready)

    def _reply(
        self,
        to: str,
        address: str,
        key: tuple[str, int],
        *,
        epoch: int,
        doubled: list[int],
        ready: bool,
    ) -> None:
        reply = CensusReply(
            epoch=epoch, origin=key[0], census=key[1], doubled=tuple(doubled), ready=ready
        )
        self._send(to, address, reply)

    def _on_census_reply(self, sender: str, message: CensusReply) -> None:
        """An answer for no census waiting here (given up at a tick, or this node's earlier
        membership's) is dropped."""
        key = (message.origin, message.census)
        wait = self._census.waits.get(key)
        if wait is None or sender not in wait.waiting:
            return
        wait.waiting.discard(sender)
        wait.doubled = sorted(set(wait.doubled) | set(message.doubled))[: wait.wanted]
        wait.ready = wait.ready and message.ready
        if not wait.waiting:
            self._census_finished(key)

    def _census_finished(self, key: tuple[str, int]) -> None:
        wait = self._census.waits.pop(key)
        self._census.answered.append(key)
        if wait.parent is None:
            self._census_taken(wait.doubled, wait.ready, wait.epoch)
            return
        self._reply(
            wait.parent,
            wait.parent_address,
            key,
            epoch=wait.epoch,
            doubled=wait.doubled,
            ready=wait.ready,
        )

    def _census_child_failed(self, failed: str) -> None:
        """A failed child answers nothing: it counts as standing in a grow's way."""
        for key, wait in list(self._census.waits.items()):
            if failed in wait.waiting:
                wait.waiting.discard(failed)
                wait.ready = False
                if not wait.waiting:
                    self._census_finished(key)

    def _expire_censuses(self) -> None:
        """At a tick: a census whose answers are ``CENSUS_TICKS`` late is answered with what
        came, as not ready; the anchor may ask again."""
        self._census.paused = False
        for key, wait in list(self._census.waits.items()):
            wait.ticks += 1
            if wait.ticks >= CENSUS_TICKS:
                wait.waiting.clear()
                wait.ready = False
                self._census_finished(key)
