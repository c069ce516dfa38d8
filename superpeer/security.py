"""A super-peer's identity on disk, its TLS contexts, and the registry of the peers it serves.

Files, in ``<data>/identity/`` unless configured otherwise: ``key.pem`` (RSA, PKCS#8, 0600),
``cert.pem`` (this node's certificate, naming its node id, signed by the network CA) and
``ca.pem`` (the network CA's certificate, the only authority trusted on the backbone).

A super-peer started on a fresh data directory with no identity files (and none configured)
creates a standalone identity: a key, a private CA of its own and a certificate from it, so
``superpeer run`` works with no set-up and its peers can pin its key fingerprint. Joining others
needs a certificate from *their* network CA (``superpeer ca issue``): a standalone certificate is
refused by them, as it should be. Anything else missing or wrong (a key without a certificate, a
certificate for another node id or another key, a key that is unreadable, too small, of the wrong
type, with loose permissions) is a clear error at start-up.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import ssl
from dataclasses import dataclass
from pathlib import Path

import crypto
from crypto import PeerRecord
from crypto.tls import load_certificate, node_id_of

log = logging.getLogger("superpeer")


class IdentityError(ValueError):
    """The node's identity files cannot be used; the message says which and how to fix it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SecuritySettings:
    tls: bool = True
    """Encrypt and authenticate every connection (turn off only to measure what TLS costs)."""
    key: Path | None = None
    certificate: Path | None = None
    ca: Path | None = None
    key_bits: int = 3072
    """Size of the key a fresh standalone super-peer creates for itself."""


@dataclass(frozen=True, slots=True)
class Identity:
    node_id: str
    key: Path
    certificate: Path
    ca: Path
    fingerprint: str
    """The fingerprint of this node's key: what a peer pins for a single server."""

    def server_context(self) -> ssl.SSLContext:
        return crypto.server_context(certificate=self.certificate, key=self.key, ca=self.ca)

    def client_context(self) -> ssl.SSLContext:
        return crypto.client_context(
            certificate=self.certificate, key=self.key, ca=self.ca, check_hostname=False
        )


def identity_paths(directory: Path, settings: SecuritySettings) -> tuple[Path, Path, Path]:
    base = directory / "identity"
    return (
        settings.key or base / "key.pem",
        settings.certificate or base / "cert.pem",
        settings.ca or base / "ca.pem",
    )


def prepare_identity(
    directory: Path, node_id: str, settings: SecuritySettings, host: str
) -> Identity:
    """The node's identity, created standalone on a fresh directory, else loaded and checked."""
    key_path, cert_path, ca_path = identity_paths(directory, settings)
    configured = any(p is not None for p in (settings.key, settings.certificate, settings.ca))
    present = [p.exists() for p in (key_path, cert_path, ca_path)]
    if not any(present) and not configured:
        _create_standalone(directory, node_id, settings, host)
    elif not all(present):
        missing = ", ".join(
            str(p)
            for p, here in zip((key_path, cert_path, ca_path), present, strict=True)
            if not here
        )
        raise IdentityError(
            f"identity incomplete, missing {missing}: create the key with `superpeer keygen` and "
            "have the network CA issue its certificate with `superpeer ca issue`"
        )
    try:
        key = crypto.load_private_key(key_path)
        certificate = load_certificate(cert_path)
        load_certificate(ca_path)
    except crypto.CryptoError as error:
        raise IdentityError(str(error)) from None
    if crypto.fingerprint(certificate) != crypto.fingerprint(key):
        raise IdentityError(f"{cert_path} is not a certificate for the key {key_path}")
    named = node_id_of(certificate)
    if named != node_id:
        raise IdentityError(
            f"{cert_path} is for node {named!r}, but this super-peer is {node_id!r} "
            "(use --node-id, or issue a certificate for this node id)"
        )
    return Identity(node_id, key_path, cert_path, ca_path, crypto.fingerprint(key))


def _create_standalone(
    directory: Path, node_id: str, settings: SecuritySettings, host: str
) -> None:
    key_path, cert_path, ca_path = identity_paths(directory, settings)
    key_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    own_ca = directory / "identity" / "own-ca"
    key = crypto.generate_private_key(settings.key_bits)
    crypto.save_private_key(key, key_path)
    crypto.init_ca(own_ca, name=f"{node_id} (standalone)", bits=settings.key_bits)
    hosts = sorted({host, "127.0.0.1", "localhost"})
    crypto.save_certificate(
        crypto.issue_certificate(own_ca, node_key=key, node_id=node_id, hosts=hosts), cert_path
    )
    shutil.copyfile(own_ca / "ca-cert.pem", ca_path)
    log.info(
        "event=standalone_identity node=%s fingerprint=%s note=%r",
        node_id,
        crypto.fingerprint(key),
        "peers can pin this fingerprint; to join a backbone, have its CA issue a certificate",
    )


class SqliteRegistry:
    """The peers this super-peer has registered (``crypto.Registry``), in sqlite: public key,
    public identifier, the *hash* of the private identifier, last address."""

    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS peers (public_id TEXT PRIMARY KEY, public_key BLOB NOT NULL,"
            " private_id_hash BLOB NOT NULL, address TEXT NOT NULL)"
        )

    def get(self, public_id: str) -> PeerRecord | None:
        row = self._db.execute(
            "SELECT public_id, public_key, private_id_hash, address FROM peers WHERE public_id = ?",
            (public_id,),
        ).fetchone()
        if row is None:
            return None
        return PeerRecord(
            public_id=row[0],
            public_key=bytes(row[1]),
            private_id_hash=bytes(row[2]),
            address=row[3],
        )

    def add(self, record: PeerRecord) -> bool:
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO peers VALUES (?, ?, ?, ?)",
            (record.public_id, record.public_key, record.private_id_hash, record.address),
        )
        return cursor.rowcount == 1

    def update_address(self, public_id: str, address: str) -> None:
        self._db.execute("UPDATE peers SET address = ? WHERE public_id = ?", (address, public_id))

    def remove(self, public_id: str) -> bool:
        """Forget a registration (the peer left for good, or the operator said so): the same key
        may register again and receive a new private identifier."""
        cursor = self._db.execute("DELETE FROM peers WHERE public_id = ?", (public_id,))
        return cursor.rowcount == 1

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM peers").fetchone()[0]

    def close(self) -> None:
        self._db.close()
