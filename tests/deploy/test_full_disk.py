"""A super-peer whose data directory fills up (issue 38), on real daemons and a small tmpfs.

The daemon keeps notifications for a detached subscriber until its disk is nearly full: it
pauses (its peers hear why, ``/readyz`` says 503 and why), goes on by itself once space is back,
and the subscriber then gets every acknowledged notification once; in a cube, its neighbour
repairs around it meanwhile and it rejoins. Without a reserve, the write that finds the disk
full stops it, saying which file and how much space is left; it does not start again while the
disk is full, and once there is room it delivers every acknowledged notification once. A peer
daemon whose inbox's disk fills stops, says why, and loses nothing. Mounting a tmpfs needs root:
without it, or when the mount fails, the tests are skipped and say why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import qel
from deploy.chaos import SUPERPEER_SETTINGS
from deploy.cluster import Cluster, free_ports
from deploy.driver import DriverError, RemotePeer, cube_problems, quiet_problems, wait_quiet
from superpeer.cli import control
from superpeer.trace import TraceRecord
from superpeer.tracelog import TraceLog
from wire import messages as m

pytestmark = pytest.mark.process

DISK_BYTES = 2 * 1024 * 1024
BALLAST_BYTES = 768 * 1024
"""Taken from the disk before the daemon starts, given back to free space."""
RESERVE = "[store]\nmin_free_bytes = {low}\nresume_free_bytes = {high}\ndisk_check_seconds = 0.2\n"
TITLE = "http://purl.org/dc/elements/1.1/title"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted afterwards, with a ballast file that takes part of it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    try:
        (disk / "ballast").write_bytes(b"\0" * BALLAST_BYTES)
        yield disk
    finally:
        unmount(disk)


def unmount(disk: Path) -> None:
    """Unmount ``disk`` (lazily if a process a failed test left behind still holds it)."""
    if subprocess.run(["umount", str(disk)], capture_output=True, check=False).returncode:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


class Daemon:
    """One super-peer process on ``data`` (without TLS: what is tested is the disk), its stderr
    beside the disk, its operator endpoint on."""

    def __init__(self, data: Path, logs: Path, settings: str) -> None:
        self.data = data
        self.stderr = logs / "stderr.log"
        config = logs / "superpeer.toml"
        config.write_text("[security]\ntls = false\n" + settings)
        port, http = free_ports(2)
        self.address = f"127.0.0.1:{port}"
        self.http = f"http://127.0.0.1:{http}"
        with self.stderr.open("ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "superpeer.cli", "run", "--listen", self.address,
                 "--data-dir", str(data), "--node-id", "sp0", "--config", str(config),
                 "--http", f"127.0.0.1:{http}"],
                stdout=subprocess.PIPE, stderr=stderr,
            )  # fmt: skip
        assert self.process.stdout is not None
        while line := self.process.stdout.readline():
            if b"listening on" in line:
                break

    @property
    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

    def ready(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.http + "/readyz", timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    async def status(self) -> dict:
        return json.loads((await control(self.data, "status")).body)

    def wait(self) -> int:
        """Its exit code, once it exited."""
        code = self.process.wait(30)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        return self.wait()


def publication(peer: RemotePeer, number: int, size: int = 2000) -> m.Publish:
    text = f'<http://example.org/{number}> <{TITLE}> "{"x" * size} {number}" .'
    [item] = qel.parse_publications(text, "nt", publisher=peer.network_id, id=f"n{number}")
    return m.Publish(publication=item)


async def publish_until_refused(publisher: RemotePeer, acknowledged: list[str]) -> str:
    """Publish until a request is not answered; why the connection ended."""
    for number in range(len(acknowledged), 10_000):
        try:
            answer = await publisher.request(publication(publisher, number))
        except DriverError:
            return str(publisher._ended)
        assert isinstance(answer, m.Ack), answer
        acknowledged.append(f"n{number}")
    raise AssertionError("the disk never filled up")


async def subscriber_and_publisher(daemon: Daemon, nursery: trio.Nursery) -> tuple:
    subscriber = RemotePeer("subscriber", daemon.address)
    publisher = RemotePeer("publisher", daemon.address)
    await subscriber.connect(nursery)
    await publisher.connect(nursery)
    advertisement = qel.parse_advertisement({"schemas": ["dc"]})
    assert isinstance(await publisher.request(m.Advertise(advertisement=advertisement)), m.Ack)
    subscription = qel.parse_subscription("X : t(X, dc:title, T)")
    assert isinstance(
        await subscriber.request(m.Subscribe(id="s", subscription=subscription)), m.Ack
    )
    await subscriber.disconnect()  # what it is owed is kept on the disk
    return subscriber, publisher


async def every_acknowledged_once(
    daemon: Daemon, subscriber: RemotePeer, acknowledged: list[str], nursery: trio.Nursery
) -> None:
    """The subscriber comes back: once the daemon has nothing left to deliver, it holds every
    acknowledged notification, each once (and at most the one left in doubt besides)."""
    await subscriber.connect(nursery, daemon.address)
    with trio.fail_after(60):
        while quiet_problems([status := await daemon.status()]) or status["mail"]["kept"]:
            await trio.sleep(0.05)
    received = [n.publication.id for n in subscriber.notifications]
    assert subscriber.redeliveries == 0 and len(received) == len(set(received))
    assert set(acknowledged) <= set(received)
    assert len(received) - len(acknowledged) <= 1  # the request whose answer never came


@pytest.mark.slow
def test_a_nearly_full_disk_pauses_the_super_peer_until_space_is_back(small_disk, tmp_path):
    low, high = 384 * 1024, 768 * 1024
    daemon = Daemon(small_disk / "sp0", tmp_path, RESERVE.format(low=low, high=high))
    acknowledged: list[str] = []

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            subscriber, publisher = await subscriber_and_publisher(daemon, nursery)
            reason = await publish_until_refused(publisher, acknowledged)
            assert "the disk of the data directory is nearly full" in reason, reason
            assert f"less than store.min_free_bytes ({low})" in reason, reason
            code, why = daemon.ready()
            assert code == 503 and "paused: the disk of the data directory" in why, why
            disk = (await daemon.status())["disk"]
            assert disk["paused"] and disk["free_bytes"] < low <= disk["total_bytes"], disk
            shown = subprocess.run(
                [sys.executable, "-m", "superpeer.cli", "status", "--data-dir", str(daemon.data)],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            assert f"paused below {low}; PAUSED: the disk of the data directory" in shown, shown
            with pytest.raises(DriverError, match="nearly full"):  # a new connection: why
                await RemotePeer("newcomer", daemon.address).connect(nursery)
            (small_disk / "ballast").unlink()  # space is back: it goes on by itself
            with trio.fail_after(30):
                while daemon.ready()[0] != 200:
                    await trio.sleep(0.05)
            await publisher.connect(nursery)
            for number in range(len(acknowledged) + 1, len(acknowledged) + 4):
                assert isinstance(await publisher.request(publication(publisher, number)), m.Ack)
                acknowledged.append(f"n{number}")
            await every_acknowledged_once(daemon, subscriber, acknowledged, nursery)
            nursery.cancel_scope.cancel()

    try:
        trio.run(scenario)
    finally:
        assert daemon.stop() == 0
    assert len(acknowledged) > 10
    assert "event=disk_full node=sp0 action=paused" in daemon.log
    assert "event=disk_space_back node=sp0 action=resumed" in daemon.log


@pytest.mark.slow
def test_a_write_that_finds_the_disk_full_stops_the_super_peer_saying_why(small_disk, tmp_path):
    """No reserve to speak of (1 byte): the commit that finds the disk full stops the daemon
    (exit 4) with the file and the space left; started again, it refuses while the disk is
    short of its reserve; with room, it delivers every acknowledged notification once."""
    data = small_disk / "sp0"
    daemon = Daemon(data, tmp_path, RESERVE.format(low=1, high=1))
    acknowledged: list[str] = []

    async def fill() -> RemotePeer:
        async with trio.open_nursery() as nursery:
            subscriber, publisher = await subscriber_and_publisher(daemon, nursery)
            await publish_until_refused(publisher, acknowledged)
            nursery.cancel_scope.cancel()
        return subscriber

    subscriber = trio.run(fill)
    assert daemon.wait() == 4
    assert len(acknowledged) > 10
    [said] = [line for line in daemon.log.splitlines() if line.startswith("superpeer: ")]
    assert f"the store could not write {data / 'state.sqlite'}" in said, said
    assert "database or disk is full" in said and "bytes free of 2097152" in said, said
    assert "stopped, having sent nothing it had not made durable" in said, said

    refused = Daemon(data, tmp_path, RESERVE.format(low=384 * 1024, high=384 * 1024))
    assert refused.wait() == 4
    assert "superpeer: not starting: the disk of the data directory is nearly full" in refused.log

    (small_disk / "ballast").unlink()
    again = Daemon(data, tmp_path, RESERVE.format(low=384 * 1024, high=384 * 1024))

    async def deliver() -> None:
        async with trio.open_nursery() as nursery:
            await every_acknowledged_once(again, subscriber, acknowledged, nursery)
            nursery.cancel_scope.cancel()

    try:
        trio.run(deliver)
    finally:
        assert again.stop() == 0


@pytest.mark.slow
def test_a_peer_daemon_whose_disk_fills_stops_saying_why_and_loses_nothing(small_disk, tmp_path):
    """The peer's inbox on the small disk: the record it cannot write stops the daemon, which
    says which file and how much space is left; it acknowledged only what it wrote, so its
    access point keeps the rest, and started again with room the peer has every notification
    once."""
    data, log = small_disk / "peer", tmp_path / "peer.log"

    def peer(*arguments: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "peer.cli", *arguments, "--data-dir", str(data)]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    with Cluster(1, directory=tmp_path / "cluster") as cluster:
        trust = ["--ca", str(cluster.ca_certificate)]

        def start() -> subprocess.Popen[bytes]:
            run = ["run", "--superpeer", cluster.addresses[0], *trust, "--data-dir", str(data)]
            with log.open("ab") as output:
                daemon = subprocess.Popen(
                    [sys.executable, "-m", "peer.cli", *run], stdout=output, stderr=output
                )
            while daemon.poll() is None:
                status = peer("status", "--json")
                if status.returncode == 0 and json.loads(status.stdout).get("connected"):
                    return daemon
            raise AssertionError(log.read_text())

        assert peer("keygen", "--bits", "2048").returncode == 0
        daemon = start()
        assert peer("subscribe", "--id", "s", "X : t(X, dc:title, T)").returncode == 0
        free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        (small_disk / "more ballast").write_bytes(b"\0" * (free - 160 * 1024))
        acknowledged: list[str] = []

        async def publish() -> str:
            async with trio.open_nursery() as nursery:
                publisher = RemotePeer("publisher", cluster.addresses[0], ca=cluster.ca_certificate)
                await publisher.connect(nursery)
                advertisement = qel.parse_advertisement({"schemas": ["dc"]})
                await publisher.request(m.Advertise(advertisement=advertisement))
                for number in range(60):
                    answer = await publisher.request(publication(publisher, number, 6000))
                    assert isinstance(answer, m.Ack), answer
                    acknowledged.append(f"n{number}")
                await wait_quiet(cluster, [publisher])
                nursery.cancel_scope.cancel()
            return publisher.network_id

        trio.run(publish)
        assert daemon.wait(30) == 1
        [said] = [line for line in log.read_text().splitlines() if line.startswith("peer: ")]
        assert f"the daemon stopped: could not write {data}/" in said, said  # a record, state
        assert "No space left on device" in said and "bytes free of 2097152" in said, said
        assert "the access point keeps what was not written" in said, said
        kept = cluster.status(0)["mail"]["kept"]
        assert sum(kept.values()) > 0, kept

        (small_disk / "more ballast").unlink()
        daemon = start()
        try:
            trio.run(wait_quiet, cluster, [])
            assert not cluster.status(0)["mail"]["kept"]
            inbox = [json.loads(line) for line in peer("inbox", "--json").stdout.splitlines()]
        finally:
            daemon.terminate()
            daemon.wait(30)
    assert sorted(record["publication"] for record in inbox) == sorted(acknowledged)
    stored = [line for line in log.read_text().splitlines() if "event=notification " in line]
    assert len(stored) == len(acknowledged)  # each once (a repeat is ignored, not stored)


@pytest.mark.slow
def test_a_paused_super_peer_is_repaired_around_and_rejoins_losing_nothing(tmp_path):
    """Two super-peers; sp1's data directory is the small disk. It pauses with mail kept for
    its detached subscriber while sp0's publisher goes on; past the failure timeout sp0 repairs
    the cube without it (as after a SIGSTOP); with space back it rejoins, and the subscriber
    gets every acknowledged notification once."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "cluster" / "sp1"
    disk.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    settings = SUPERPEER_SETTINGS + RESERVE.format(low=384 * 1024, high=768 * 1024)
    try:
        (disk / "ballast").write_bytes(b"\0" * BALLAST_BYTES)
        with Cluster(2, directory=tmp_path / "cluster", settings=settings) as cluster:
            trio.run(pause_and_rejoin, cluster, disk)
    finally:
        if (disk / "stderr.log").exists():  # the small disk goes: keep what sp1 said
            shutil.copy(disk / "stderr.log", tmp_path / "sp1-stderr.log")
        unmount(disk)


