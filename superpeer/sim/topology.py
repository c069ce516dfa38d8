"""The simulated backbone's hypercube, built by running the HyperCuP join protocol itself."""

from __future__ import annotations

from hypercup.testing import Network
from hypercup.view import LocalView


def hypercube_views(ids: list[str], *, seed: int = 0) -> dict[str, LocalView]:
    """Every super-peer's local view after ``ids`` joined in order, each through a member chosen at
    random (seeded), exactly as daemons joining through ``superpeer run --join`` would arrange."""
    network = Network(seed=seed)
    network.create(ids[0])
    for node in ids[1:]:
        network.join(node)
    network.check()
    return {node: network.node(node).view() for node in ids}
