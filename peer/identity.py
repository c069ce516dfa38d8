"""The peer's identity on disk: its RSA key, and the private identifier its access point issued.

Files, in ``<data>/identity/`` (a directory private to the user)::

    key.pem            the peer's RSA key: PKCS#8 PEM, mode 0600, created by `peer keygen`
                       (elsewhere if the config's [security] key says so); encrypted with the
                       passphrase in $PEER_KEY_PASSPHRASE when that is set
    private-id         the private identifier the access point issued when the peer registered
                       (mode 0600, `crypto.save_private_identifier`): a bearer secret
    registration.json  who issued it: {"format": 1, "public_id": ..., "issued_by": <node id>}

The key's public identifier (``pk1-...``, ``crypto.public_identifier``) is the peer's id in the
network. The private identifier is written to ``private-id`` and nowhere else, and never logged or
printed (``crypto.PrivateIdentifier`` hides it from ``repr``); it goes only to the access point
that issued it (``peer.session`` decides, ``crypto.Prover`` enforces). Its issuer is kept beside
it because the secret file holds the secret alone.

The peer keeps every registration it holds: the latest in ``registration.json`` and
``private-id``, the earlier ones (the peer moved on) in ``earlier/<hash of the issuer>/`` with the
same two files. A peer that moves back to an access point before that one handed its record over
(the handover drops it; the two cross on a fast move) then identifies there with the private
identifier that access point issued, instead of meeting ``already_registered`` and waiting; if
the record is gone, the access point answers ``unknown_identifier``, and that registration is
forgotten and the peer registers again.

Writing a registration: ``registration.json`` first, then ``private-id``, both durably, and only
then does the peer confirm it to the access point (which keeps nothing before). A crash between
the two writes leaves an issuer without its secret (no registration: the peer registers again, and
the access point never stored the unconfirmed one) or, when a registration replaces another, the
new issuer with the previous secret (the new access point answers ``unknown_identifier`` and the
peer registers again). Forgetting deletes ``private-id`` first, so a crash never leaves a secret
without its issuer. Files that disagree otherwise (a secret without its issuer, a registration of
another key) were changed by hand or by a ``key`` setting pointing at another key: the daemon
refuses to start and says which files to move away, rather than deleting a secret it cannot place.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.asymmetric import rsa

import crypto
from crypto.identifiers import MAX_NODE_ID_CHARS
from peer.files import remove_temporary_files, write_atomically
from peer.session import Registration

PASSPHRASE_VARIABLE: Final = "PEER_KEY_PASSPHRASE"
PRIVATE_ID_FILE: Final = "private-id"
EARLIER_DIRECTORY: Final = "earlier"
REGISTRATION_FILE: Final = "registration.json"
REGISTRATION_FORMAT: Final = 1


class IdentityError(Exception):
    """The peer's key or registration files cannot be used; the message says why and what to do."""


def passphrase_from(environ: Mapping[str, str]) -> bytes | None:
    """The key's passphrase from ``$PEER_KEY_PASSPHRASE``, or None when it is not set."""
    value = environ.get(PASSPHRASE_VARIABLE)
    if value is None:
        return None
    if not value:
        raise IdentityError(
            f"{PASSPHRASE_VARIABLE} is set but empty: unset it for a key without a passphrase"
        )
    return value.encode()


def create_key(
    path: Path, *, bits: int, passphrase: bytes | None, force: bool
) -> rsa.RSAPrivateKey:
    """A new key saved at ``path`` (0600; encrypted with ``passphrase`` if given). An existing
    key is replaced only with ``force``: it is the peer's identity."""
    if not force and (path.exists() or path.is_symlink()):
        raise IdentityError(
            f"the key file {path} already exists: it is this peer's identity. "
            "`peer keygen --force` replaces it, and the peer becomes a new peer for the network"
        )
    try:
        key = crypto.generate_private_key(bits)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        crypto.save_private_key(key, path, passphrase, overwrite=force)
    except (crypto.KeyPolicyError, crypto.KeyFileError) as error:
        raise IdentityError(str(error)) from None
    except OSError as error:
        raise IdentityError(f"cannot create {path.parent}: {error.strerror}") from None
    return key


def load_key(path: Path, passphrase: bytes | None) -> rsa.RSAPrivateKey:
    """The peer's key, or ``IdentityError`` saying what is wrong with the file and how to fix it
    (``crypto.load_private_key`` checks permissions, format, passphrase, type and size)."""
    if not path.exists() and not path.is_symlink():
        raise IdentityError(
            f"the peer has no key at {path}: create its identity with `peer keygen` (with the "
            "same --data-dir or --config), or run with --no-tls for a plaintext super-peer"
        )
    try:
        return crypto.load_private_key(path, passphrase)
    except crypto.KeyFileError as error:
        message = str(error)
        if "passphrase" in message:
            message += f" (the peer reads it from the environment variable {PASSPHRASE_VARIABLE})"
        raise IdentityError(message) from None