async def pause_and_rejoin(cluster: Cluster, disk: Path) -> None:
    async with trio.open_nursery() as nursery:
        ca = cluster.ca_certificate
        publisher = RemotePeer("publisher", cluster.addresses[0], ca=ca)
        subscriber = RemotePeer("subscriber", cluster.addresses[1], ca=ca)
        await publisher.connect(nursery)
        await subscriber.connect(nursery)
        advertisement = qel.parse_advertisement({"schemas": ["dc"]})
        await publisher.request(m.Advertise(advertisement=advertisement))
        subscription = qel.parse_subscription("X : t(X, dc:title, T)")
        await subscriber.request(m.Subscribe(id="s", subscription=subscription))
        await wait_quiet(cluster, [publisher, subscriber])
        await subscriber.disconnect()
        acknowledged: list[str] = []

        async def publish(count: int) -> None:
            for number in range(len(acknowledged), len(acknowledged) + count):
                assert isinstance(await publisher.request(publication(publisher, number)), m.Ack)
                acknowledged.append(f"n{number}")

        with trio.fail_after(60):
            while not cluster.status(1)["disk"]["paused"]:
                await publish(1)
        await publish(10)  # sp0 takes them; sp1 reads nothing
        with trio.fail_after(60):  # sp0 finds sp1 silent and repairs the cube without it
            while cluster.status(0)["neighbours"]:
                await trio.sleep(0.1)
        (disk / "ballast").unlink()
        with trio.fail_after(120):
            while cube_problems([cluster.status(0), cluster.status(1)]):
                await trio.sleep(0.1)
        await publish(5)
        await subscriber.connect(nursery, cluster.addresses[1])
        await wait_quiet(cluster, [publisher, subscriber], timeout=120)
        assert cluster.live() == [0, 1], (disk / "stderr.log").read_text()[-3000:]
        received = [n.publication.id for n in subscriber.notifications]
        assert sorted(received) == sorted(acknowledged) and subscriber.redeliveries == 0
        nursery.cancel_scope.cancel()


def test_the_trace_log_is_suspended_on_a_full_disk_and_resumes_with_whole_lines(small_disk):
    """Traces are not promises: a full disk suspends the trace log (records dropped and
    counted) instead of stopping the daemon; with room again it goes on after the last whole
    line, so every line is a record."""
    traces = TraceLog(small_disk / "traces", "sp0", flush_seconds=0.0)
    space = os.statvfs(small_disk)
    (small_disk / "more ballast").write_bytes(b"\0" * (space.f_bavail * space.f_frsize - 8192))
    record = TraceRecord(ts=1.0, node="sp0", event="send", kind="sp.notification", msg="x" * 200)
    for number in range(200):
        traces.write(record)
        traces.flush_if_due(float(number))
    assert traces.dropped > 0
    (small_disk / "more ballast").unlink()
    traces.flush_if_due(1000.0)
    written = traces.records
    traces.write(record)
    traces.close()
    assert traces.records == written + 1
    lines = (small_disk / "traces" / "sp0.jsonl").read_text().splitlines()
    assert all(json.loads(line)["msg"] == "x" * 200 for line in lines)
    assert 0 < len(lines) < 200
