"""Expiry of subscriptions and publications (seed 000), sans-IO: times are passed in.

A subscription's expiry (``Subscribe.expires``, an absolute time) is kept by its access point only:
when it passes, the access point retracts the subscription exactly as if the peer had sent
``Unsubscribe`` (the uncovered ones go out first, then the retraction, along the same trees), so
the rest of the network needs no notion of time for it. The access point holds it durably (the
stored ``Subscribe`` carries it), so a restart keeps the deadline.

A publication's expiry (``Publish.expires``) belongs to the resource: every version the owner's
access point originates carries it (``Notification.expires``, then ``Notify.expires``). What an
outbox still holds after it passes is dropped unsent and counted as expired mail (``Mailroom``);
the owner's access point forgets the resource's content (``ResourceVersions.expire``). A
notification that was sent before its expiry is not taken back: it is the subscriber's.
"""

from __future__ import annotations

from wire import messages as m


def expired(notify: m.Notify, now: float) -> bool:
    """Whether an outbox must no longer deliver ``notify``."""
    return notify.expires is not None and now >= notify.expires


class SubscriptionExpiries:
    """The deadlines of the local peers' subscriptions that expire."""

    def __init__(self) -> None:
        self._deadlines: dict[tuple[str, str], float] = {}

    def set(self, peer: str, subscription_id: str, expires: float | None) -> None:
        """Record (or clear, with None) when ``peer``'s subscription expires."""
        if expires is None:
            self._deadlines.pop((peer, subscription_id), None)
        else:
            self._deadlines[(peer, subscription_id)] = expires

    def at(self, peer: str, subscription_id: str) -> float | None:
        return self._deadlines.get((peer, subscription_id))

    def forget(self, peer: str) -> None:
        """``peer`` left or moved away: its subscriptions are no longer this node's to expire."""
        for key in [key for key in self._deadlines if key[0] == peer]:
            del self._deadlines[key]

    def next_deadline(self) -> float | None:
        return min(self._deadlines.values(), default=None)

    def due(self, now: float) -> list[tuple[str, str]]:
        """The (peer, subscription id) whose expiry has passed, soonest first; forgotten here."""
        found = sorted((at, key) for key, at in self._deadlines.items() if at <= now)
        for _, key in found:
            del self._deadlines[key]
        return [key for _, key in found]
