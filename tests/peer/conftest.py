"""Fixtures for the peer's tests: a fake access point on 127.0.0.1 and a way to find free ports."""

import socket

import pytest

from tests.peer.fake_access_point import FakeAccessPoint


@pytest.fixture
async def access_point(nursery):
    fake = FakeAccessPoint()
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
