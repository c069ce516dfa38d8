"""Per-peer rate limits at the access point: one token bucket per peer and kind of request, so
that a peer asking as fast as it can does not slow the others down (issue 37, "fair under load").

Pure: the time is passed in, nothing reads a clock. A bucket holds at most ``burst`` tokens and
gains ``per_second`` of them each second; a request takes one. What happens to a request the
bucket cannot pay for depends on its kind (``superpeer.node`` applies it):

* **publications** (``Publish``, ``Withdraw``) are never refused: the bucket goes into debt and
  the node tells the runtime to stop reading the peer's connection until the debt is repaid
  (``PauseReading``). The publisher slows to the rate; nothing it sent is lost or reordered.
  A runtime that ignores the pause (the simulator) just does not limit publications.
  The limit is work-conserving: a publisher is held to its rate only while another peer
  published within ``contention_seconds``. Alone, it may go as fast as the super-peer takes it
  (a library publishing its catalogue on a quiet access point); its bucket is then emptied but
  never in debt, so that the moment another peer publishes, it is held to its rate at once and
  the other's latency is not spent on a backlog of tokens. A bucket cannot tell "alone" from
  "beside others" by itself: with 1,000/s for everyone a flooder moved the others' p99 by 2.8x,
  and a rate low enough to keep it under 2x (200/s) capped a lone publisher too.
* **subscriptions** (``Subscribe``, ``Unsubscribe``) and **look-ups** (``Locate``) are refused
  and change nothing; the refusal says why and after how many seconds the bucket will pay
  (``Refused.retry_after``), and the peer client sends the request again then. The connection
  is not read until then either (``PauseReading``): a peer that asks again at once, as fast as
  it is answered, would otherwise have each request decoded, refused and answered, more than
  three refusals for each request taken beside a peer churning its 1,000 subscriptions
  (BENCHMARKS.md, issue 37, stop 87); paused, what it sent meanwhile is read when the bucket
  pays. A peer that waits as told is never paused longer than it waits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

PUBLICATIONS: Final = "publications"
SUBSCRIPTIONS: Final = "subscriptions"
LOOKUPS: Final = "lookups"
KINDS: Final = (PUBLICATIONS, SUBSCRIPTIONS, LOOKUPS)
"""The kinds of request limited, as they are named in ``/metrics`` and in refusals."""
ROUNDING: Final = 1e-9
"""Tokens short that still pay: a request asked again exactly when its refusal said must not
be refused again for a rounding error of the refill."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rate:
    """``per_second`` tokens gained each second, ``burst`` held at most (both positive)."""

    per_second: float
    burst: int

    def __post_init__(self) -> None:
        if not self.per_second > 0 or self.burst < 1:
            raise ValueError(f"a rate needs per_second > 0 and burst >= 1, got {self}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimits:
    """One rate per kind of request (``[limits]`` of the super-peer's configuration)."""

    publications: Rate = field(default_factory=lambda: Rate(per_second=200.0, burst=400))
    subscriptions: Rate = field(default_factory=lambda: Rate(per_second=100.0, burst=2000))
    lookups: Rate = field(default_factory=lambda: Rate(per_second=50.0, burst=200))
    contention_seconds: float = 1.0
    """A publisher is held to its rate only while another peer published within this long."""

    def __post_init__(self) -> None:
        if not self.contention_seconds >= 0:
            raise ValueError(f"contention_seconds must be >= 0, got {self.contention_seconds}")

    def of(self, kind: str) -> Rate:
        rate: Rate = getattr(self, kind)
        return rate


class TokenBucket:
    """``burst`` tokens at first, refilled at ``per_second`` up to ``burst``."""

    __slots__ = ("rate", "tokens", "updated")

    def __init__(self, rate: Rate, now: float) -> None:
        self.rate = rate
        self.tokens = float(rate.burst)
        self.updated = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            gained = (now - self.updated) * self.rate.per_second
            self.tokens = min(float(self.rate.burst), self.tokens + gained)
            self.updated = now

    def take(self, now: float) -> float:
        """Takes a token if there is one: 0.0; else takes nothing and returns the seconds until
        there will be one (a time that did not go forward refills nothing)."""
        self._refill(now)
        if self.tokens >= 1.0 - ROUNDING:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate.per_second

    def take_on_credit(self, now: float) -> float:
        """Takes a token, into debt if need be; the seconds until the debt is repaid (0.0 if
        there is none): how long the asker should wait before asking again."""
        self._refill(now)
        self.tokens -= 1.0
        return max(0.0, -self.tokens / self.rate.per_second)

    def take_if_any(self, now: float) -> None:
        """Takes a token if there is one, never into debt (an uncontended publisher's)."""
        self._refill(now)
        self.tokens = max(0.0, self.tokens - 1.0)

    def full(self, now: float) -> bool:
        """Holds ``burst`` tokens: as good as a new bucket, so it can be forgotten."""
        self._refill(now)
        return self.tokens >= self.rate.burst - ROUNDING


class PeerRateLimiter:
    """The buckets of every peer, made on a peer's first request of a kind and forgotten when
    full (``prune``), so that memory follows the peers that asked lately; ``limited`` counts
    the requests that were paused or refused, per kind."""

    def __init__(self, limits: RateLimits) -> None:
        self.limits = limits
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self.limited: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._publishers: list[tuple[str, float]] = []
        """The last two distinct peers that published, latest first, with when: whether
        another peer published lately is one comparison."""

    def _bucket(self, peer: str, kind: str, now: float) -> TokenBucket:
        bucket = self._buckets.get((peer, kind))
        if bucket is None:
            bucket = self._buckets[peer, kind] = TokenBucket(self.limits.of(kind), now)
        return bucket

    def refusal(self, peer: str, kind: str, now: float) -> float:
        """0.0: the request may go on; else refuse it: the seconds after which it may come
        again, in whole milliseconds and one more than needed (at wall-clock magnitudes a time
        is only good to a fraction of a microsecond: exactly the wait could fall just short)."""
        wait = self._bucket(peer, kind, now).take(now)
        if wait <= 0:
            return 0.0
        self.limited[kind] += 1
        return (math.ceil(wait * 1000) + 1) / 1000

    def pause(self, peer: str, kind: str, now: float) -> float:
        """The request goes on; the seconds the peer's connection should not be read (0.0: no
        pause). Publications are held to their rate only while another peer published within
        ``contention_seconds`` (see the module docstring)."""
        bucket = self._bucket(peer, kind, now)
        if kind == PUBLICATIONS and not self._contended(peer, now):
            bucket.take_if_any(now)
            return 0.0
        wait = bucket.take_on_credit(now)
        if wait > 0:
            self.limited[kind] += 1
        return wait

    def _contended(self, peer: str, now: float) -> bool:
        """Records that ``peer`` publishes now; whether another peer published lately."""
        latest = self._publishers
        if latest and latest[0][0] == peer:
            latest[0] = (peer, now)
            other = latest[1] if len(latest) > 1 else None
        else:
            other = latest[0] if latest else None
            self._publishers = [(peer, now), *latest[:1]]
        return other is not None and now - other[1] <= self.limits.contention_seconds

    def prune(self, now: float) -> None:
        """Forgets the buckets that refilled (housekeeping)."""
        for key in [key for key, bucket in self._buckets.items() if bucket.full(now)]:
            del self._buckets[key]
