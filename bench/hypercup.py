"""HyperCuP against the alternatives the paper names: ``python -m bench.hypercup [--json]``.

The default sizes are the powers of two from 16 to 1024 and the sizes just below them: at N = 2**d
the cube is full and every super-peer has d neighbours; at N = 2**d - 1 one column is left doubled,
and its holder has the most neighbours the shape allows, 2(d - 1) (the mean stays about log2 N).

For each N the cube is built by N - 1 joins through the protocol (``hypercup.testing.Network``,
random contacts, seeded), then measured:

* messages per join: over the joins that took the network from N/2 to N members (they include
  the one grow at N/2 + 1, N/2 - 1 messages);
* messages per leave, and per failure: over N/2 + 1 announced leaves of random members, and
  separately over N/2 + 1 failures, from N down to N/2 - 1 (each run includes the one shrink);
* neighbours per super-peer (max, mean) and the diameter (networkx, exact);
* broadcast: messages on the wire and depth, from every root when N <= 256, else from 64 seeded
  roots (the same roots for the three topologies, plus one end of the chain).

Beside it, in the same run: a random connected graph (networkx ``gnm``, seeded, redrawn until
connected) with the cube's average degree, broadcasting by reverse-path forwarding (a node accepts
a message from its neighbour on a shortest path to the root, the lowest id on ties, and forwards it
to every neighbour but that one; messages are counted as they are sent, accepted or not; the depth
is the hop count of the last acceptance), and a chain, where a broadcast is the same forwarding.
Their joins and leaves are not protocols this run executes; the figures given are what they cost
by construction (random graph: a newcomer links to as many members as the average degree, a leaver
says goodbye to each neighbour; chain: a newcomer is inserted after its contact and a leaver links
its two neighbours, two messages each).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence

import networkx as nx

from bench.columns import aligned
from hypercup import Topology
from hypercup.testing import Network, OperationStats

DEFAULT_SIZES = (16, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512, 1023, 1024)
ALL_ROOTS_UP_TO = 256
SAMPLED_ROOTS = 64

Figures = dict[str, object]


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(values), 2), "max": max(values)}


def _degrees(graph: nx.Graph) -> dict[str, float]:
    degrees = [d for _, d in graph.degree()]
    return {"max": max(degrees), "mean": round(statistics.fmean(degrees), 2)}


def _teardown(network: Network, depart: Callable[[str], OperationStats], seed: int) -> list[int]:
    """Departures of random members from N down to N/2 - 1; the messages of each."""
    rng = random.Random(seed)
    target = len(network.members) // 2 - 1
    costs = []
    while len(network.members) > target:
        costs.append(depart(rng.choice(network.members)).messages)
    network.check()
    return costs


def _built(n: int, seed: int) -> tuple[Network, list[int]]:
    """N - 1 joins through random members (the same network for the same seed), and the messages
    of the joins from N/2 members on."""
    network = Network(seed=seed)
    network.create("s0")
    joins = []
    for i in range(1, n):
        stats = network.join(f"s{i}")
        if i >= n // 2:
            joins.append(stats.messages)
    return network, joins


def _hypercup(n: int, seed: int, roots: Sequence[int]) -> tuple[Figures, float]:
    """The cube's figures, and its mean number of neighbours (for the random graph)."""
    network, joins = _built(n, seed)
    topology = network.check()
    leaving, _ = _built(n, seed)
    leaves = _teardown(leaving, leaving.leave, seed)
    failing, _ = _built(n, seed)
    failures = _teardown(failing, failing.fail, seed)
    graph = topology.graph()
    degrees = _degrees(graph)
    figures: Figures = {
        "join": _summary(joins),
        "leave": _summary(leaves),
        "failure": _summary(failures),
        "neighbours": degrees,
        "diameter": nx.diameter(graph),
        "broadcast": _tree_broadcasts(topology, [f"s{r}" for r in roots]),
    }
    return figures, float(degrees["mean"])


def _tree_broadcasts(topology: Topology, roots: Sequence[str]) -> dict[str, float]:
    messages, depths = [], []
    for root in roots:
        sent = topology.broadcast(root)
        depth = {root: 0}
        for sender, receiver in sent:
            depth[receiver] = depth[sender] + 1
        messages.append(len(sent))
        depths.append(max(depth.values()))
    return {**_summary(messages), "depth": max(depths)}


