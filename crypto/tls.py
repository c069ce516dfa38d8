"""The network CA, super-peer certificates, and TLS 1.3 contexts (standard library ``ssl``).

Why TLS and not a record layer of our own: TLS 1.3 gives confidentiality, integrity, forward
secrecy and server authentication that have been analysed for years; the standard library speaks
it and trio wraps it (``trio.SSLStream``). Our code only decides who to trust.

Trust model
-----------
* The backbone operator runs a network CA (``init_ca``: an RSA key, 0600, and a self-signed
  certificate, ``CA:TRUE, pathlen:0``, ``keyCertSign, cRLSign``). It signs one certificate per
  super-peer (``issue_certificate``): ``CA:FALSE``, ``digitalSignature``, extended key usage
  ``serverAuth`` and ``clientAuth`` (a super-peer both accepts and opens backbone links), the
  node id in the common name and, authoritatively, in a URI subject alternative name
  ``urn:semantic-pubsub:node:<percent-encoded node id>``, and the hosts it listens on as IP or DNS
  alternative names.
* Super-peer <-> super-peer: mutual TLS 1.3 verified against the network CA only (never the
  system's public CAs: a certificate any public CA issued must not make a backbone member).
  The connecting side also checks the host name, and after the handshake the daemon checks that
  the certificate is for the node it meant to reach (``check_peer_node_id``).
* Peer -> access point: the peer verifies the super-peer, either against the network CA or, for
  a single server without a CA, by pinning the SHA-256 fingerprint of the server's public key.
  Peers have no certificates: they prove their identity inside the channel
  (``crypto.identification``).

One listening port, certificate optional
----------------------------------------
Peers and super-peers connect to the same port, and which one is calling is only known from the
first frame (``link.hello``), after the TLS handshake. So ``server_context`` asks for a client
certificate without requiring one (``CERT_OPTIONAL``): a certificate that is presented must
verify against the network CA or the handshake fails; a peer presents none. The daemon must then
refuse any connection whose hello says ``role=superpeer`` unless
``verified_peer_certificate_node_id`` returns the node id it claims. Two ports (or SNI routing)
would move that check into configuration, but add a second listener to secure and to document;
one explicit check after the hello is simpler to get right and to test.

Pinning
-------
``peer_client_context(pinned_fingerprint=...)`` returns a context that does not verify the chain
(``CERT_NONE``): the ``ssl`` module has no hook to verify a pin during the handshake. The caller
MUST call ``check_pinned`` (or ``check_pinned_connection``) right after the handshake and before
sending anything. TLS 1.3 still makes the server prove it holds the private key of the
certificate it sent (CertificateVerify), so a matching pin authenticates the server.

Fingerprints
------------
``fingerprint`` is the public identifier (``crypto.identifiers``) of a certificate's public key:
``pk1-`` + base32 SHA-256 of its DER SubjectPublicKeyInfo. It names the key, not the certificate,
so it survives re-issuing a certificate for the same key.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import string
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from crypto import _files
from crypto.errors import CertificateError, IdentifierError
from crypto.identifiers import MAX_NODE_ID_CHARS, parse_public_identifier, public_identifier
from crypto.keys import (
    DEFAULT_BITS,
    check_key_policy,
    generate_private_key,
    load_private_key,
    public_key_der,
    save_private_key,
)

CA_KEY_FILE: Final = "ca-key.pem"
CA_CERT_FILE: Final = "ca-cert.pem"
CA_DAYS: Final = 3650
LEAF_DAYS: Final = 825
"""The longest validity public CAs were allowed for years (CA/Browser Forum); re-issuing is one
command."""
CLOCK_SKEW: Final = datetime.timedelta(days=1)
"""Certificates are valid from a day before their issue time, as public CAs backdate theirs
(``clocks``, rule 10): a verifier whose clock is behind the issuer's, by minutes or hours, does
not refuse a certificate issued a moment ago."""
_VALIDITY_CODES: Final = {9: "not yet valid", 10: "expired"}
"""OpenSSL's ``X509_V_ERR_CERT_NOT_YET_VALID`` and ``X509_V_ERR_CERT_HAS_EXPIRED``."""
NODE_ID_URI_PREFIX: Final = "urn:semantic-pubsub:node:"
DEFAULT_HOSTS: Final = ("127.0.0.1", "localhost")


class PeerCertificateSource(Protocol):
    """Anything that exposes the peer's certificate as ``ssl`` does: ``ssl.SSLObject``,
    ``ssl.SSLSocket``, ``trio.SSLStream`` (which forwards ``getpeercert``)."""

    def getpeercert(self, binary_form: bool = False) -> Any: ...


# -- fingerprints and node ids --------------------------------------------------------------------


