"""Mail held in memory, not yet written: ``SqliteStore``'s mail for an attached peer, on its way.

Why: a notification to an online subscriber was a mail row written when it came and deleted
when the peer's ``Delivered`` came, milliseconds later, with the row's share of its body's count,
its index entries and its bytes in the redo journal both times (some 15 us of the 80 to 90 that
a notification costs the store: BENCHMARKS.md, issue 37, stop 84). The row protected little in
that time: the access point hands another origin's notification to the peer before its commit,
and a restart's catch-up from the origins' logs (its own included) since ``alive_at`` less
``catchup_margin_seconds`` brings back what it held unsynced (README, "What is durable where").

So mail the mail room calls *recoverable* (for an attached peer, sent at once or waiting for
room in its window, and published recently enough that such a catch-up would find it:
``Mailroom``) is held here, numbered like any mail. A ``Delivered`` that comes first only adds
its keys to ``delivered``. Held mail is written as a row (``SqliteStore.flush_mail``) before
anything changes its peer's mail (a handover, a renewal, an expiry; a window's refill reads it
as it is, beside the rows, and the counts count it). Whenever ``alive_at`` is written, the held
mail published before that reading less the margin is written in the same transaction, the
rest stays held: so what is not written at a crash was published no earlier than the
``alive_at`` on disk less the margin, which the catch-up covers. (Every ``alive_at`` written
before it was lower and flushed the same way; the mail held after it was published at most
``recoverable_seconds``, half the margin, before a later reading.) Until stop 87 every held
notification was written at each ``alive_at``: beside a peer withdrawing subscriptions (each
withdrawal writes ``alive_at``), every notification to it was written and then deleted at its
``Delivered`` (BENCHMARKS.md, issue 37, stop 87).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Held:
    """One notification held for a peer: what ``Store.put_mail`` was given, and its row's hash
    (``key_hash(peer, key)``)."""

    key: str
    data: bytes
    at: float
    body: bytes | None
    hashed: int
    published: float = -math.inf
    """Its publication's hybrid time: a restart's catch-up from before it brings it back
    (unknown: written at the next ``alive_at``)."""


class UnwrittenMail:
    """Per peer, the mail held (by number, in the order it came)."""

    def __init__(self) -> None:
        self._by_peer: dict[str, dict[int, Held]] = {}
        self._numbers: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._numbers)

    def counts(self) -> dict[str, int]:
        """Per peer, how much is held."""
        return {peer: len(box) for peer, box in self._by_peer.items()}

    def holds(self, peer: str, key: str) -> bool:
        return (peer, key) in self._numbers

    def after(self, peer: str, after: int, limit: int) -> list[tuple[int, Held]]:
        """The first ``limit`` of ``peer``'s mail numbered above ``after``, with their numbers,
        in order; still held."""
        box = self._by_peer.get(peer)
        if not box or next(reversed(box)) <= after:
            return []
        found = []
        for number, held in box.items():
            if number > after:
                found.append((number, held))
                if len(found) == limit:
                    break
        return found

    def hold(self, peer: str, number: int, held: Held) -> None:
        """Hold ``held`` for ``peer`` as mail ``number`` (higher than any it holds)."""
        self._by_peer.setdefault(peer, {})[number] = held
        self._numbers[peer, held.key] = number

    def take_through(self, peer: str, through: int) -> list[Held]:
        """``peer``'s mail numbered up to ``through``, oldest first; no longer held."""
        box = self._by_peer.get(peer)
        if not box:
            return []
        taken = []
        for number in list(box):
            if number > through:
                break
            held = box.pop(number)
            del self._numbers[peer, held.key]
            taken.append(held)
        if not box:
            del self._by_peer[peer]
        return taken

    def take_peer(self, peer: str) -> list[tuple[int, Held]]:
        """All of ``peer``'s mail, with its numbers, oldest first; no longer held."""
        box = self._by_peer.pop(peer, {})
        for held in box.values():
            del self._numbers[peer, held.key]
        return list(box.items())

    def take_before(self, before: float = math.inf) -> list[tuple[str, int, Held]]:
        """The mail published before ``before`` (all of it by default), as (peer, number,
        held), in order of number; no longer held."""
        taken = []
        for peer, box in list(self._by_peer.items()):
            for number in [n for n, held in box.items() if held.published < before]:
                held = box.pop(number)
                del self._numbers[peer, held.key]
                taken.append((peer, number, held))
            if not box:
                del self._by_peer[peer]
        taken.sort(key=lambda item: item[1])
        return taken
