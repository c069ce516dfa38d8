"""``python -m superpeer.sim.generate`` writes a digital-library workload (JSON lines) to stdout.

    python -m superpeer.sim.generate --superpeers 16 --peers 40 --subscriptions 200 \\
        --publications 100 [--publishers 0.3] [--churn 0.05] [--unsubscribe 0.05] [--seed 1]

Peers join uniformly random access points; a share of them publish, each advertising exactly what
its own documents need (one of the three levels, chosen at random), and every peer subscribes.
Subscriptions come first, then publications interleaved with churn: detach/attach of random peers and
unsubscriptions, so offline storage and SIENA unsubscription are exercised. Seeded: the same
arguments always write the same workload.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator

from workloads.digital_library import DigitalLibrary


def generate(
    *,
    superpeers: int,
    peers: int,
    subscriptions: int,
    publications: int,
    publishers: float = 0.3,
    churn: float = 0.05,
    unsubscribe: float = 0.05,
    seed: int = 0,
) -> Iterator[dict]:
    rng = random.Random(seed)
    library = DigitalLibrary(seed=seed)
    names = [f"peer{i}" for i in range(peers)]
    for name in names:
        yield {"op": "join", "peer": name, "superpeer": rng.randrange(superpeers)}
    publishing = names[: max(1, round(peers * publishers))]
    documents: dict[str, list[dict]] = {name: [] for name in publishing}
    for number in range(publications):
        publisher = rng.randrange(len(publishing))
        documents[publishing[publisher]].append(
            library.document(number, group=publisher, groups=len(publishing))
        )
    for name in publishing:
        yield {"op": "advertise", "peer": name, **library.advertisement(documents[name])}
    live: list[tuple[str, str]] = []
    for number in range(subscriptions):
        name = rng.choice(names)
        sid = f"q{number}"
        live.append((name, sid))
        yield {"op": "subscribe", "peer": name, "id": sid, "query": library.subscription()}
    queue = [(name, doc) for name, docs in documents.items() for doc in docs]
    rng.shuffle(queue)
    detached: set[str] = set()
    for name, document in queue:
        if rng.random() < churn:
            peer = rng.choice(names)
            if peer in detached:
                detached.discard(peer)
                yield {"op": "attach", "peer": peer}
            elif peer not in publishing or peer != name:
                detached.add(peer)
                yield {"op": "detach", "peer": peer}
        if live and rng.random() < unsubscribe:
            peer, sid = live.pop(rng.randrange(len(live)))
            if peer not in detached:
                yield {"op": "unsubscribe", "peer": peer, "id": sid}
            else:
                live.append((peer, sid))
        if name in detached:
            detached.discard(name)
            yield {"op": "attach", "peer": name}
        yield {
            "op": "publish",
            "peer": name,
            "id": str(document["uri"]).removeprefix("lib:"),
            "format": "turtle",
            "data": library.turtle(document),
        }
    for peer in sorted(detached):
        yield {"op": "attach", "peer": peer}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m superpeer.sim.generate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--superpeers", type=int, default=16)
    parser.add_argument("--peers", type=int, default=40)
    parser.add_argument("--subscriptions", type=int, default=200)
    parser.add_argument("--publications", type=int, default=100)
    parser.add_argument("--publishers", type=float, default=0.3, help="share of peers that publish")
    parser.add_argument(
        "--churn", type=float, default=0.05, help="chance of a detach/attach per publication"
    )
    parser.add_argument(
        "--unsubscribe",
        type=float,
        default=0.05,
        help="chance of an unsubscription per publication",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.superpeers < 1 or args.peers < 1:
        parser.error("--superpeers and --peers must be at least 1")
    for op in generate(
        superpeers=args.superpeers,
        peers=args.peers,
        subscriptions=args.subscriptions,
        publications=args.publications,
        publishers=args.publishers,
        churn=args.churn,
        unsubscribe=args.unsubscribe,
        seed=args.seed,
    ):
        sys.stdout.write(json.dumps(op) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