def fingerprint(
    item: x509.Certificate | PublicKeyTypes | rsa.RSAPrivateKey,
) -> str:
    """The SHA-256 fingerprint of the public key of a certificate or key, as a public
    identifier (``pk1-...``)."""
    if isinstance(item, x509.Certificate):
        item = item.public_key()
    return public_identifier(public_key_der(item))


def node_id_of(certificate: x509.Certificate) -> str | None:
    """The node id a certificate names in its URI alternative name, or None if it names none."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return None
    for uri in names.value.get_values_for_type(x509.UniformResourceIdentifier):
        if uri.startswith(NODE_ID_URI_PREFIX):
            return urllib.parse.unquote(uri[len(NODE_ID_URI_PREFIX) :])
    return None


def check_node_id(node_id: str) -> str:
    """``node_id`` if a certificate can carry it: 1..64 printable characters, no control
    characters (they would end up in logs and in names)."""
    if (
        not isinstance(node_id, str)
        or not 0 < len(node_id) <= MAX_NODE_ID_CHARS
        or not node_id.isprintable()
        or node_id != node_id.strip()
    ):
        raise CertificateError(
            f"a node id in a certificate is 1..{MAX_NODE_ID_CHARS} printable characters "
            f"without surrounding spaces, not {node_id!r}"
        )
    return node_id


# -- the network CA -------------------------------------------------------------------------------


def init_ca(
    directory: str | Path,
    *,
    name: str,
    bits: int = DEFAULT_BITS,
    days: int = CA_DAYS,
    passphrase: bytes | None = None,
    key: rsa.RSAPrivateKey | None = None,
    now: datetime.datetime | None = None,
) -> x509.Certificate:
    """Creates the network CA in ``directory``: ``ca-key.pem`` (0600, encrypted with
    ``passphrase`` if given) and ``ca-cert.pem``. ``key`` uses an existing key instead of
    generating one. Refuses to run if either file exists: a new CA would silently invalidate
    every certificate the old one issued."""
    directory = Path(directory)
    key_path, cert_path = directory / CA_KEY_FILE, directory / CA_CERT_FILE
    for path in (key_path, cert_path):
        if path.exists():
            raise CertificateError(
                f"{path} exists: the network CA in {directory} is already initialised; refusing "
                "to replace it (every certificate it issued would stop verifying)"
            )
    if days <= 0:
        raise ValueError("days must be positive")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if key is None:
        key = generate_private_key(bits)
    check_key_policy(key)
    now = _utc(now)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    key_id = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(key_id, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(key_id), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    save_private_key(key, key_path, passphrase)
    save_certificate(certificate, cert_path)
    return certificate


def issue_certificate(
    ca_directory: str | Path,
    *,
    node_key: rsa.RSAPublicKey | rsa.RSAPrivateKey,
    node_id: str,
    hosts: Iterable[str] = DEFAULT_HOSTS,
    days: int = LEAF_DAYS,
    ca_passphrase: bytes | None = None,
    now: datetime.datetime | None = None,
) -> x509.Certificate:
    """A certificate for super-peer ``node_id`` holding ``node_key``, signed by the network CA in
    ``ca_directory``, valid for ``hosts`` (IP addresses and DNS names) for ``days`` (cut to the
    CA's own expiry: a certificate cannot outlive its issuer's). Save it with
    ``save_certificate``."""
    ca_directory = Path(ca_directory)
    check_node_id(node_id)
    if days <= 0:
        raise ValueError("days must be positive")
    public_key = check_key_policy(node_key)
    ca_key = load_private_key(ca_directory / CA_KEY_FILE, ca_passphrase)
    ca_certificate = load_certificate(ca_directory / CA_CERT_FILE)
    if fingerprint(ca_certificate) != fingerprint(ca_key):
        raise CertificateError(
            f"{ca_directory / CA_KEY_FILE} is not the key of {ca_directory / CA_CERT_FILE}"
        )
    now = _utc(now)
    not_after = min(now + datetime.timedelta(days=days), ca_certificate.not_valid_after_utc)
    names: list[x509.GeneralName] = [
        x509.UniformResourceIdentifier(NODE_ID_URI_PREFIX + urllib.parse.quote(node_id, safe=""))
    ]
    names.extend(_host_name(host) for host in hosts)
    ca_key_id = ca_certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
        .issuer_name(ca_certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_key_id.value),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _key_usage(
    *, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    """A key usage extension allowing what is named and nothing else."""
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _host_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    allowed = set(string.ascii_letters + string.digits + "-.")
    if not host or not set(host) <= allowed or host.startswith((".", "-")):
        raise CertificateError(f"{host!r} is neither an IP address nor an ASCII DNS name")
    return x509.DNSName(host.lower())


def _utc(now: datetime.datetime | None) -> datetime.datetime:
    """``now`` (aware), or the current time: issuing certificates is tooling, not protocol logic,
    so the clock may be read here; tests pass ``now``."""
    if now is None:
        return datetime.datetime.now(datetime.UTC)
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now


def handshake_failure(
    error: BaseException,
    *,
    now: float,
    own: x509.Certificate | None = None,
    remote: x509.Certificate | None = None,
    offset: float | None = None,
) -> str:
    """Why a TLS handshake failed, in words: trio's ``BrokenResourceError`` says nothing, and a
    certificate refused for its validity is a clock problem the operator must see as one
    (``clocks``, rule 10). ``now``: this host's clock; ``own``: the certificate this side
    presented (what the other side may have refused); ``remote``: the other side's, if it could
    be read; ``offset``: the other side's clock minus this one's, if measured."""
    cause: BaseException = error
    while not isinstance(cause, ssl.SSLError) and cause.__cause__ is not None:
        cause = cause.__cause__
    clock = _instant(now)
    measured = "not measured" if offset is None else f"{offset:+.1f} s"
    if isinstance(cause, ssl.SSLCertVerificationError):
        if cause.verify_code in _VALIDITY_CODES:
            text = f"the other side's certificate is {_VALIDITY_CODES[cause.verify_code]} here"
            if remote is not None:
                text += f" (valid {_validity(remote)})"
            return (
                f"{text}; this host's clock says {clock} (the other side's clock offset: "
                f"{measured}): one of the two clocks is wrong"
            )
        return f"the other side's certificate was refused: {cause.verify_message}"
    if isinstance(cause, ssl.SSLError):
        reason = (cause.reason or str(cause)).lower().replace("_", " ")
        refused = "alert" in reason and "certificate" in reason
        broken_off = isinstance(cause, ssl.SSLEOFError) or "eof" in reason
        if refused or broken_off:
            # a peer that refuses a certificate (a TLS library that does not send its alert
            # first) just closes the connection in the middle of the handshake
            text = (
                f"the other side refused this host's certificate ({reason})"
                if refused
                else "the other side broke the handshake off (it may have refused this host's "
                "certificate)"
            )
            if own is not None:
                text += (
                    f"; it is valid {_validity(own)} and this host's clock says {clock} (the "
                    f"other side's clock offset: {measured}): if the other side's clock is "
                    "outside that, it is wrong, or the certificate is not from its network's CA"
                )
            return text
        return reason
    return str(cause) or type(cause).__name__


def _instant(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _validity(certificate: x509.Certificate) -> str:
    start = certificate.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    end = certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"from {start} to {end}"


def save_certificate(
    certificate: x509.Certificate, path: str | Path, *, overwrite: bool = False
) -> Path:
    """Writes ``certificate`` as PEM at ``path`` (mode 0644: it is public), atomically."""
    return _files.save_file(
        Path(path),
        certificate.public_bytes(serialization.Encoding.PEM),
        mode=_files.PUBLIC_MODE,
        overwrite=overwrite,
        what="certificate",
        error=CertificateError,
    )


def load_certificate(path: str | Path) -> x509.Certificate:
    """The PEM certificate at ``path``; ``CertificateError`` if missing or not a certificate."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CertificateError(f"cannot read certificate {path}: {error.strerror}") from None
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise CertificateError(f"{path} is not a PEM certificate") from None


