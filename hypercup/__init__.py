"""HyperCuP: the self-organising hypercube backbone of super-peers (pure, sans-IO).

Super-peers hold positions of a binary hypercube; a broadcast follows the spanning tree of its
origin and costs exactly N-1 messages, every path is at most ceil(log2 N) hops, and every super-peer
holds one or two positions. ``HypercupNode`` is the protocol one super-peer runs (join, leave,
failure repair, growing and shrinking the cube); ``LocalView`` answers tree questions from one
node's knowledge; ``Topology`` is a global snapshot for tests and simulations;
``hypercup.testing`` drives networks of nodes in memory.

Nodes are names here. A runtime that restarts nodes gives each process an *incarnation*; the
protocol carries it without using it, from where it is known to where it is needed: a
``JoinRequest``'s to the ``Welcome`` (the member that welcomes may never have heard from the
newcomer), a failed or leaving node's from ``neighbour_failed`` / ``leave`` to the ``Departed``
of its successor (often a node it never spoke to).
"""

from hypercup.errors import (
    HypercupError,
    LocalProtocolError,
    MessageError,
    RemoteProtocolError,
    TopologyError,
)
from hypercup.events import Departed, Joined, JoinFailed, Left, Output, Send, TopologyChanged
from hypercup.messages import (
    MESSAGE_TYPES,
    Census,
    CensusReply,
    ChangeRequest,
    Grow,
    JoinDone,
    JoinRefused,
    JoinRequest,
    JoinWalk,
    LeaveWalk,
    Lookup,
    LookupReply,
    Message,
    NeighbourUpdate,
    PeerTable,
    Reclaim,
    Released,
    ReturnTop,
    Shrink,
    UpdateAck,
    Welcome,
)
from hypercup.node import HypercupNode, NodeState
from hypercup.positions import (
    adjacent,
    hamming,
    highest_differing_bit,
    lowest_differing_bit,
    neighbour_position,
    neighbour_positions,
    next_hop_position,
    path_positions,
    top_bit,
    tree_children_positions,
    tree_parent_position,
)
from hypercup.topology import Topology
from hypercup.view import LocalView

__all__ = [
    "MESSAGE_TYPES",
    "Census",
    "CensusReply",
    "ChangeRequest",
    "Departed",
    "Grow",
    "HypercupError",
    "HypercupNode",
    "JoinDone",
    "JoinFailed",
    "JoinRefused",
    "JoinRequest",
    "JoinWalk",
    "Joined",
    "LeaveWalk",
    "Left",
    "LocalProtocolError",
    "LocalView",
    "Lookup",
    "LookupReply",
    "Message",
    "MessageError",
    "NeighbourUpdate",
    "NodeState",
    "Output",
    "PeerTable",
    "Reclaim",
    "Released",
    "RemoteProtocolError",
    "ReturnTop",
    "Send",
    "Shrink",
    "Topology",
    "TopologyChanged",
    "TopologyError",
    "UpdateAck",
    "Welcome",
    "adjacent",
    "hamming",
    "highest_differing_bit",
    "lowest_differing_bit",
    "neighbour_position",
    "neighbour_positions",
    "next_hop_position",
    "path_positions",
    "top_bit",
    "tree_children_positions",
    "tree_parent_position",
]
