"""RSA identities: generating, saving and loading the key pair of a peer or a super-peer.

Policy (one place, applied to keys we generate, keys we load and keys a remote peer presents):

* RSA only. The design paper gives every peer an RSA key pair; one algorithm keeps the identifier
  rule (``crypto.identifiers``) and the signature rule (RSA-PSS) unambiguous.
* At least 2048 bits (NIST SP 800-57: 112-bit security, acceptable until 2030), 3072 by default
  (128-bit security); larger sizes are accepted up to 16384 bits, a bound that keeps what a remote
  peer can make a verifier compute small (verification cost grows with the square of the size).
* Public exponent 65537, what every current tool generates. Refusing others costs no real user and
  removes odd keys (e = 3, huge exponents) from what a verifier must handle.

Files are PKCS#8 PEM (``BEGIN PRIVATE KEY``, or ``BEGIN ENCRYPTED PRIVATE KEY`` with a passphrase:
the library's best available encryption, PBKDF2 + AES-256-CBC today). They are written atomically
with mode 0600 and, when loaded, refused if anyone but the owner can access them (see
``crypto._files``). Every way a key file can be unusable is a ``KeyFileError`` whose message names
the file, the problem and the fix, so a daemon can stop at start-up with one clear line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa, x448, x25519
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from crypto import _files
from crypto.errors import KeyFileError, KeyPolicyError

DEFAULT_BITS: Final = 3072
MIN_BITS: Final = 2048
MAX_BITS: Final = 16384
PUBLIC_EXPONENT: Final = 65537
KEYGEN_HINT: Final = "generate one with `peer keygen` or `superpeer keygen`"

_PRIVATE_LABEL: Final = re.compile(rb"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----")
_ENCRYPTED_MARKS: Final = (
    b"-----BEGIN ENCRYPTED PRIVATE KEY-----",  # PKCS#8
    b"Proc-Type: 4,ENCRYPTED",  # traditional OpenSSL PEM
)
_OPENSSH_LABEL: Final = b"-----BEGIN OPENSSH PRIVATE KEY-----"


def check_key_policy(
    key: object,
    *,
    min_bits: int = MIN_BITS,
    max_bits: int = MAX_BITS,
) -> rsa.RSAPublicKey:
    """The key's public half if the policy accepts it; otherwise ``KeyPolicyError`` naming the
    rule it breaks. ``min_bits`` may be raised above 2048, never lowered."""
    if min_bits < MIN_BITS:
        raise ValueError(f"min_bits may not be below {MIN_BITS}, got {min_bits}")
    if isinstance(key, rsa.RSAPrivateKey):
        key = key.public_key()
    if not isinstance(key, rsa.RSAPublicKey):
        raise KeyPolicyError(f"an RSA key is required, not {_describe(key)}")
    if key.key_size < min_bits:
        raise KeyPolicyError(f"RSA-{key.key_size} is too small: at least {min_bits} bits required")
    if key.key_size > max_bits:
        raise KeyPolicyError(f"RSA-{key.key_size} is too large: at most {max_bits} bits accepted")
    if key.public_numbers().e != PUBLIC_EXPONENT:
        raise KeyPolicyError(f"the RSA public exponent must be {PUBLIC_EXPONENT}")
    return key


def generate_private_key(bits: int = DEFAULT_BITS) -> rsa.RSAPrivateKey:
    """A new RSA key pair with public exponent 65537; ``KeyPolicyError`` below 2048 bits or above
    16384."""
    if not MIN_BITS <= bits <= MAX_BITS:
        raise KeyPolicyError(f"RSA key size must be {MIN_BITS}..{MAX_BITS} bits, got {bits}")
    return rsa.generate_private_key(public_exponent=PUBLIC_EXPONENT, key_size=bits)


def private_key_pem(key: rsa.RSAPrivateKey, passphrase: bytes | None = None) -> bytes:
    """PKCS#8 PEM, encrypted with ``passphrase`` if given (an empty passphrase is refused: it
    would look protected and not be)."""
    if passphrase is None:
        encryption: serialization.KeySerializationEncryption = serialization.NoEncryption()
    elif not passphrase:
        raise ValueError("an empty passphrase protects nothing; pass None for an unencrypted key")
    else:
        encryption = serialization.BestAvailableEncryption(passphrase)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def save_private_key(
    key: rsa.RSAPrivateKey,
    path: str | Path,
    passphrase: bytes | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Writes ``key`` as PKCS#8 PEM at ``path`` with mode 0600, atomically; refuses to replace an
    existing file unless ``overwrite`` (replacing a key silently would orphan the identity it
    held). Returns the path written."""
    check_key_policy(key)
    return _files.save_file(
        Path(path),
        private_key_pem(key, passphrase),
        mode=_files.PRIVATE_MODE,
        overwrite=overwrite,
        what="key file",
        exists_note=" (it holds an identity); remove it first or pass overwrite=True",
    )