# -- TLS contexts ---------------------------------------------------------------------------------


def server_context(
    *,
    certificate: str | Path,
    key: str | Path,
    ca: str | Path,
    key_passphrase: bytes | None = None,
) -> ssl.SSLContext:
    """The listening super-peer's context: TLS 1.3 only, its certificate and key, client
    certificates optional but verified against the network CA when presented (see the module
    docstring for why optional, and the check the daemon must make)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _harden(context)
    _load_identity(context, certificate, key, key_passphrase)
    _load_ca(context, ca)
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


def client_context(
    *,
    certificate: str | Path,
    key: str | Path,
    ca: str | Path,
    key_passphrase: bytes | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A super-peer's context for its outgoing backbone links: TLS 1.3 only, presents its own
    certificate, requires the server's to verify against the network CA (and to name the host
    dialled, unless ``check_hostname`` is false). After the handshake, call
    ``check_peer_node_id`` when the node being reached is known."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _harden(context)
    _load_identity(context, certificate, key, key_passphrase)
    _load_ca(context, ca)
    context.check_hostname = check_hostname
    return context


def peer_client_context(
    *,
    ca: str | Path | None = None,
    pinned_fingerprint: str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A peer's context for connecting to its access point, TLS 1.3 only: with ``ca``, the server
    certificate must verify against the network CA (and name the host dialled, unless
    ``check_hostname`` is false); with ``pinned_fingerprint``, the chain is not verified and the
    caller MUST call ``check_pinned_connection(stream, pinned_fingerprint)`` right after the
    handshake. Exactly one of the two."""
    if (ca is None) == (pinned_fingerprint is None):
        raise ValueError("pass exactly one of ca= and pinned_fingerprint=")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _harden(context)
    if ca is not None:
        _load_ca(context, ca)
        context.check_hostname = check_hostname
    else:
        assert pinned_fingerprint is not None
        _parse_pin(pinned_fingerprint, "pinned_fingerprint")
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _harden(context: ssl.SSLContext) -> None:
    """TLS 1.3 only: no downgrade to 1.2 and its weaker suites, static-RSA-free by construction,
    with forward secrecy always. Strict X.509 checking (RFC 5280 conformance)."""
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.maximum_version = ssl.TLSVersion.MAXIMUM_SUPPORTED
    context.verify_flags |= ssl.VERIFY_X509_STRICT


