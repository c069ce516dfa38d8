"""What a peer asks of its access point, and the label that names a request in the answer
(``Ack`` and ``Refused`` carry it; the peer matches answers to requests by it). One function
for both sides, so that the access point's labels and the peer's cannot drift apart."""

from __future__ import annotations

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


def request_label(message: Request) -> str:
    """The label of ``message`` in its answer."""
    if isinstance(message, m.Advertise):
        return "advertise"
    if isinstance(message, m.PublishSchema):
        return "publish-schema"
    if isinstance(message, m.Subscribe):
        return f"subscribe {message.id}"
    if isinstance(message, m.Unsubscribe):
        return f"unsubscribe {message.id}"
    if isinstance(message, m.Locate):
        return f"locate {message.id}"
    if isinstance(message, m.Moved):
        return "moved"
    if isinstance(message, m.Withdraw):
        return f"retract {message.id}"
    if isinstance(message, m.Fetch):
        return f"fetch {message.publication}"
    return f"publish {message.publication.id}"