def reverse_path_forwarding(graph: nx.Graph, root: int) -> tuple[int, int]:
    """Messages sent and depth reached when ``root`` broadcasts by reverse-path forwarding."""
    distance = nx.single_source_shortest_path_length(graph, root)
    upstream = {
        node: min(m for m in graph[node] if distance[m] == distance[node] - 1)
        for node in graph
        if node != root
    }
    sent = 0
    depth = 0
    accepted = {root}
    queue = deque((root, neighbour, 1) for neighbour in graph[root])
    sent += len(queue)
    while queue:
        sender, node, hops = queue.popleft()
        if node in accepted or upstream[node] != sender:
            continue
        accepted.add(node)
        depth = max(depth, hops)
        for neighbour in graph[node]:
            if neighbour != sender:
                queue.append((node, neighbour, hops + 1))
                sent += 1
    assert len(accepted) == graph.number_of_nodes()
    return sent, depth


def _forwarding(graph: nx.Graph, roots: Sequence[int]) -> dict[str, float]:
    results = [reverse_path_forwarding(graph, root) for root in roots]
    return {
        **_summary([sent for sent, _ in results]),
        "depth": max(depth for _, depth in results),
    }


def _random_graph(n: int, mean_degree: float, seed: int, roots: Sequence[int]) -> Figures:
    edges = round(n * mean_degree / 2)
    attempt = seed
    graph = nx.gnm_random_graph(n, edges, seed=attempt)
    while not nx.is_connected(graph):
        attempt += 1
        graph = nx.gnm_random_graph(n, edges, seed=attempt)
    degrees = _degrees(graph)
    degree = round(float(degrees["mean"]), 2)
    return {
        "join": {"mean": degree, "max": degree},
        "leave": {"mean": degree, "max": degrees["max"]},
        "failure": None,
        "neighbours": degrees,
        "diameter": nx.diameter(graph),
        "broadcast": _forwarding(graph, roots),
        "graph_seed": attempt,
    }


def _chain(n: int, roots: Sequence[int]) -> Figures:
    graph = nx.path_graph(n)
    return {
        "join": {"mean": 2, "max": 2},
        "leave": {"mean": 2, "max": 2},
        "failure": None,
        "neighbours": _degrees(graph),
        "diameter": n - 1,
        "broadcast": _forwarding(graph, [*roots, 0]),
    }


def measure(n: int, seed: int) -> dict[str, object]:
    """Every figure for N = ``n``."""
    rng = random.Random(seed)
    roots = list(range(n)) if n <= ALL_ROOTS_UP_TO else sorted(rng.sample(range(n), SAMPLED_ROOTS))
    hypercup, mean_degree = _hypercup(n, seed, roots)
    return {
        "n": n,
        "roots": "all" if n <= ALL_ROOTS_UP_TO else f"{SAMPLED_ROOTS} sampled",
        "hypercup": hypercup,
        "random": _random_graph(n, mean_degree, seed, roots),
        "chain": _chain(n, roots),
    }


def _cell(figures: object, *keys: str) -> str:
    if figures is None:
        return "-"
    assert isinstance(figures, dict)
    return "/".join(
        f"{figures[k]:g}" if isinstance(figures[k], float) else str(figures[k]) for k in keys
    )


def table(results: Sequence[dict[str, object]]) -> str:
    header = (
        "N",
        "topology",
        "join mean/max",
        "leave mean/max",
        "failure mean/max",
        "nbrs max/mean",
        "diameter",
        "bcast msgs mean/max",
        "bcast depth",
        "roots",
    )
    rows = [header]
    for result in results:
        for name in ("hypercup", "random", "chain"):
            figures = result[name]
            assert isinstance(figures, dict)
            rows.append(
                (
                    str(result["n"]),
                    name,
                    _cell(figures["join"], "mean", "max"),
                    _cell(figures["leave"], "mean", "max"),
                    _cell(figures["failure"], "mean", "max"),
                    _cell(figures["neighbours"], "max", "mean"),
                    str(figures["diameter"]),
                    _cell(figures["broadcast"], "mean", "max"),
                    str(figures["broadcast"]["depth"]),  # type: ignore[index]
                    str(result["roots"]),
                )
            )
    return aligned(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hypercup", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="comma-separated network sizes (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    arguments = parser.parse_args(argv)
    sizes = [int(size) for size in arguments.sizes.split(",")]
    if any(size < 4 for size in sizes):
        parser.error("sizes must be at least 4")
    started = time.perf_counter()
    results = [measure(size, arguments.seed) for size in sizes]
    elapsed = round(time.perf_counter() - started, 1)
    if arguments.json:
        print(json.dumps({"seed": arguments.seed, "seconds": elapsed, "results": results}))
    else:
        print(table(results))
        print(
            f"\nseed {arguments.seed}, {elapsed} s. Random-graph and chain joins and leaves are "
            "costs by construction, not measured runs (see the module docstring)."
        )


if __name__ == "__main__":
    main()