def load_private_key(
    path: str | Path,
    passphrase: bytes | None = None,
    *,
    min_bits: int = MIN_BITS,
    allow_insecure_permissions: bool = False,
) -> rsa.RSAPrivateKey:
    """The RSA private key in the PEM file at ``path``, or ``KeyFileError`` saying why not.

    Checked, in order: the file exists and is readable; it is a regular file that only its owner
    can access (else an error with the ``chmod`` fix, or with ``allow_insecure_permissions`` an
    ``InsecurePermissionsWarning``); it is a PEM private key (not a certificate or garbage); the
    passphrase is given exactly when the key is encrypted, and is right; the key is RSA, at least
    ``min_bits`` bits, with exponent 65537.
    """
    path = Path(path)
    data = _files.read_secret_file(
        path,
        what="key file",
        allow_insecure_permissions=allow_insecure_permissions,
        missing_hint=KEYGEN_HINT,
    )
    if _OPENSSH_LABEL in data:
        raise KeyFileError(
            f"key file {path} is in OpenSSH format; convert it to PKCS#8 PEM "
            f"(`ssh-keygen -p -m PKCS8 -f {path}`)"
        )
    if not _PRIVATE_LABEL.search(data):
        raise KeyFileError(f"key file {path} is {_describe_pem(data)}, not a PEM private key")
    encrypted = any(mark in data for mark in _ENCRYPTED_MARKS)
    if encrypted and passphrase is None:
        raise KeyFileError(f"key file {path} is encrypted: a passphrase is required")
    if not encrypted and passphrase is not None:
        raise KeyFileError(
            f"key file {path} is not encrypted, but a passphrase was given (remove the "
            "passphrase setting, or re-save the key with one)"
        )
    try:
        key = serialization.load_pem_private_key(data, passphrase)
    except UnsupportedAlgorithm:
        raise KeyFileError(f"key file {path} holds a key of an unsupported type") from None
    except ValueError:
        if encrypted:
            raise KeyFileError(
                f"key file {path} cannot be decrypted: wrong passphrase (or a damaged file)"
            ) from None
        raise KeyFileError(f"key file {path} is damaged: its PEM content is not a key") from None
    try:
        check_key_policy(key, min_bits=min_bits)
    except KeyPolicyError as error:
        raise KeyFileError(f"key file {path}: {error} ({KEYGEN_HINT})") from None
    assert isinstance(key, rsa.RSAPrivateKey)  # check_key_policy accepts only RSA
    return key


def public_key_der(key: rsa.RSAPrivateKey | PublicKeyTypes) -> bytes:
    """The DER SubjectPublicKeyInfo of ``key`` (of its public half for an RSA private key): the
    one canonical byte form identifiers and fingerprints are computed from. Any public key is
    accepted, so that a server presenting a non-RSA certificate still gets a fingerprint."""
    if isinstance(key, rsa.RSAPrivateKey):
        key = key.public_key()
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_public_key_der(
    data: bytes, *, min_bits: int = MIN_BITS, max_bits: int = MAX_BITS
) -> rsa.RSAPublicKey:
    """The RSA public key in DER SubjectPublicKeyInfo ``data``, received from someone else.

    ``KeyPolicyError`` if it does not parse, breaks the policy, or is not in canonical form (the
    re-encoding differs): an identifier is the hash of the canonical DER, so accepting another
    encoding of the same key would let one key appear under two byte strings.
    """
    try:
        key = serialization.load_der_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise KeyPolicyError("not a DER SubjectPublicKeyInfo public key") from None
    public = check_key_policy(key, min_bits=min_bits, max_bits=max_bits)
    if public_key_der(public) != data:
        raise KeyPolicyError("the public key is not in canonical DER form")
    return public


def _describe(key: object) -> str:
    for types, text in (
        ((ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey), "an elliptic-curve key"),
        ((ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey), "an Ed25519 key"),
        ((ed448.Ed448PrivateKey, ed448.Ed448PublicKey), "an Ed448 key"),
        ((x25519.X25519PrivateKey, x25519.X25519PublicKey), "an X25519 key"),
        ((x448.X448PrivateKey, x448.X448PublicKey), "an X448 key"),
    ):
        if isinstance(key, types):
            return text
    name = type(key).__name__
    # by name: cryptography 51 deprecates DSA, and touching ``dsa.DSAPrivateKey`` warns
    return "a DSA key" if name.startswith("DSA") else f"a {name}"


def _describe_pem(data: bytes) -> str:
    """What a file that is not a private key seems to be, for the error message."""
    for label, text in (
        (b"-----BEGIN CERTIFICATE-----", "a certificate"),
        (b"-----BEGIN PUBLIC KEY-----", "a public key"),
        (b"-----BEGIN RSA PUBLIC KEY-----", "a public key"),
    ):
        if label in data:
            return text
    if b"-----BEGIN" in data:
        return "a PEM file of another kind"
    return "not a PEM file"
