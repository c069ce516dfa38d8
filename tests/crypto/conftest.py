"""Keys, a network CA and super-peer certificates made once per session (2048-bit keys: the
minimum the policy accepts, and fast to generate), on disk where the TLS contexts need files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from crypto import init_ca, issue_certificate, save_certificate, save_private_key
from crypto.keys import generate_private_key


@dataclass(frozen=True)
class NodeFiles:
    """A super-peer's identity on disk, and the CA that signed it."""

    node_id: str
    key: rsa.RSAPrivateKey
    key_path: Path
    cert_path: Path
    ca_path: Path


@pytest.fixture(scope="session")
def peer_key() -> rsa.RSAPrivateKey:
    return generate_private_key(2048)


@pytest.fixture(scope="session")
def other_peer_key() -> rsa.RSAPrivateKey:
    return generate_private_key(2048)


@pytest.fixture(scope="session")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("network-ca")
    init_ca(directory, name="test network CA", key=generate_private_key(2048))
    return directory


@pytest.fixture(scope="session")
def other_ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("other-ca")
    init_ca(directory, name="someone else's CA", key=generate_private_key(2048))
    return directory


def make_node(ca: Path, directory: Path, node_id: str) -> NodeFiles:
    key = generate_private_key(2048)
    key_path = save_private_key(key, directory / f"{node_id}.key")
    certificate = issue_certificate(ca, node_key=key, node_id=node_id)
    cert_path = save_certificate(certificate, directory / f"{node_id}.pem")
    return NodeFiles(node_id, key, key_path, cert_path, ca / "ca-cert.pem")


@pytest.fixture(scope="session")
def node_a(ca_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> NodeFiles:
    return make_node(ca_dir, tmp_path_factory.mktemp("sp-a"), "sp-a")


@pytest.fixture(scope="session")
def node_b(ca_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> NodeFiles:
    return make_node(ca_dir, tmp_path_factory.mktemp("sp-b"), "sp-b")


@pytest.fixture(scope="session")
def intruder(other_ca_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> NodeFiles:
    """A would-be super-peer whose certificate another CA signed (with a node id we know)."""
    return make_node(other_ca_dir, tmp_path_factory.mktemp("intruder"), "sp-b")
