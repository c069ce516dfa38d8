"""Keys and certificates for the peer's TLS tests: a network CA with the fake access point's
certificate, a rogue CA with a certificate for the same node id, and peer keys (2048 bits: the
smallest the policy accepts, so the tests stay fast)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import rsa

import crypto


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """A super-peer's TLS identity: its node id, key and certificate, and its CA's certificate."""

    node_id: str
    key: rsa.RSAPrivateKey
    key_path: Path
    certificate: Path
    ca: Path

    @property
    def fingerprint(self) -> str:
        return crypto.fingerprint(self.key)

    def server_context(self) -> ssl.SSLContext:
        return crypto.server_context(certificate=self.certificate, key=self.key_path, ca=self.ca)


def make_server(directory: Path, node_id: str, *, ca_name: str) -> ServerIdentity:
    """A new CA in ``directory`` and a certificate from it for ``node_id`` on 127.0.0.1."""
    ca_directory = directory / "ca"
    crypto.init_ca(ca_directory, name=ca_name, bits=2048)
    key = crypto.generate_private_key(2048)
    key_path = crypto.save_private_key(key, directory / "key.pem")
    certificate = crypto.issue_certificate(
        ca_directory, node_key=key, node_id=node_id, hosts=("127.0.0.1", "localhost")
    )
    certificate_path = crypto.save_certificate(certificate, directory / "cert.pem")
    return ServerIdentity(node_id, key, key_path, certificate_path, ca_directory / "ca-cert.pem")


@dataclass(frozen=True, slots=True)
class TlsWorld:
    network: ServerIdentity
    """The fake access point's identity, certified by the network CA (``network.ca``)."""
    rogue: ServerIdentity
    """Another CA, with a certificate for the same node id: what a peer must not trust."""
    peer_keys: tuple[rsa.RSAPrivateKey, ...]

    def install_key(self, data_dir: Path, index: int = 0) -> str:
        """Saves peer key ``index`` where the daemon looks for it; returns its public id."""
        key = self.peer_keys[index]
        identity = data_dir / "identity"
        identity.mkdir(mode=0o700, parents=True, exist_ok=True)
        crypto.save_private_key(key, identity / "key.pem")
        return crypto.public_identifier(key)
