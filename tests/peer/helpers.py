"""Small builders shared by the peer's tests."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
from cryptography.hazmat.primitives.asymmetric import rsa

import qel
import wire
from peer.client import PeerClient, TlsSettings
from peer.identity import PeerIdentity
from peer.inbox import Inbox
from peer.session import Backoff
from peer.state import StateStore
from tests.peer.fake_access_point import FakeAccessPoint
from wire import messages as m

TITLE_QUERY = 'X : t(X, dc:title, T), T contains "RDF"'
DC_ADVERTISEMENT = '{"schemas": ["dc"]}'


def publication(
    subject: str = "http://example.org/a", title: str = "RDF in P2P", *, id: str = "n1"
) -> qel.Publication:
    [result] = qel.parse_publications(
        f'<{subject}> <http://purl.org/dc/elements/1.1/title> "{title}" .',
        "nt",
        publisher="peer-owner",
        id=id,
    )
    return result


def notify(
    item: qel.Publication | None = None,
    *,
    owner: str = "peer-owner",
    subscriptions: tuple[str, ...] = ("s1",),
) -> m.Notify:
    return m.Notify(
        publication=item or publication(),
        subscriptions=subscriptions,
        owner=owner,
        access_point="127.0.0.1:7400",
        origin="sp-origin",
        hops=2,
        published_at=1764108000.25,
    )


def make_client(
    directory: Path,
    port: int,
    *,
    timeout: float = 30.0,
    locate_timeout: float = 10.0,
    max_rate_retries: int = 20,
    inbox_group: int = 64,
    ack_delay: float = 0.005,
    open_stream: Callable[[], Awaitable[trio.abc.Stream]] | None = None,
    tls: TlsSettings | None = None,
    key: rsa.RSAPrivateKey | None = None,
) -> PeerClient:
    """The client of the peer "alice" with its files in ``directory``, for the access point on
    127.0.0.1:``port``; over TLS, identifying with ``key``, when ``tls`` is given."""
    directory.mkdir(parents=True, exist_ok=True)
    return PeerClient(
        store=StateStore.open(directory, name="alice"),
        inbox=Inbox.open(directory / "notifications"),
        superpeers=[("127.0.0.1", port)],
        backoff=Backoff(0.01, 0.05, random.Random(7).random),
        limits=wire.DEFAULT_WIRE_LIMITS,
        request_timeout=timeout,
        locate_timeout=locate_timeout,
        max_rate_retries=max_rate_retries,
        inbox_group=inbox_group,
        ack_delay=ack_delay,
        tls=tls,
        identity=PeerIdentity.open(key, directory / "identity") if key is not None else None,
        open_stream=open_stream,
    )


async def attached(access_point: FakeAccessPoint, peer_id: str = "alice", times: int = 1) -> None:
    """Until ``peer_id`` has connected ``times`` times: every connection starts with its
    advertisement, which the client sends only once it is connected (identified, with TLS)."""

    def advertised() -> bool:
        return sum(isinstance(r, m.Advertise) for r in access_point.requests_from(peer_id)) >= times

    await access_point.wait_until(advertised)
