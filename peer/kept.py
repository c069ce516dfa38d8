"""Publications only their access point holds: ``<data>/kept/``, one file per resource.

An access point acknowledges a publication with its own log's copy alone when no neighbour
answers for a second one (cut off alone; ``superpeer._replication``, rules 3 and 8), and says
so (``Ack.alone``). Lost for good before a neighbour answers again, it would take the
publication with it, and nobody else could deliver it: a chaos run lost 45 acknowledged
publications that way (issue 33, stop 61). So the peer keeps such a publication here, the
second copy, and sends it again (``peer.client``):

* on every connection, after its state, marked as sent again (``Publish.again``): where the
  version is logged (its origin) it is a repeat, answered ``alone`` while the copy is still
  owed, and not published again (that would move its log entry past the catch-ups of the
  cut it was published in); anywhere else, after a failover, a publication that access point
  accepts as its own (a first version it never saw is new there, with the same version
  number, which a subscriber that had it already drops: an inbox keeps one per owner, id and
  version);
* every ``resend_seconds`` while connected, the one kept longest, as a probe: once its
  answer says a copy is made, all the others at once.

It is forgotten when a later answer about its resource says the network holds two copies: an
``Ack`` without ``alone`` of it or of any later change of the same resource (an update, an
extension, a retraction: the later version stands for the resource, and keeping the earlier
one would bring it back); a later change answered ``alone`` is kept instead of it. A refusal
ends it too (logged: an update whose earlier versions went with an access point lost for good
cannot be accepted elsewhere). A retraction answered ``alone`` is not kept: sent again to an
access point that never had the resource, it would be refused. Bounded by ``max_kept`` (the
oldest beyond it are forgotten, logged) and ``kept_seconds`` (an access point's log keeps an
hour by default; a partition longer than that is told as a gap, not repaired from here).

The rules are pure (``answered``, ``due``, ``probe``: time passed in); ``directory=None`` keeps
them in memory (the simulator's peers, ``superpeer.sim``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import wire
from peer.files import remove_temporary_files, write_atomically
from peer.published import file_name
from wire import messages as m
from wire.codec import WireError

RECORD_FORMAT: Final = 1
log = logging.getLogger("peer.kept")


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptLimits:
    max_kept: int = 10_000
    """Publications kept at most (about a kilobyte each on disk); beyond, the oldest is
    forgotten, logged (``event=kept_forgotten``)."""
    kept_seconds: float = 3600.0
    """How long one is kept at most: an origin's log keeps an hour by default (``[recovery]
    log_seconds``), and a partition that outlived it is told as a gap."""
    resend_seconds: float = 30.0
    """While connected, the one kept longest is sent again this often (a probe)."""


@dataclass(frozen=True, slots=True)
class KeptPublication:
    request: m.Publish
    kept_at: float
    """The peer's wall time of its first ``Ack`` that said ``alone`` (a later change of the
    resource answered so is kept afresh); ``kept_seconds`` counts from it."""


class Kept:
    """The publications of one data directory acknowledged ``alone``; see the module docstring."""

    def __init__(self, directory: Path | None, limits: KeptLimits = KeptLimits()) -> None:
        self.directory = directory
        self.limits = limits
        self._kept: dict[str, KeptPublication] = {}
        self.forgotten = 0
        """Publications forgotten unconfirmed (over a bound, or refused)."""
        if directory is not None:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            remove_temporary_files(directory)
            found = (_read(path) for path in directory.glob("*.json"))
            for kept in sorted((k for k in found if k is not None), key=lambda k: k.kept_at):
                self._kept[kept.request.publication.id] = kept

    def __len__(self) -> int:
        return len(self._kept)

    def answered(
        self, request: m.Publish | m.Withdraw, answer: m.Ack | m.Refused, now: float
    ) -> None:
        """The access point answered ``request`` (first sent, or sent again from here)."""
        if isinstance(request, m.Publish) and request.again:
            request = dataclasses.replace(request, again=False)  # (as it was first sent)
        resource = request.id if isinstance(request, m.Withdraw) else request.publication.id
        held = self._kept.get(resource)
        if isinstance(request, m.Publish) and isinstance(answer, m.Ack) and answer.alone:
            if held is None or held.request != request:
                self._put(KeptPublication(request, now))
            self._bound(now)
            return
        if held is None:
            return
        if isinstance(answer, m.Refused):
            if held.request != request:
                return  # a later change refused: the kept one still stands
            self.forgotten += 1
            log.error(
                "event=kept_refused id=%r reason=%r note=%r",
                resource,
                answer.reason,
                "held by one super-peer alone, and not accepted again",
            )
        self._drop(resource)

    def due(self, now: float) -> list[m.Publish]:
        """Every one kept, the longest first (what a connection sends again), once the bounds
        are applied."""
        self._bound(now)
        return [dataclasses.replace(k.request, again=True) for k in self._kept.values()]

    def probe(self, now: float) -> m.Publish | None:
        """The one kept longest (sent again every ``resend_seconds`` while connected)."""
        self._bound(now)
        first = next(iter(self._kept.values()), None)
        return None if first is None else dataclasses.replace(first.request, again=True)

    def clear(self) -> None:
        """The peer left the network: its resources are gone with it."""
        for resource in list(self._kept):
            self._drop(resource)

    def _bound(self, now: float) -> None:
        """The oldest go while over a bound (``_kept`` is in the order they were kept)."""
        limits = self.limits
        gone = []
        while self._kept:
            kept = next(iter(self._kept.values()))
            over = len(self._kept) > limits.max_kept
            if not over and now - kept.kept_at <= limits.kept_seconds:
                break
            gone.append(kept.request.publication.id)
            self._drop(gone[-1])
        if not gone:
            return
        self.forgotten += len(gone)
        log.warning(
            "event=kept_forgotten count=%d first=%r note=%r",
            len(gone),
            gone[0],
            f"held by one super-peer alone over max_kept ({limits.max_kept}) or kept_seconds "
            f"({limits.kept_seconds}): no longer sent again",
        )

    def _put(self, kept: KeptPublication) -> None:
        resource = kept.request.publication.id
        if self.directory is not None:
            record = {
                "format": RECORD_FORMAT,
                "kept_at": kept.kept_at,
                "request": wire.encode(kept.request).hex(),
            }
            write_atomically(self.directory / file_name(resource), json.dumps(record).encode())
        self._kept.pop(resource, None)  # (the latest kept goes last)
        self._kept[resource] = kept

    def _drop(self, resource: str) -> None:
        if self._kept.pop(resource, None) is not None and self.directory is not None:
            (self.directory / file_name(resource)).unlink(missing_ok=True)


def _read(path: Path) -> KeptPublication | None:
    try:
        record = json.loads(path.read_bytes())
        request, _ = wire.decode(bytes.fromhex(record["request"]))
        if not isinstance(request, m.Publish):
            raise WireError(f"a {type(request).__name__}, not a publication")
        return KeptPublication(request, float(record["kept_at"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("event=kept_unreadable file=%s error=%r", path, str(error))
        return None
