"""What an fsync costs on a worker thread against the trio thread (``superpeer._commits``,
``[store] inline_sync_seconds``; issue 37).

A 2 KiB write (a redo frame's size for one notification) and its ``fdatasync``, ``--ops`` times,
in a trio loop: the ``fdatasync`` handed to a worker thread (``trio.to_thread.run_sync``, as
group commit did for every sync), run on the trio thread, and a worker thread handed nothing
(the hand-off alone). CPU (this process, all threads) and wall time per operation, each mode run
``--rounds`` times in turn, the best kept; the ratio of the thread's CPU to the trio thread's.

    python -m bench.handoff --ops 2000 --rounds 3 [--directory DIR]

``--directory``: where the file is written (the disk measured; default: this directory)."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import trio

FRAME = b"x" * 2048
MODES = ("worker thread", "trio thread", "hand-off alone")


def _nothing() -> None:
    """A job that does nothing: what the hand-off costs alone."""


async def _run(mode: str, fd: int, ops: int) -> tuple[float, float]:
    """CPU and wall seconds per operation of ``ops`` in ``mode``."""
    cpu, wall = time.process_time(), time.perf_counter()
    for k in range(ops):
        os.pwrite(fd, FRAME, (k % 64) * 4096)
        if mode == "worker thread":
            await trio.to_thread.run_sync(os.fdatasync, fd)
        elif mode == "trio thread":
            os.fdatasync(fd)
            await trio.lowlevel.checkpoint()
        else:
            await trio.to_thread.run_sync(_nothing)
    return (time.process_time() - cpu) / ops, (time.perf_counter() - wall) / ops


def measure(ops: int, rounds: int, directory: str) -> dict[str, tuple[float, float]]:
    """Per mode, the best round's CPU and wall seconds per operation."""
    best: dict[str, tuple[float, float]] = {}
    with tempfile.NamedTemporaryFile(dir=directory) as file:
        for _ in range(rounds):
            for mode in MODES:
                cpu, wall = trio.run(_run, mode, file.fileno(), ops)
                old = best.get(mode)
                best[mode] = (cpu, wall) if old is None else (min(old[0], cpu), min(old[1], wall))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--directory", default=".")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}; {args.ops} ops, best of {args.rounds}")
    best = measure(args.ops, args.rounds, args.directory)
    print("| mode | CPU us / op | wall us / op |")
    print("| --- | ---: | ---: |")
    for mode, (cpu, wall) in best.items():
        print(f"| {mode} | {cpu * 1e6:.1f} | {wall * 1e6:.1f} |")
    ratio = best["worker thread"][0] / best["trio thread"][0]
    print(f"\nfsync on a worker thread / on the trio thread, CPU: {ratio:.2f}x")


if __name__ == "__main__":
    main()
