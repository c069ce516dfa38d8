"""The resource side of a peer driven by a workload runner (the simulator, the replay tool): the
workload's ``file`` offered and ``fetch`` asked for with the peer daemon's own
``peer.resources``, so that what is verified, kept and resumed is what a real peer does.

A fetch starts from the peer's notification of the publication, as ``peer fetch`` starts from its
inbox record: the runner passes the one it holds (it keeps one per publication id).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import qel
from peer.resources import WAITING, Resources
from qel.resources import resource_of
from superpeer.sim.workload import OperationError
from wire import messages as m


def open_resources(directory: Path, peer_id: str) -> Resources:
    """A peer's resources under ``directory`` (its offered and wanted files, and the inbox
    directory its fetched files go to)."""
    return Resources(directory / "resources", directory / "notifications", peer_id)


def offer(resources: Resources, publication: str, content: bytes) -> None:
    """Offer ``content`` as the resource of ``publication``, the way ``peer publish --file``
    does: from a file, copied and hashed."""
    source = resources.offered_dir.parent / "sources" / hashlib.sha256(content).hexdigest()
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(content)
    copy, resource = resources.copy_in(source)
    resources.offer(publication, copy, resource, source)


def sent(
    resources: Resources | None, message: object, notifications: Sequence[m.Notify] = ()
) -> object:
    """``message`` as the peer daemon sends it: an update without a file of its own keeps the
    file its resource offers (``Resources.keeping_file``; None: the peer offers nothing); a
    look-up names the super-peer the latest of ``notifications`` (the peer's, in order) from
    the peer it looks for came from (``Inbox.last_origin``)."""
    if resources is not None and isinstance(message, m.Publish) and message.change == "update":
        return replace(message, publication=resources.keeping_file(message.publication))
    if isinstance(message, m.Locate):
        origins = [n.origin for n in notifications if n.owner == message.public_id]
        return replace(message, superpeer=origins[-1]) if origins else message
    return message


def fetch_request(
    resources: Resources, notify: m.Notify | None, publication: str
) -> m.Fetch | None:
    """The ``Fetch`` to send for ``publication`` (None: already fetched, nothing to ask);
    ``OperationError`` when the peer holds no notification of it or it offers no file."""
    if notify is None:
        raise OperationError(f"no notification of publication {publication!r} here")
    try:
        resource = resource_of(notify.publication)
    except qel.PublicationError as error:
        raise OperationError(f"the notification cannot be read: {error}") from None
    if resource is None:
        raise OperationError(f"publication {publication!r} offers no file")
    record = {
        "publication": publication,
        "owner": notify.owner,
        "origin": notify.origin,
        "access_point": notify.access_point,
        "sha256": resource.sha256,
        "size": resource.size,
    }
    _, wanted = resources.want(record, None)
    if wanted["state"] != WAITING:
        return None
    return resources.fetch_message(wanted)


def unfinished(resources: Resources) -> list[m.Fetch]:
    """What a peer asks again after every connection (``peer.client`` does the same): how a
    rendezvous follows a requester that reconnects, or moved."""
    return [resources.fetch_message(record) for _, record in resources.waiting()]