@dataclass(frozen=True, slots=True)
class RegistrationFiles:
    """``private-id`` and ``registration.json`` in ``directory``, for the key ``public_id``."""

    directory: Path
    public_id: str

    @property
    def private_id_path(self) -> Path:
        return self.directory / PRIVATE_ID_FILE

    @property
    def registration_path(self) -> Path:
        return self.directory / REGISTRATION_FILE

    def load(self) -> Registration | None:
        """The registration the files hold, or None (never registered, or interrupted before the
        registration was confirmed). ``IdentityError`` if they cannot be used."""
        issued_by = self._issuer()
        secret_present = self.private_id_path.exists() or self.private_id_path.is_symlink()
        if issued_by is None:
            if secret_present:
                raise IdentityError(
                    f"{self.private_id_path} exists but {self.registration_path} (which access "
                    "point issued it) does not: restore it, or move the private identifier away "
                    "to register again (the access point that issued it then answers "
                    "already_registered until its operator runs `superpeer forget-peer`)"
                )
            return None
        if not secret_present:
            return None
        try:
            private_identifier = crypto.load_private_identifier(self.private_id_path)
        except crypto.KeyFileError as error:
            raise IdentityError(str(error)) from None
        return Registration(private_identifier, issued_by)

    def _issuer(self) -> str | None:
        path = self.registration_path
        try:
            document = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError as error:
            raise IdentityError(f"cannot read {path}: {error.strerror}") from None
        except ValueError:
            document = None
        issued_by = document.get("issued_by") if isinstance(document, dict) else None
        if (
            not isinstance(document, dict)
            or document.get("format") != REGISTRATION_FORMAT
            or not isinstance(document.get("public_id"), str)
            or not isinstance(issued_by, str)
            or not 0 < len(issued_by) <= MAX_NODE_ID_CHARS
        ):
            raise IdentityError(
                f"{path} is damaged: move it and {self.private_id_path} away to register again"
            )
        if document["public_id"] != self.public_id:
            raise IdentityError(
                f"{path} is the registration of {document['public_id']}, not of this peer's key "
                f"({self.public_id}): is the key setting right? If the key was replaced on "
                f"purpose, move {path} and {self.private_id_path} away to register the new key"
            )
        return issued_by

    def save(self, registration: Registration) -> None:
        """Durably, issuer first (see the module docstring); replaces what was there."""
        document = {
            "format": REGISTRATION_FORMAT,
            "public_id": self.public_id,
            "issued_by": registration.issued_by,
        }
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomically(self.registration_path, (json.dumps(document) + "\n").encode())
            crypto.save_private_identifier(
                registration.private_identifier, self.private_id_path, overwrite=True
            )
        except crypto.KeyFileError as error:
            raise IdentityError(str(error)) from None
        except OSError as error:
            raise IdentityError(
                f"cannot write {self.registration_path}: {error.strerror}"
            ) from None

    def forget(self) -> bool:
        return _remove_registration(self.directory)


class PeerIdentity:
    """A peer's key and its registrations: what ``peer.client`` needs to identify."""

    def __init__(self, key: rsa.RSAPrivateKey, files: RegistrationFiles) -> None:
        self.key = key
        self.files = files
        self.registration: Registration | None = files.load()
        self.earlier: dict[str, Registration] = {}
        """Registrations with access points the peer was attached to before (by issuer)."""
        earlier = files.directory / EARLIER_DIRECTORY
        if earlier.is_dir():
            for directory in sorted(earlier.iterdir()):
                remove_temporary_files(directory)
                held = RegistrationFiles(directory, files.public_id).load()
                if held is not None:
                    self.earlier[held.issued_by] = held

    @classmethod
    def open(cls, key: rsa.RSAPrivateKey, directory: Path) -> PeerIdentity:
        """``IdentityError`` if the registration files in ``directory`` cannot be used."""
        if directory.is_dir():
            remove_temporary_files(directory)  # a write cut short by a crash
        return cls(key, RegistrationFiles(directory, crypto.public_identifier(key)))

    @property
    def public_id(self) -> str:
        return self.files.public_id

    def registration_with(self, issuer: str) -> Registration | None:
        """The registration ``issuer`` issued, if the peer holds one."""
        latest = self.registration
        if latest is not None and latest.issued_by == issuer:
            return latest
        return self.earlier.get(issuer)

    def store(self, registration: Registration) -> None:
        """Durably, before the registration is confirmed to the access point; the one it
        replaces as the latest is kept among the earlier ones."""
        latest = self.registration
        if latest is not None and latest.issued_by != registration.issued_by:
            self._earlier_files(latest.issued_by).save(latest)
            self.earlier[latest.issued_by] = latest
        if registration.issued_by in self.earlier:
            self._earlier_files(registration.issued_by).forget()
            del self.earlier[registration.issued_by]
        self.files.save(registration)
        self.registration = registration

    def forget(self, issuer: str) -> None:
        """``issuer`` no longer knows the peer: its registration goes."""
        latest = self.registration
        if latest is not None and latest.issued_by == issuer:
            self.registration = None
            self.files.forget()
        if issuer in self.earlier:
            del self.earlier[issuer]
            self._earlier_files(issuer).forget()

    def _earlier_files(self, issuer: str) -> RegistrationFiles:
        name = hashlib.sha256(issuer.encode()).hexdigest()[:32]
        return RegistrationFiles(
            self.files.directory / EARLIER_DIRECTORY / name, self.files.public_id
        )


def forget_registration(directory: Path) -> bool:
    """Deletes every registration in ``directory`` (the secrets first), the earlier ones too;
    whether there were any. For ``peer keygen --force``: registrations belong to the key it
    replaces."""
    earlier = directory / EARLIER_DIRECTORY
    present = _remove_registration(directory)
    try:
        if earlier.is_dir():
            shutil.rmtree(earlier)
            present = True
    except OSError as error:
        raise IdentityError(f"cannot remove {earlier}: {error.strerror}") from None
    return present


def _remove_registration(directory: Path) -> bool:
    """Deletes the registration files in ``directory`` (the secret first); whether there were
    any."""
    secret, issuer = directory / PRIVATE_ID_FILE, directory / REGISTRATION_FILE
    try:
        present = any(p.exists() or p.is_symlink() for p in (secret, issuer))
        secret.unlink(missing_ok=True)
        issuer.unlink(missing_ok=True)
        if present:
            crypto.sync_directory(directory)
    except OSError as error:
        raise IdentityError(
            f"cannot remove the registration in {directory}: {error.strerror}"
        ) from None
    return present
