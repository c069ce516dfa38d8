"""A super-peer's knowledge of the cube around it: what ``HypercupNode`` keeps, and what it
reconstructs for a departing node whose steps it takes.

Two maps, both restricted to the node's neighbours:

* ``holders``: position -> node, for every position adjacent to one of ours (complete at all times);
* ``peers``: node -> ``Peer`` (address and the positions the node last announced, in full: a
  neighbour's other position is what tells whether its column is split or doubled).

Announcements (``claim``) are absolute ("X now holds exactly S"), so applying one twice changes
nothing. A node that is no longer adjacent to any of our positions is forgotten. During a departure
the two nodes that change announce separately, so for a moment a neighbour's recorded positions
may still include one that ``holders`` already gives to the other; ``holders`` is what counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hypercup.messages import PeerTable
from hypercup.positions import adjacent, surrounding_positions, top_bit
from hypercup.view import LocalView, check_holding


@dataclass(frozen=True, slots=True)
class Peer:
    address: str
    positions: frozenset[int]


class KnowledgeError(ValueError):
    """What was announced does not fit what this node holds (the caller names the sender)."""


def peers_from_wire(table: PeerTable) -> dict[str, Peer]:
    return {node: Peer(address, frozenset(held)) for node, (address, held) in table.items()}


def peers_to_wire(peers: Mapping[str, Peer]) -> PeerTable:
    return {node: (peer.address, tuple(sorted(peer.positions))) for node, peer in peers.items()}


class Neighbourhood:
    """Positions of ``node_id`` in a ``dimension``-cube, and who holds the positions around them."""

    __slots__ = ("address", "dimension", "holders", "node_id", "peers", "positions")

    def __init__(
        self,
        *,
        node_id: str,
        address: str,
        dimension: int,
        positions: Iterable[int],
        peers: Mapping[str, Peer],
    ) -> None:
        """Derives ``holders`` from what ``peers`` claim; ``KnowledgeError`` if two claim one of
        our neighbour positions or one of them has no claimant."""
        self.node_id = node_id
        self.address = address
        self.dimension = dimension
        self.positions = frozenset(positions)
        try:
            check_holding(self.positions, dimension)
        except ValueError as error:
            raise KnowledgeError(f"{node_id}: {error}") from None
        self.peers: dict[str, Peer] = {}
        self.holders: dict[int, str] = {}
        wanted = self._wanted()
        for node, peer in peers.items():
            if node == node_id:
                continue
            for position in peer.positions & wanted:
                if position in self.holders:
                    raise KnowledgeError(
                        f"position {position} is claimed by both {self.holders[position]} and "
                        f"{node}"
                    )
                self.holders[position] = node
            self.peers[node] = peer
        missing = wanted - set(self.holders)
        if missing:
            raise KnowledgeError(f"{node_id}: nobody is known to hold positions {sorted(missing)}")
        self._forget_strangers()

    def _wanted(self) -> frozenset[int]:
        return surrounding_positions(self.positions, self.dimension)

    def _forget_strangers(self) -> None:
        linked = set(self.holders.values())
        for node in [node for node in self.peers if node not in linked]:
            del self.peers[node]

    # -- questions ----------------------------------------------------------------------------

    def holder(self, position: int) -> str:
        if position in self.positions:
            return self.node_id
        try:
            return self.holders[position]
        except KeyError:
            raise KnowledgeError(
                f"{self.node_id} does not know position {position}: it is not adjacent to "
                f"{sorted(self.positions)}"
            ) from None

    def address_of(self, node: str) -> str:
        return self.address if node == self.node_id else self.peers[node].address

    def positions_of(self, node: str) -> frozenset[int]:
        return self.positions if node == self.node_id else self.peers[node].positions

    def column_split(self, column: int) -> bool:
        """Whether a newcomer holds column ``column``'s mirror, judged from what the base holder
        (one of our neighbours, or us) last announced."""
        mirror = column | top_bit(self.dimension)
        return mirror not in self.positions_of(self.holder(column))

    def partner(self) -> str | None:
        """The newcomer holding our column's mirror, if we are a single base holder."""
        top = top_bit(self.dimension)
        if len(self.positions) != 1 or min(self.positions) >= top:
            return None
        return self.holder(min(self.positions) | top)

    def view(self) -> LocalView:
        return LocalView(
            node_id=self.node_id,
            dimension=self.dimension,
            positions=self.positions,
            table=self.holders,
        )

    def addresses(self) -> dict[str, str]:
        return {node: peer.address for node, peer in self.peers.items()}

    def to_wire(self, around: Iterable[int] | None = None) -> PeerTable:
        """Our peer table (with ourselves), or only the holders of positions adjacent to
        ``around``. A claim is cut to the positions our own table does not give to someone else
        (a later claim may have taken some before the claimant's own announcement arrived)."""
        table: PeerTable = {self.node_id: (self.address, tuple(sorted(self.positions)))}
        for node, peer in self.peers.items():
            held = {p for p in peer.positions if self.holders.get(p, node) == node}
            if held:
                table[node] = (peer.address, tuple(sorted(held)))
        if around is None:
            return table
        targets = set(around)
        return {
            node: entry
            for node, entry in table.items()
            if any(adjacent(p, t) for p in entry[1] for t in targets)
        }

    # -- changes ------------------------------------------------------------------------------

    def claim(self, node: str, peer: Peer) -> None:
        """``node`` announced that it holds exactly ``peer.positions``."""
        if node == self.node_id:
            raise KnowledgeError(f"an announcement about {node} reached {node} itself")
        taken = peer.positions & self.positions
        if taken:
            raise KnowledgeError(f"{node} claims positions {sorted(taken)}, held by {self.node_id}")
        wanted = self._wanted()
        for position in peer.positions & wanted:
            self.holders[position] = node
        self.peers[node] = peer
        self._forget_strangers()

    def release(self, position: int, node: str, address: str) -> None:
        """We hand ``position``, the mirror of our doubled column, to ``node``, which holds nothing
        else."""
        if len(self.positions) != 2 or position not in self.positions:
            raise KnowledgeError(f"{self.node_id} cannot hand over position {position}")
        self.positions = self.positions - {position}
        self.peers[node] = Peer(address, frozenset({position}))
        self.holders[position] = node
        wanted = self._wanted()
        self.holders = {p: holder for p, holder in self.holders.items() if p in wanted}
        self._forget_strangers()

    def grow(self) -> None:
        """Mirrors every position into the new top dimension (the cube was full: one position
        each)."""
        if len(self.positions) != 1 and self.dimension > 0:
            raise KnowledgeError(
                f"{self.node_id} holds {sorted(self.positions)}: a full cube grows, and in a full "
                "cube every super-peer holds one position"
            )
        new_top = 1 << self.dimension
        self.dimension += 1
        self.positions = frozenset(p | m for p in self.positions for m in (0, new_top))
        self.holders.update({p | new_top: node for p, node in list(self.holders.items())})
        self.peers = {
            node: Peer(peer.address, frozenset(p | m for p in peer.positions for m in (0, new_top)))
            for node, peer in self.peers.items()
        }

    def shrink(self) -> None:
        """Drops the top dimension (every column was doubled: two positions each)."""
        top = top_bit(self.dimension)
        low = frozenset(p for p in self.positions if p < top)
        if len(self.positions) != 2 or len(low) != 1:
            raise KnowledgeError(
                f"{self.node_id} holds {sorted(self.positions)}: the cube shrinks when every "
                "column is doubled"
            )
        self.dimension -= 1
        self.positions = low
        wanted = self._wanted()
        self.holders = {p: node for p, node in self.holders.items() if p in wanted}
        self.peers = {
            node: Peer(peer.address, frozenset(p for p in peer.positions if p < top))
            for node, peer in self.peers.items()
        }
        self._forget_strangers()

    def replace(self, positions: Iterable[int], peers: Mapping[str, Peer]) -> None:
        """We now hold ``positions``, and ``peers`` say who holds the positions around them
        (claims on our new positions are ignored). ``KnowledgeError`` if one is unknown."""
        mine = frozenset(positions)
        replacement = Neighbourhood(
            node_id=self.node_id,
            address=self.address,
            dimension=self.dimension,
            positions=mine,
            peers={node: Peer(peer.address, peer.positions - mine) for node, peer in peers.items()},
        )
        self.positions = replacement.positions
        self.holders = replacement.holders
        self.peers = replacement.peers


def merge_tables(*tables: Mapping[str, Peer]) -> dict[str, Peer]:
    """The union of peer tables taken at the same quiet moment; ``KnowledgeError`` if two of them
    disagree about a node."""
    merged: dict[str, Peer] = {}
    for table in tables:
        for node, peer in table.items():
            known = merged.setdefault(node, peer)
            if known != peer:
                raise KnowledgeError(
                    f"{node} is said to hold {sorted(peer.positions)} and {sorted(known.positions)}"
                )
    return merged
