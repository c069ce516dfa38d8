"""What a peer asks of its access point, and the label that names a request in the answer
(``Ack`` and ``Refused`` carry it; the peer matches answers to requests by it). One function
for both sides, so that the access point's labels and the peer's cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from wire import messages as m

Request = (
    m.Advertise
    | m.PublishSchema
    | m.Subscribe
    | m.Unsubscribe
    | m.Publish
    | m.Withdraw
    | m.Locate
    | m.Moved
    | m.Fetch
)


_LABELS: Final[dict[type, Callable[[Any], str]]] = {
    m.Advertise: lambda _: "advertise",
    m.PublishSchema: lambda _: "publish-schema",
    m.Subscribe: lambda request: f"subscribe {request.id}",
    m.Unsubscribe: lambda request: f"unsubscribe {request.id}",
    m.Publish: lambda request: f"publish {request.publication.id}",
    m.Withdraw: lambda request: f"retract {request.id}",
    m.Locate: lambda request: f"locate {request.id}",
    m.Moved: lambda _: "moved",
    m.Fetch: lambda request: f"fetch {request.publication}",
}


def answered_in_order(message: object) -> bool:
    """Whether a peer matches ``message`` to its requests by their order (``peer.session``):
    an ``Ack``, or a ``Refused`` of anything but a look-up (those name the look-up)."""
    if isinstance(message, m.Refused):
        return not message.request.startswith("locate ")
    return isinstance(message, m.Ack)


def request_label(message: Request) -> str:
    """The label of ``message`` in its answer."""
    return _LABELS[type(message)](message)
