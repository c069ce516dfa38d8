"""Deliveries inside each side of a cut, while it lasts:
``python -m bench.sides [--superpeers 8] [--cuts 10] [--seed 7] [--hold 40] [--reform 6]``.

A cut leaves each side to deliver on its own (issue 33: "each side of a partition keeps
working"). A side can only do so through links between its own members: where the routes
between two of them went through the other side, its members must repair, or re-form
(``superpeer._merging``, "Re-forming"). For each of ``--cuts`` random cuts (halves, or two
sides of a drawn size) of a cube built by the protocol, and each side of two super-peers or
more, a subscriber and a publisher join the two members of that side farthest apart in the
cube; ten seconds into the cut (declared failed by then) the publisher publishes once a
second until ten seconds before the heal. Printed per side: what the subscriber had when the
cut healed, of what was published; then the sum, and the same with re-forming left out
(``reform_seconds`` longer than the cut) as the baseline, measured in the same run. The
simulator's failure timeout (2 s); ``--reform``, its ``reform_seconds``.
"""

from __future__ import annotations

import argparse
import logging
import random
from collections.abc import Sequence

from superpeer.node import NodeConfig
from superpeer.sim import Simulation

BROAD = {"schemas": ["dc", "rdf", "http://example.org/"]}
DC = "http://purl.org/dc/elements/1.1/"


def _publish(n: int) -> dict:
    data = f'<http://example.org/d{n}> <{DC}title> "t{n}" .'
    return {"op": "publish", "peer": "pub", "id": f"n{n}", "format": "turtle", "data": data}


def one_side(
    superpeers: int, groups: list[list[int]], seed: int, side: int, hold: float, reform: float
) -> tuple[int, int, int, int]:
    """(subscriber's super-peer, publisher's, published during the cut, delivered by its end)."""
    config = NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0, reform_seconds=reform)
    simulation = Simulation(superpeers, seed=seed, node_config=config)
    members = groups[side]
    position = {k: min(simulation.nodes[simulation.ids[k]].core.view.positions) for k in members}
    sub, pub = max(
        ((a, b) for a in members for b in members),
        key=lambda pair: (position[pair[0]] ^ position[pair[1]]).bit_count(),
    )
    for op in [
        {"op": "join", "peer": "sub", "superpeer": sub},
        {"op": "join", "peer": "pub", "superpeer": pub},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": "X : t(X, dc:title, T)"},
        {"op": "wait", "seconds": 2},
        {"op": "partition", "groups": groups},
        {"op": "wait", "seconds": 10},
    ]:
        simulation.apply(op)
    cut_at = simulation.now
    published = 0
    while simulation.now - cut_at < hold - 20:
        simulation.apply(_publish(published))
        published += 1
        simulation.apply({"op": "wait", "seconds": 1})
    delivered = len(simulation.deliveries().get("sub", []))
    simulation.close()
    return sub, pub, published, delivered


def measure(superpeers: int, cuts: int, seed: int, hold: float, reform: float) -> dict:
    rng = random.Random(seed)
    rows = []
    for _ in range(cuts):
        size = rng.choice([superpeers // 2, rng.randrange(2, superpeers - 1)])
        members = list(range(superpeers))
        rng.shuffle(members)
        groups = [sorted(members[:size]), sorted(members[size:])]
        network_seed = rng.randrange(100)
        for side in (0, 1):
            if len(groups[side]) < 2:
                continue
            sub, pub, published, delivered = one_side(
                superpeers, groups, network_seed, side, hold, reform
            )
            rows.append(
                {"groups": groups, "seed": network_seed, "side": side, "sub": sub, "pub": pub,
                 "published": published, "delivered": delivered}
            )  # fmt: skip
    return {
        "published": sum(r["published"] for r in rows),
        "delivered": sum(r["delivered"] for r in rows),
        "sides_short": sum(r["delivered"] < r["published"] for r in rows),
        "sides": rows,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sides", description=__doc__)
    parser.add_argument("--superpeers", type=int, default=8)
    parser.add_argument("--cuts", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--hold", type=float, default=40.0)
    parser.add_argument("--reform", type=float, default=6.0)
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the simulated daemons log every failure they see
    baseline = measure(args.superpeers, args.cuts, args.seed, args.hold, args.hold + 60.0)
    row = measure(args.superpeers, args.cuts, args.seed, args.hold, args.reform)
    for side in row["sides"]:
        print(
            f"{side['groups']} seed {side['seed']} side {side['side']} "
            f"sub@{side['sub']} pub@{side['pub']}: {side['delivered']}/{side['published']}"
        )
    print(
        f"{args.superpeers} super-peers, {args.cuts} cuts of {args.hold:g} s: delivered during "
        f"the cut {row['delivered']} of {row['published']} ({row['sides_short']} sides short); "
        f"without re-forming {baseline['delivered']} of {baseline['published']} "
        f"({baseline['sides_short']} sides short)"
    )


if __name__ == "__main__":
    main()
