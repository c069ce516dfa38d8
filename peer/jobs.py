"""Bulk publication jobs: ``<data>/jobs/<key>.json``, one per document published in batches.

``peer publish`` of a large document sends it in numbered batches (``peer.bulk``); the daemon
records a batch here once the access point answered every publication in it, published or
refused, never before. Running the same command again asks for the job (``job`` on the control
socket) and sends only the batches not recorded, so an interruption (the command killed, the
daemon stopped, the connection lost) costs at most the batches in flight, which are sent again:
their publications are the same versions (ids are hashes of the triples), which the access point
answers without a new version and inboxes take once::

    {"format": 1,
     "key": "1a2b...",              # peer.bulk.document_key: the document and its format
     "batches": 100, "resources": 200000,
     "done": [0, 1, 2],             # batches the access point answered in full
     "published": 5998,             # publications it acknowledged in them
     "refused": {"<reason, ids and numbers masked>": {"count": 2, "example": "<a full reason>",
                                                      "subjects": ["http://...", ...]}}}

The record is written atomically after each batch (``peer.files``), after the journal of what
was published (``peer.published``), so a recorded batch is in the journal too. ``leave`` clears
the jobs with the journal.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from peer.files import remove_temporary_files, write_atomically

JOB_FORMAT: Final = 1
FIRST_SUBJECTS: Final = 5
"""How many subjects a job keeps per reason of refusal (the report shows them)."""
_PARTICULARS = re.compile(r"'[^']*'|\"[^\"]*\"|<[^>]*>|\d+")


def reason_kind(reason: str) -> str:
    """A refusal's reason without what is particular to one resource (its id, its subject, its
    size), so that refusals for the same cause count together."""
    return _PARTICULARS.sub("…", reason)


@dataclass(frozen=True, slots=True)
class Refusals:
    count: int
    example: str
    subjects: tuple[str, ...]

    def to_plain(self) -> dict[str, Any]:
        return {"count": self.count, "example": self.example, "subjects": list(self.subjects)}


def tally(
    refusals: dict[str, Refusals], refused: Iterable[tuple[str, str]], first: int = FIRST_SUBJECTS
) -> dict[str, Refusals]:
    """``refusals`` with more (subject, reason) pairs counted in, the first subjects kept."""
    merged = dict(refusals)
    for subject, reason in refused:
        kind = reason_kind(reason)
        held = merged.get(kind, Refusals(0, reason, ()))
        subjects = held.subjects if len(held.subjects) >= first else (*held.subjects, subject)
        merged[kind] = Refusals(held.count + 1, held.example, subjects)
    return merged


@dataclass(frozen=True, slots=True)
class Job:
    """What the access point answered so far for one document (see the module docstring)."""

    key: str
    batches: int
    resources: int
    done: frozenset[int] = frozenset()
    published: int = 0
    refused: dict[str, Refusals] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.done) == self.batches

    def remaining(self) -> list[int]:
        return [n for n in range(self.batches) if n not in self.done]

    def answered(self, batch: int, published: int, refused: Iterable[tuple[str, str]]) -> Job:
        """The job once ``batch`` was answered in full: ``published`` acknowledged, ``refused``
        (subject, reason) pairs. A batch answered before counts once."""
        if batch in self.done:
            return self
        if not 0 <= batch < self.batches:
            raise ValueError(f"batch {batch} is not one of the job's {self.batches}")
        return Job(
            self.key,
            self.batches,
            self.resources,
            self.done | {batch},
            self.published + published,
            tally(self.refused, refused),
        )

    def to_plain(self) -> dict[str, Any]:
        return {
            "format": JOB_FORMAT,
            "key": self.key,
            "batches": self.batches,
            "resources": self.resources,
            "done": sorted(self.done),
            "published": self.published,
            "refused": {kind: r.to_plain() for kind, r in self.refused.items()},
        }

    @classmethod
    def from_plain(cls, value: dict[str, Any]) -> Job:
        return cls(
            str(value["key"]),
            int(value["batches"]),
            int(value["resources"]),
            frozenset(int(n) for n in value["done"]),
            int(value["published"]),
            {
                str(kind): Refusals(
                    int(r["count"]), str(r["example"]), tuple(str(s) for s in r["subjects"])
                )
                for kind, r in value["refused"].items()
            },
        )


class Jobs:
    """The jobs of one data directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def open(cls, directory: Path) -> Jobs:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        remove_temporary_files(directory)
        return cls(directory)

    def get(self, key: str) -> Job | None:
        """The job of ``key``; None if there is none (or its file is unreadable: the batches
        are then sent again, which publishes nothing twice)."""
        if not re.fullmatch(r"[0-9a-f]{1,64}", key):
            raise ValueError(f"not a job key: {key!r}")
        try:
            return Job.from_plain(json.loads((self.directory / f"{key}.json").read_bytes()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, job: Job) -> None:
        write_atomically(self.directory / f"{job.key}.json", json.dumps(job.to_plain()).encode())

    def clear(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
