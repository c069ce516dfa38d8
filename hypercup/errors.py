"""Errors, named by whose fault they are (h11's convention).

* ``LocalProtocolError``: the local caller misused the node (``leave()`` before joining, a failure
  report about a node that is not a neighbour, ...). Nothing was changed.
* ``RemoteProtocolError``: a message the protocol does not allow at this point: from a node in the
  wrong role, about positions this node does not know, or one that shows an assumption of the
  protocol was broken (for instance a leave running concurrently with a join). The node cannot trust
  its state afterwards and refuses further use.
* ``TopologyError``: a global snapshot (``Topology``) breaks an invariant of the cube.
* ``MessageError``: a message whose fields are malformed (raised when it is built).
"""

from __future__ import annotations


class HypercupError(Exception):
    """Base class of the errors of this package."""


class LocalProtocolError(HypercupError):
    """The local caller asked for something the node cannot do in its current state."""


class RemoteProtocolError(HypercupError):
    """A message that breaks the protocol; ``sender`` is the node it came from."""

    def __init__(self, sender: str, text: str) -> None:
        super().__init__(f"from {sender!r}: {text}")
        self.sender = sender


class TopologyError(HypercupError):
    """A snapshot of the cube that breaks one of its invariants; the text names which."""


class MessageError(HypercupError, ValueError):
    """A protocol message built with malformed fields."""
