"""Fixtures for the peer's tests: the fake access point on 127.0.0.1 (plaintext, or TLS with
secure identification), TLS identities made once per session, a way to find free ports, and the
``peer`` commands run in-process."""

import socket

import pytest
import trio

import crypto
from peer import cli
from tests.peer.fake_access_point import NODE_ID, FakeAccessPoint, FakeTls
from tests.peer.tls import TlsWorld, make_server


@pytest.fixture
async def access_point(nursery):
    fake = FakeAccessPoint()
    await nursery.start(fake.serve)
    return fake


@pytest.fixture(scope="session")
def tls_world(tmp_path_factory) -> TlsWorld:
    root = tmp_path_factory.mktemp("tls")
    return TlsWorld(
        network=make_server(root / "network", NODE_ID, ca_name="test network CA"),
        rogue=make_server(root / "rogue", NODE_ID, ca_name="rogue CA"),
        peer_keys=tuple(crypto.generate_private_key(2048) for _ in range(2)),
    )


@pytest.fixture
async def tls_access_point(nursery, tls_world):
    """The fake access point over TLS with the network CA's certificate, identifying peers."""
    network = tls_world.network
    fake = FakeAccessPoint(
        tls=FakeTls(network.server_context(), network.node_id, network.fingerprint)
    )
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def run_cli(capsys):
    """``peer`` commands run in a worker thread (they block), with their exit code and output."""

    async def run(*argv: str) -> tuple[int, str, str]:
        code = await trio.to_thread.run_sync(cli.main, list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
