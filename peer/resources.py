"""The peer's resources: the files it offers as an owner and the files it fetches as a requester
(seed 004, Section 5.1; the access points' side is ``superpeer.rendezvous``).

Layout under ``<data>/resources/``::

    offered/<key>        a copy of each published file, taken when it was published: what the
                         notification's hash promises cannot change under it (a reference to the
                         user's file could), at the price of the disk space
    offered/<key>.json   {"publication", "sha256", "size", "source"}
    wanted/<key>.json    a fetch: {"publication", "subject", "owner", "superpeer", "access_point",
                         "sha256", "size", "out", "state", "reason"}; state is ``waiting``,
                         ``done`` or ``failed``
    wanted/<key>.part    the bytes collected so far (a fetch resumes from its size)

A fetched file ends beside its inbox record (``<data>/notifications/<record key>.resource``) or
where ``peer fetch --out`` said, written only once its size and SHA-256 match the notification.

The methods are synchronous file operations with the protocol's decisions (what to answer to each
message); the client runs them in a worker thread and sends what they return. Memory stays bounded:
uploads are read one chunk at a time, and a collection holds two windows in flight: the next one is
asked for when the first bytes of the current one arrive, so the access point's window is never
a round trip of idle wire. Chunks are hashed as they are appended (the file is not read again to
verify it; after a restart what the ``.part`` holds is hashed once).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from peer.files import write_atomically
from peer.inbox import record_key
from qel.model import Publication
from qel.resources import Resource, rendezvous_key, resource_of, with_resource
from wire import messages as m

WAITING: Final = "waiting"
DONE: Final = "done"
FAILED: Final = "failed"
CHUNK_BYTES: Final = 192 * 1024
"""Bytes per ``Upload`` frame (under the wire's binary limit)."""
COLLECT_WINDOW: Final = 4 * 1024 * 1024
"""Bytes asked for in one ``Collect`` (the access point may serve fewer: its ``window_bytes``;
each ``FileChunk`` says where the window served ends, and the next ``Collect`` starts there)."""


class ResourceError(Exception):
    """A file cannot be offered (missing, unreadable); the text says why."""


def _name(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Resources:
    """One peer's offered and wanted files; see the module docstring."""

    def __init__(self, directory: Path, inbox_directory: Path, peer_id: str) -> None:
        self.offered_dir = directory / "offered"
        self.wanted_dir = directory / "wanted"
        self.inbox_directory = inbox_directory
        self.peer_id = peer_id
        self._hashed: dict[str, tuple[int, hashlib._Hash]] = {}
        """Per fetch, the bytes of its ``.part`` hashed so far and the running SHA-256."""
        self._asked: dict[str, int] = {}
        """Per fetch, where the last ``Collect`` asked from."""
        for path in (self.offered_dir, self.wanted_dir):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)

    # -- owner --------------------------------------------------------------------------------
    def copy_in(self, source: Path) -> tuple[Path, Resource]:
        """Copies ``source`` into the offered directory under a temporary name, hashing it on the
        way; ``offer`` then names it after its publication."""
        digest = hashlib.sha256()
        size = 0
        target = self.offered_dir / f".incoming-{os.getpid()}-{_name(str(source))}"
        try:
            with source.open("rb") as reader, target.open("wb") as writer:
                while block := reader.read(1024 * 1024):
                    digest.update(block)
                    size += len(block)
                    writer.write(block)
                writer.flush()
                os.fsync(writer.fileno())
        except OSError as error:
            target.unlink(missing_ok=True)
            raise ResourceError(f"cannot read {source}: {error.strerror or error}") from None
        return target, Resource(sha256=digest.hexdigest(), size=size)

    def offer(self, publication: str, copy: Path, resource: Resource, source: Path) -> None:
        key = _name(publication)
        os.replace(copy, self.offered_dir / key)
        meta = {
            "publication": publication,
            "sha256": resource.sha256,
            "size": resource.size,
            "source": str(source),
        }
        write_atomically(self.offered_dir / f"{key}.json", json.dumps(meta).encode())

    def offered(self, publication: str) -> Resource | None:
        """The file offered as ``publication``'s resource, None if none is."""
        meta = self._json(self.offered_dir / f"{_name(publication)}.json")
        if meta is None or meta.get("publication") != publication:
            return None
        return Resource(sha256=meta["sha256"], size=meta["size"])

    def keeping_file(self, publication: Publication) -> Publication:
        """An update given without a file of its own keeps the file its resource offers: a new
        description of a paper does not take the paper away, and the version compares equal to
        the old one when only the file's descriptor would differ (MDV sends nothing then)."""
        if resource_of(publication) is not None:
            return publication
        resource = self.offered(publication.id)
        return publication if resource is None else with_resource(publication, resource)

    def discard(self, copy: Path) -> None:
        copy.unlink(missing_ok=True)

    def upload(self, wanted: m.UploadWanted, chunk_bytes: int = CHUNK_BYTES) -> Iterator[m.Upload]:
        """The ``Upload`` frames that answer ``wanted``, read one chunk at a time."""
        resource = self.offered(wanted.publication)
        if resource is None:
            yield m.Upload(
                rendezvous=wanted.rendezvous,
                offset=wanted.offset,
                data=b"",
                error=f"this peer offers no file for publication {wanted.publication!r}",
            )
            return
        end = min(resource.size, wanted.offset + wanted.length)
        with (self.offered_dir / _name(wanted.publication)).open("rb") as reader:
            reader.seek(wanted.offset)
            offset = wanted.offset
            while offset < end:
                data = reader.read(min(chunk_bytes, end - offset))
                if not data:
                    break
                yield m.Upload(rendezvous=wanted.rendezvous, offset=offset, data=data)
                offset += len(data)

    # -- requester ----------------------------------------------------------------------------
    def want(self, record: dict[str, Any], out: Path | None) -> tuple[str, dict[str, Any]]:
        """Records a fetch of the resource an inbox ``record`` names (its notification); a fetch
        already recorded stays as it is unless it failed (then it starts again)."""
        key = rendezvous_key(self.peer_id, record["owner"], record["publication"])
        existing = self.fetch_record(key)
        if existing is not None and existing["state"] != FAILED:
            return key, existing
        default = (
            self.inbox_directory / f"{record_key(record['owner'], record['publication'])}.resource"
        )
        wanted = {
            "publication": record["publication"],
            "subject": record.get("subject", ""),
            "owner": record["owner"],
            "superpeer": record["origin"],
            "access_point": record["access_point"],
            "sha256": record["sha256"],
            "size": record["size"],
            "out": str(out if out is not None else default),
            "state": WAITING,
            "reason": "",
        }
        self._drop_part(key)
        self._save(key, wanted)
        return key, wanted

    def fetch_record(self, key: str) -> dict[str, Any] | None:
        return self._json(self.wanted_dir / f"{key}.json")

    def waiting(self) -> list[tuple[str, dict[str, Any]]]:
        found = []
        for path in sorted(self.wanted_dir.glob("*.json")):
            record = self._json(path)
            if record is not None and record.get("state") == WAITING:
                found.append((path.stem, record))
        return found

    def fetch_message(self, record: dict[str, Any]) -> m.Fetch:
        return m.Fetch(
            publication=record["publication"],
            owner=record["owner"],
            superpeer=record["superpeer"],
            access_point=record["access_point"],
            sha256=record["sha256"],
            size=record["size"],
        )

    def ready(self, message: m.FileReady) -> m.Collect | m.Collected:
        """The access point holds the file: collect it from what is already here (or say it
        is held, when this peer finished it and the access point did not hear)."""
        record = self.fetch_record(message.rendezvous)
        if record is None or record["state"] == DONE:
            return m.Collected(rendezvous=message.rendezvous, ok=record is not None)
        held = self._held(message.rendezvous)
        if held == record["size"]:
            # nothing left to collect: an empty file, or one whole here but not yet verified
            part = self.wanted_dir / f"{message.rendezvous}.part"
            part.touch()
            return self._finish(message.rendezvous, record, part)
        return self._collect(message.rendezvous, held)

    def chunk(self, message: m.FileChunk) -> m.Collect | m.Collected | None:
        """Appends a chunk in order, hashing it; asks for the next window when the first bytes
        of this one arrive (two windows in flight), says ``Collected`` when the file is whole
        and verified (a file that does not verify is refused and collected again from the
        start: the access point checked its copy, so the bytes went wrong on the way here)."""
        key = message.rendezvous
        record = self.fetch_record(key)
        if record is None or record["state"] != WAITING:
            return None
        part = self.wanted_dir / f"{key}.part"
        held = self._held(key)
        if message.offset != held or held + len(message.data) > record["size"]:
            return None  # a repeat, or a window asked twice
        digest = self._digest(key, held)
        with part.open("ab") as writer:
            writer.write(message.data)
        digest.update(message.data)
        held += len(message.data)
        self._hashed[key] = (held, digest)
        if held == record["size"]:
            return self._finish(key, record, part)
        if message.window_end < record["size"] and self._asked.get(key, -1) < message.window_end:
            return self._collect(key, message.window_end)
        return None

    def _digest(self, key: str, held: int) -> hashlib._Hash:
        """The SHA-256 of the first ``held`` bytes of ``key``'s ``.part``: the running one, or
        (after a restart, or a part cut short) hashed from the file once."""
        hashed = self._hashed.get(key)
        if hashed is not None and hashed[0] == held:
            return hashed[1]
        digest = hashlib.sha256()
        if held:
            with (self.wanted_dir / f"{key}.part").open("rb") as reader:
                while block := reader.read(1024 * 1024):
                    digest.update(block)
        self._hashed[key] = (held, digest)
        return digest

    def _finish(self, key: str, record: dict[str, Any], part: Path) -> m.Collect | m.Collected:
        digest = self._digest(key, record["size"])
        with part.open("rb") as reader:
            os.fsync(reader.fileno())
        if digest.hexdigest() != record["sha256"]:
            self._drop_part(key)
            return self._collect(key, 0)
        out = Path(record["out"])
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary = out.with_name(f".{out.name}.tmp")
        shutil.move(part, temporary)
        os.replace(temporary, out)
        self._drop_part(key)
        record["state"] = DONE
        self._save(key, record)
        return m.Collected(rendezvous=key, ok=True)

    def answer(
        self, message: m.UploadWanted | m.FileReady | m.FileChunk | m.FetchFailed
    ) -> list[m.Upload | m.Collect | m.Collected]:
        """What a peer sends back for a transfer message, in order (the drivers without a
        daemon, ``deploy.driver`` and ``superpeer.sim``, answer with this; the daemon runs the
        same steps one by one in worker threads)."""
        if isinstance(message, m.UploadWanted):
            return list(self.upload(message))
        if isinstance(message, m.FileReady):
            return [self.ready(message)]
        if isinstance(message, m.FileChunk):
            reply = self.chunk(message)
            return [] if reply is None else [reply]
        self.failed(message)
        return []

    def fetched(self) -> list[str]:
        """The publications whose resource arrived here, verified, in id order."""
        found = []
        for path in self.wanted_dir.glob("*.json"):
            record = self._json(path)
            if record is not None and record.get("state") == DONE:
                found.append(record["publication"])
        return sorted(found)

    def failed(self, message: m.FetchFailed) -> None:
        record = self.fetch_record(message.rendezvous)
        if record is None or record["state"] != WAITING:
            return
        record["state"] = FAILED
        record["reason"] = message.reason
        self._drop_part(message.rendezvous)
        self._save(message.rendezvous, record)

    def progress(self, key: str) -> dict[str, Any] | None:
        record = self.fetch_record(key)
        if record is None:
            return None
        held = record["size"] if record["state"] == DONE else self._held(key)
        return {**record, "rendezvous": key, "received": held}

    def fetches(self) -> list[dict[str, Any]]:
        """Every fetch recorded here, with its progress (as ``progress``)."""
        found = (self.progress(path.stem) for path in sorted(self.wanted_dir.glob("*.json")))
        return [progress for progress in found if progress is not None]

    def _drop_part(self, key: str) -> None:
        (self.wanted_dir / f"{key}.part").unlink(missing_ok=True)
        self._hashed.pop(key, None)
        self._asked.pop(key, None)

    def _collect(self, key: str, offset: int) -> m.Collect:
        self._asked[key] = offset
        return m.Collect(rendezvous=key, offset=offset, length=COLLECT_WINDOW)

    def _held(self, key: str) -> int:
        try:
            return (self.wanted_dir / f"{key}.part").stat().st_size
        except FileNotFoundError:
            return 0

    def _save(self, key: str, record: dict[str, Any]) -> None:
        write_atomically(self.wanted_dir / f"{key}.json", json.dumps(record).encode())

    @staticmethod
    def _json(path: Path) -> dict[str, Any] | None:
        try:
            value = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None
