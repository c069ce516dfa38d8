"""Bulk publication on real processes (``peer.bulk``, ``peer.jobs``): a catalogue larger than one
batch published by ``peer publish`` to the real super-peer, interrupted twice (the command killed,
then the publisher's daemon killed), resumed by running the same command again; the subscriber's
inbox holds each resource exactly once."""

from __future__ import annotations

import json
import signal
import sys

import pytest
import trio

from tests.peer.test_process import (  # noqa: F401 (processes: the fixture)
    ROOT,
    follow_inbox,
    free_port,
    peer,
    pin_of,
    processes,
)

pytestmark = [pytest.mark.process, pytest.mark.slow]  # about 30 s on 2 shared cores
RESOURCES = 3000
BATCH = ("--batch-resources", "200", "--batch-bytes", "65536")
BOOK = '<http://library.example.org/b{n:05d}> a dc:book ; dc:title "RDF book {n}" .\n'
QUERY = 'X : t(X, dc:title, T), T contains "RDF"'


def catalogue(count: int, first: int = 0) -> str:
    lines = ["@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"]
    lines += [BOOK.format(n=n) for n in range(first, first + count)]
    lines.append('_:x dc:title "a blank subject: refused here" .\n')
    return "".join(lines)


async def inbox(data_dir) -> list[dict]:
    done = await peer(data_dir, "inbox", "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


async def test_an_interrupted_catalogue_is_resumed_and_delivered_exactly_once(tmp_path, processes):  # noqa: F811
    port = free_port()
    await processes.superpeer(tmp_path / "sp", port)
    address, pin = f"127.0.0.1:{port}", pin_of(tmp_path / "sp")
    for name in ("reader", "library"):
        assert (await peer(tmp_path / name, "keygen", "--bits", "2048")).returncode == 0
    reader = await processes.peer(tmp_path / "reader", address, "--pin", pin, "--no-ui")
    library = await processes.peer(tmp_path / "library", address, "--pin", pin, "--no-ui")
    await reader.wait_for("registered=True")
    await library.wait_for("registered=True")
    assert (await peer(tmp_path / "reader", "subscribe", QUERY, "--id", "s1")).returncode == 0
    (tmp_path / "ad.json").write_text('{"schemas": ["dc"]}')
    assert (
        await peer(tmp_path / "library", "advertise", str(tmp_path / "ad.json"))
    ).returncode == 0
    document = tmp_path / "catalogue.ttl"
    document.write_text(catalogue(RESOURCES))
    command = (
        "peer.cli",
        "publish",
        str(document),
        *BATCH,
        "--data-dir",
        str(tmp_path / "library"),
    )

    # 1. the command is killed after a few batches
    first = await processes.start("publish-1", *command)
    await first.wait_for("resources, ", 3)
    first.process.send_signal(signal.SIGKILL)
    await first.process.wait()

    # 2. run again, it goes on; the publisher's daemon is killed under it
    second = await processes.start("publish-2", *command)
    await second.wait_for("resources, ", 3)
    assert " 0/3,000 " not in second.lines[1], "the second run starts after the first's batches"
    await processes.stop(library, signal.SIGKILL)
    with trio.fail_after(60):
        assert await second.process.wait() == 3
    await second.wait_for("run the same command again to go on")

    # 3. the daemon back, the same command finishes the job
    library = await processes.peer(tmp_path / "library", address, "--pin", pin, "--no-ui")
    await library.wait_for("event=connected")
    with trio.fail_after(120):
        done = await trio.run_process(
            [sys.executable, "-m", *command],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    report = done.stdout.decode()
    assert done.returncode == 1, done.stderr  # one resource refused (its subject is blank)
    assert f"published {RESOURCES:,} of {RESOURCES + 1:,} resources in 15 batches" in report
    assert "refused 1: a blank node is the subject: a resource needs a URI (<_:" in report

    # 4. a marker after everything: once it arrives, every repeat the resends made has too
    marker = tmp_path / "marker.ttl"
    marker.write_text(
        catalogue(1, first=RESOURCES).replace("_:x", "<http://library.example.org/m>")
    )
    assert (await peer(tmp_path / "library", "publish", str(marker))).returncode == 0
    await follow_inbox(processes, tmp_path / "reader", RESOURCES + 1)
    records = await inbox(tmp_path / "reader")
    titles = sorted(r["publication"] for r in records)
    assert len(titles) == len(set(titles)) == RESOURCES + 1, "each resource exactly once"
    assert {(r["version"], r["kind"]) for r in records} == {(0, "added")}

    # 5. the same command once more sends nothing
    done = await peer(tmp_path / "library", "publish", str(document), *BATCH)
    assert "nothing left to send" in done.stdout.decode()
