"""Small builders shared by the peer's tests."""

from __future__ import annotations

import qel
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