def _load_identity(
    context: ssl.SSLContext, certificate: str | Path, key: str | Path, passphrase: bytes | None
) -> None:
    """Loads the node's certificate and key, after our own checks of the key file (permissions,
    type, size, passphrase) so that a bad key is a clear ``KeyFileError``, not an OpenSSL code."""
    load_private_key(key, passphrase)
    load_certificate(certificate)
    try:
        context.load_cert_chain(os.fspath(certificate), os.fspath(key), passphrase)
    except ssl.SSLError as error:
        raise CertificateError(
            f"certificate {certificate} and key {key} do not go together: {error.reason}"
        ) from None


def _load_ca(context: ssl.SSLContext, ca: str | Path) -> None:
    """Trusts the network CA, and only it."""
    load_certificate(ca)
    context.load_verify_locations(cafile=os.fspath(ca))


# -- checks after the handshake -------------------------------------------------------------------


def check_pinned(der_certificate: bytes | None, pinned_fingerprint: str) -> None:
    """Raises ``CertificateError`` unless the DER certificate's public key has the pinned
    fingerprint. Call it right after the handshake with ``getpeercert(binary_form=True)``."""
    if der_certificate is None:
        raise CertificateError("the server sent no certificate")
    expected = _parse_pin(pinned_fingerprint, "pinned fingerprint")
    try:
        presented = fingerprint(x509.load_der_x509_certificate(der_certificate))
    except ValueError:
        raise CertificateError("the server's certificate does not parse") from None
    if presented != expected:
        raise CertificateError(
            f"the server's key is {presented}, not the pinned {expected}: refusing the connection"
        )


def _parse_pin(pinned_fingerprint: str, name: str) -> str:
    """The canonical form of a pinned fingerprint; ``CertificateError`` naming it ``name`` if it
    is not one."""
    try:
        return parse_public_identifier(pinned_fingerprint)
    except IdentifierError as error:
        raise CertificateError(f"{name}: {error}") from None


def check_pinned_connection(connection: PeerCertificateSource, pinned_fingerprint: str) -> None:
    """``check_pinned`` on the certificate of an established connection."""
    check_pinned(connection.getpeercert(binary_form=True), pinned_fingerprint)


def peer_fingerprint(connection: PeerCertificateSource) -> str:
    """The fingerprint of the key the other end authenticated with in this connection's
    handshake (what ``crypto.identification.Prover`` needs as ``verifier_fingerprint``)."""
    der = connection.getpeercert(binary_form=True)
    if der is None:
        raise CertificateError("the other end sent no certificate")
    return fingerprint(x509.load_der_x509_certificate(der))


def verified_peer_certificate_node_id(connection: PeerCertificateSource) -> str | None:
    """The node id in the other end's certificate if the handshake verified it against the
    network CA; None if it sent none (a peer) or it was not verified (a pinned context).

    ``ssl`` returns a non-empty dict from ``getpeercert()`` only for a verified certificate,
    which is what makes this safe to use for "is this a backbone member?"."""
    if not connection.getpeercert():
        return None
    der = connection.getpeercert(binary_form=True)
    return node_id_of(x509.load_der_x509_certificate(der))


def check_peer_node_id(connection: PeerCertificateSource, expected_node_id: str) -> None:
    """Raises ``CertificateError`` unless the other end's CA-verified certificate is for
    ``expected_node_id``: the CA vouches for every super-peer, this check for the right one."""
    node_id = verified_peer_certificate_node_id(connection)
    if node_id != expected_node_id:
        found = "no CA-verified node certificate" if node_id is None else f"node {node_id!r}"
        raise CertificateError(f"expected node {expected_node_id!r}, the other end is {found}")
