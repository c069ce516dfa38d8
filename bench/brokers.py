"""Our network beside the MQTT brokers people use: Mosquitto and amqtt, same machine, same pattern.

    python -m bench.brokers [--systems mosquitto,amqtt,superpeer-1,superpeer-8]
                            [--subscribers 1,10,100] [--tls on,off] [--offered 1000]
                            [--seconds 3] [--burst-seconds 3] [--drain 30] [--data-dir DIR]
                            [--sync full|normal] [--log-copy on|off] [--peer-ack-delay 0.04]
                            [--per-server] [--json]

Every system runs on 127.0.0.1 and is driven the same way, from this process: one publisher and
1 / 10 / 100 subscribers, each subscriber with its own connection, every publication 1 KB and
taken by every subscriber. Systems:

* ``mosquitto``: Debian's ``mosquitto`` broker (not installed by this benchmark: without the binary
  its rows are skipped with a line saying how to install it), persistence off, in-memory queues;
* ``amqtt``: the Python asyncio broker (the ``bench`` extra: ``pip install -e '.[bench]'``);
* ``superpeer-1``: one super-peer daemon, publisher and subscribers attached to it;
* ``superpeer-8``: 8 super-peer daemons (a 3-dimensional hypercube), the publisher attached at
  position 0 and the subscribers at position 7, three hops away.

The MQTT clients are paho-mqtt (one thread, one ``select`` loop over all connections), MQTT 3.1.1,
QoS 1 on both legs (the publisher's PUBLISH is acknowledged, and so is every delivery, as our
``Publish``/``Ack`` and ``Notify``/``Delivered`` are). The selection is the same on both sides: the
subscribers subscribe to the exact-match topic ``dc:subject/publish-subscribe`` and to the RDF
subscription ``X : t(X, dc:subject, S), S = "publish-subscribe"``; each publication is the resource
with that subject and a 1,024-character description (MQTT: a 1,024-byte payload). The super-peers
are durable (an input that changes a store is committed, with fsync, before its output leaves;
the inputs that arrive together share one commit: ``superpeer._commits``), unless ``--sync
normal`` (``[store] sync``: no fsync per commit, survives a killed process, not a power loss);
the brokers keep nothing on disk. With TLS: TLS 1.3 with a certificate from a CA made for the run
(Mosquitto and amqtt), and for our network its own TLS plus the peers' secure identification.

Per row, two phases on a freshly started system:

* sustained: publications as fast as the system takes them for ``--burst-seconds``, with at most
  ``max(2, 1000 // subscribers)`` publications ahead of the slowest subscriber; notifications
  delivered per second (all subscribers together), and CPU seconds per 10^4 notifications of the
  server processes (user + system, from /proc; for 8 super-peers the sum over the 8) and of this
  driving process;
* latency: ``--offered`` notifications/s (so ``offered / subscribers`` publications/s) for
  ``--seconds``; publish -> notification in a subscriber's hands (one clock), p50 and p99 over every
  delivery, and the share of deliveries that arrived within ``--drain`` seconds after the last send.

The machine's 1-minute load average is printed before and after each row.
With ``--per-server``, each server process's CPU per notification is printed under its row, for
each phase (for 8 super-peers: which daemon on the path pays what). Last, for each system
measured with two or more numbers of subscribers, its sustained server CPU split in a part per
publication and a part per delivery (``fixed_and_per_delivery``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import select
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trio

import crypto
import qel
from bench.network import percentiles
from deploy.cluster import Cluster, free_ports, terminate
from deploy.driver import RemotePeer, wait_quiet
from superpeer.store import SYNC_MODES
from wire import messages as m
from wire.acknowledging import ACK_DELAY_SECONDS

PAYLOAD_BYTES = 1024
SUBJECT_VALUE = "publish-subscribe"
TOPIC = f"dc:subject/{SUBJECT_VALUE}"
SUBSCRIPTION = f'X : t(X, dc:subject, S), S = "{SUBJECT_VALUE}"'
DC = "http://purl.org/dc/elements/1.1/"
SYSTEMS = ("mosquitto", "amqtt", "superpeer-1", "superpeer-8")
INSTALL = {
    "mosquitto": "apt-get install mosquitto",
    "amqtt": "pip install -e '.[bench]' (amqtt and paho-mqtt)",
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Skipped(RuntimeError):
    """A system this machine cannot run (its message says how to install what is missing)."""


def load_average() -> float:
    return os.getloadavg()[0]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0.0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


# -- what every system is driven with ---------------------------------------------------------


@dataclass
class Recorder:
    """Sends and receipts of one row, with one clock."""

    subscribers: int
    counts: list[int] = field(default_factory=list)
    sent: dict[int, float] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    timed_from: int = 1 << 62
    """Publication numbers from here on are in the latency phase."""
    last: float = 0.0
    published: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * self.subscribers

    @property
    def delivered(self) -> int:
        return sum(self.counts)

    def publishing(self, number: int) -> None:
        self.sent[number] = time.perf_counter()
        self.published = number + 1

    def received(self, subscriber: int, number: int) -> None:
        now = time.perf_counter()
        self.counts[subscriber] += 1
        self.last = now
        if number >= self.timed_from:
            self.latencies.append(now - self.sent[number])


Step = int | float
"""What a plan asks its driver for: an int, publish that number; a float, wait up to that long."""


def burst_plan(recorder: Recorder, seconds: float, window: int) -> Iterator[Step]:
    """Publish as fast as taken, at most ``window`` publications ahead of the slowest subscriber."""
    start = time.perf_counter()
    number = recorder.published
    while time.perf_counter() - start < seconds:
        if number - min(recorder.counts) >= window:
            yield 0.0005
            continue
        yield number
        number += 1


def paced_plan(recorder: Recorder, rate: float, seconds: float) -> Iterator[Step]:
    """``rate`` publications/s for ``seconds``, on schedule whatever happens to the deliveries."""
    first = recorder.published
    recorder.timed_from = first
    start = time.perf_counter()
    for index in range(max(1, round(rate * seconds))):
        while (delay := start + index / rate - time.perf_counter()) > 0:
            yield delay
        yield first + index


def drain_plan(recorder: Recorder, timeout: float) -> Iterator[Step]:
    """Until every subscriber has every publication, or ``timeout``."""
    deadline = time.perf_counter() + timeout
    while min(recorder.counts) < recorder.published and time.perf_counter() < deadline:
        yield 0.002


@dataclass
class Setup:
    system: str
    tls: bool
    subscribers: int
    options: argparse.Namespace
    log_copy: bool = True
    """Ours: each publication's log entry copied to a neighbour before its ``Ack``
    (``[recovery] log_copy``; MQTT brokers have no such thing)."""
    peer_ack_delay: float = ACK_DELAY_SECONDS
    """Ours: how long a peer's ``Delivered`` may wait for more notifications (the peer
    daemon's ``ack_delay_seconds``; paho acknowledges each delivery at once)."""


async def measure(
    setup: Setup,
    run_plan: Callable[[Iterator[Step]], Awaitable[None]],
    recorder: Recorder,
    server_pids: list[int],
) -> dict[str, object]:
    """The two phases, driven by ``run_plan`` (which publishes and waits the system's way)."""
    options, n = setup.options, setup.subscribers
    gc.collect()
    gc.disable()  # the driver's own pauses must not count against the system measured
    try:
        each_before = [cpu_seconds(p) for p in server_pids]
        client_before = time.process_time()
        start = time.perf_counter()
        await run_plan(burst_plan(recorder, options.burst_seconds, max(2, 1000 // n)))
        await run_plan(drain_plan(recorder, options.drain))
        burst_delivered = recorder.delivered
        elapsed = max(recorder.last - start, 1e-9)
        each_burst = [cpu_seconds(p) - b for p, b in zip(server_pids, each_before, strict=True)]
        servers = sum(each_burst)
        client = time.process_time() - client_before
        complete = min(recorder.counts) == recorder.published
        timed_expected = 0
        each_paced: list[float] = []
        if complete:
            before = recorder.delivered
            each_before = [cpu_seconds(p) for p in server_pids]
            await run_plan(paced_plan(recorder, options.offered / n, options.seconds))
            timed_expected = (recorder.published - recorder.timed_from) * n
            await run_plan(drain_plan(recorder, options.drain))
            timed_delivered = recorder.delivered - before
            each_paced = [cpu_seconds(p) - b for p, b in zip(server_pids, each_before, strict=True)]
    finally:
        gc.enable()
    per = 10_000 / max(1, burst_delivered)
    row: dict[str, object] = {
        "system": setup.system,
        "tls": setup.tls,
        "subscribers": n,
        "notifications_per_s": round(burst_delivered / elapsed),
        "burst_notifications": burst_delivered,
        "server_processes": len(server_pids),
        "server_cpu_s_per_10k": round(servers * per, 3),
        "client_cpu_s_per_10k": round(client * per, 3),
        "offered_notifications_per_s": options.offered,
        "server_cpu_us_each": {
            "sustained": [round(c * 1e6 / max(1, burst_delivered)) for c in each_burst]
        },
    }
    if not complete:
        row["latency"] = None
        row["note"] = f"the burst did not drain within {options.drain} s: no latency phase"
    else:
        row["latency"] = percentiles(recorder.latencies) if recorder.latencies else None
        row["arrived"] = round(timed_delivered / max(1, timed_expected), 4)
        row["server_cpu_us_each"]["latency"] = [  # type: ignore[index]
            round(c * 1e6 / max(1, timed_delivered)) for c in each_paced
        ]
    return row


# -- TLS material for the brokers -------------------------------------------------------------


def broker_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for 127.0.0.1 signed by it: (CA certificate, certificate, key)."""
    ca = directory / "ca"
    crypto.init_ca(ca, name="bench brokers CA", bits=2048)
    key = crypto.generate_private_key(2048)
    certificate = crypto.issue_certificate(
        ca, node_key=key, node_id="broker", hosts=("127.0.0.1", "localhost")
    )
    return (
        ca / "ca-cert.pem",
        crypto.save_certificate(certificate, directory / "broker-cert.pem"),
        crypto.save_private_key(key, directory / "broker-key.pem"),
    )


# -- the MQTT brokers -------------------------------------------------------------------------


def _wait_listening(process: subprocess.Popen, port: int, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    terminate(process, 5)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise RuntimeError(f"the broker did not listen on 127.0.0.1:{port}:\n{tail}")


def mosquitto_binary() -> str | None:
    """Where Debian puts it (/usr/sbin, which a non-root PATH may lack), or on the PATH."""
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/sbin/mosquitto") if Path(p).exists()), None
    )


@contextlib.contextmanager
def mqtt_broker(system: str, directory: Path, tls: bool) -> Iterator[tuple[int, Path | None, int]]:
    """Start ``system`` on a free loopback port: (port, CA certificate or None, pid)."""
    port = free_ports(1)[0]
    ca = certificate = key = None
    if tls:
        ca, certificate, key = broker_certificate(directory)
    log = directory / f"{system}.log"
    if system == "mosquitto":
        binary = mosquitto_binary()
        if binary is None:
            raise Skipped(f"mosquitto is not installed; to include it: {INSTALL['mosquitto']}")
        lines = [
            f"listener {port} 127.0.0.1",
            "allow_anonymous true",
            "persistence false",
            "max_queued_messages 100000",
            "log_dest stderr",
            "log_type error",
        ]
        if os.geteuid() == 0:
            lines.append("user root")  # the key files are the running user's (mode 0600)
        if tls:
            lines += [f"cafile {ca}", f"certfile {certificate}", f"keyfile {key}"]
        config = directory / "mosquitto.conf"
        config.write_text("\n".join(lines) + "\n")
        command = [binary, "-c", str(config)]
    else:
        try:
            import amqtt  # noqa: F401
        except ImportError as error:
            raise Skipped(f"amqtt is not installed; to include it: {INSTALL['amqtt']}") from error
        listener = {"type": "tcp", "bind": f"127.0.0.1:{port}", "ssl": tls}
        if tls:
            listener |= {"certfile": str(certificate), "keyfile": str(key)}
        config = directory / "amqtt.json"  # YAML is a superset of JSON
        config.write_text(
            json.dumps(
                {
                    "listeners": {"default": listener},
                    "plugins": {
                        "amqtt.plugins.authentication.AnonymousAuthPlugin": {
                            "allow_anonymous": True
                        }
                    },
                }
            )
        )
        code = "from amqtt.scripts.broker_script import main; main()"
        command = [sys.executable, "-c", code, "-c", str(config)]
    with log.open("ab") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        _wait_listening(process, port, log)
        yield port, ca, process.pid
    finally:
        terminate(process, 10)


class MqttClients:
    """A paho-mqtt publisher and subscribers over one ``select`` loop in this thread."""

    def __init__(self, port: int, ca: Path | None, recorder: Recorder) -> None:
        try:
            from paho.mqtt import client as mqtt
        except ImportError as error:
            raise Skipped(f"paho-mqtt is not installed; {INSTALL['amqtt']}") from error
        self._mqtt = mqtt
        self.recorder = recorder
        self.ready: set[str] = set()
        self.publisher = self._client("publisher", ca)
        self.subscribers = [
            self._client(f"subscriber{k}", ca, k) for k in range(recorder.subscribers)
        ]
        self.clients = [self.publisher, *self.subscribers]
        self.payload_tail = b"x" * (PAYLOAD_BYTES - 8)
        for client in self.clients:
            client.connect("127.0.0.1", port, keepalive=120)
        self._pump_until(lambda: len(self.ready) == len(self.clients), "connect")
        self.ready.clear()
        for client in self.subscribers:
            client.subscribe(TOPIC, qos=1)
        self._pump_until(lambda: len(self.ready) == len(self.subscribers), "subscribe")

    def _client(self, name: str, ca: Path | None, subscriber: int | None = None):  # type: ignore[no-untyped-def]
        mqtt = self._mqtt
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv311
        )
        client.max_inflight_messages_set(1000)
        client.max_queued_messages_set(0)
        if ca is not None:
            client.tls_set(ca_certs=str(ca))
        client.on_connect = lambda *_args: self.ready.add(name)
        client.on_subscribe = lambda *_args: self.ready.add(name)
        if subscriber is not None:
            recorder = self.recorder

            def take(_client: object, _userdata: object, message: object) -> None:
                (number,) = struct.unpack_from("!Q", message.payload)  # type: ignore[attr-defined]
                recorder.received(subscriber, number)

            client.on_message = take
        return client

    def _pump_until(self, done: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.perf_counter() + timeout
        while not done():
            if time.perf_counter() > deadline:
                raise RuntimeError(f"MQTT clients: {what} did not complete in {timeout} s")
            self.pump(0.01)

    def pump(self, timeout: float) -> None:
        """Read and write what the sockets allow, waiting up to ``timeout`` for something."""
        sockets = {c.socket(): c for c in self.clients if c.socket() is not None}
        pending = [s for s in sockets if isinstance(s, ssl.SSLSocket) and s.pending()]
        writable = [s for s, c in sockets.items() if c.want_write()]
        readable, ready_to_write, _ = select.select(
            list(sockets), writable, [], 0 if pending else timeout
        )
        for sock in {*readable, *pending}:
            sockets[sock].loop_read(100)
        for sock in ready_to_write:
            sockets[sock].loop_write()

    async def run(self, plan: Iterator[Step]) -> None:
        """Blocking: nothing else runs in the trio loop it is called from."""
        for step in plan:
            if isinstance(step, int):
                self.recorder.publishing(step)
                self.publisher.publish(TOPIC, struct.pack("!Q", step) + self.payload_tail, qos=1)
                self.pump(0)
            else:
                self.pump(step)

    def close(self) -> None:
        for client in self.clients:
            client.disconnect()
            with contextlib.suppress(Exception):
                self.pump(0)


def measure_mqtt(setup: Setup) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory(prefix="brokers-") as scratch,
        mqtt_broker(setup.system, Path(scratch), setup.tls) as (port, ca, pid),
    ):
        recorder = Recorder(setup.subscribers)
        clients = MqttClients(port, ca, recorder)
        try:
            return trio.run(measure, setup, clients.run, recorder, [pid])
        finally:
            clients.close()


# -- our network ------------------------------------------------------------------------------


class _BenchPeer(RemotePeer):
    """A driver peer that stamps each notification and skips the driver's byte accounting (a
    re-encoding of every notification, which no MQTT client does)."""

    recorder: Recorder | None = None
    index: int = -1

    def _count(self, message: object) -> None:
        self.received[type(message).KIND] += 1  # type: ignore[attr-defined]

    def _take(self, notify: m.Notify) -> None:
        kept = len(self.notifications)
        super()._take(notify)
        if self.recorder is not None and len(self.notifications) > kept:  # not a repeat
            self.recorder.received(self.index, int(notify.publication.id[1:]))


def publication(number: int) -> qel.Publication:
    description = f"Document {number}: " + "x" * PAYLOAD_BYTES
    return qel.Publication(
        qel.URI(f"http://bench.example.org/doc{number}"),
        frozenset(
            {
                (qel.URI(DC + "subject"), qel.Literal(SUBJECT_VALUE)),
                (qel.URI(DC + "description"), qel.Literal(description[:PAYLOAD_BYTES])),
            }
        ),
        "publisher",
        f"n{number}",
    )


async def _measure_ours(setup: Setup, size: int) -> dict[str, object]:
    options = setup.options
    directory = Path(tempfile.mkdtemp(prefix="brokers-", dir=options.data_dir))
    settings = f'[store]\nsync = "{options.sync}"\n'
    settings += f"[recovery]\nlog_copy = {str(setup.log_copy).lower()}\n"
    with Cluster(
        size, trace=False, tls=setup.tls, directory=directory, settings=settings
    ) as cluster:
        try:
            ca = cluster.ca_certificate if setup.tls else None
            recorder = Recorder(setup.subscribers)
            delay = setup.peer_ack_delay
            publisher = _BenchPeer("publisher", cluster.addresses[0], ca=ca, ack_delay=delay)
            subscribers = [
                _BenchPeer(f"subscriber{k}", cluster.addresses[size - 1], ca=ca, ack_delay=delay)
                for k in range(setup.subscribers)
            ]
            async with trio.open_nursery() as nursery:
                for peer in (publisher, *subscribers):
                    await peer.connect(nursery)
                await publisher.request(
                    m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]}))
                )
                query = qel.parse_subscription(SUBSCRIPTION)
                for k, peer in enumerate(subscribers):
                    await peer.request(m.Subscribe(id="s", subscription=query))
                    peer.recorder, peer.index = recorder, k
                await wait_quiet(cluster, [publisher, *subscribers])

                async def run_plan(plan: Iterator[Step]) -> None:
                    for step in plan:
                        if isinstance(step, int):
                            recorder.publishing(step)
                            await publisher.request_nowait(m.Publish(publication=publication(step)))
                        else:
                            await trio.sleep(step)

                pids = [p.pid for p in cluster.processes if p is not None]
                row = await measure(setup, run_plan, recorder, pids)
                hops = {n.hops for peer in subscribers for n in peer.notifications}
                row["hops"] = sorted(hops)
                for peer in (publisher, *subscribers):
                    await peer.disconnect()
                nursery.cancel_scope.cancel()
        finally:
            cluster.stop()
            shutil.rmtree(directory, ignore_errors=True)
    return row


def measure_row(setup: Setup) -> dict[str, object]:
    if setup.system.startswith("superpeer-"):
        return trio.run(_measure_ours, setup, int(setup.system.split("-")[1]))
    return measure_mqtt(setup)


def _format(row: dict[str, object]) -> str:
    label = f"{row['system']}, {'TLS' if row['tls'] else 'plaintext'}, {row['subscribers']} sub."
    if row.get("log_copy") is False:
        label = (
            f"{row['system']}, one copy, {'TLS' if row['tls'] else 'plain'}, {row['subscribers']}"
        )
    if (delay := row.get("peer_ack_delay")) is not None and delay != Setup.peer_ack_delay:
        label += f", ack {delay * 1000:g} ms"
    if "skipped" in row:
        return f"{label:<32} skipped: {row['skipped']}"
    latency = row.get("latency")
    p50, p99, p999, top = (
        f"{latency[key]:.{digits}f}" if latency else "-"  # type: ignore[index]
        for key, digits in (("p50_ms", 2), ("p99_ms", 2), ("p999_ms", 1), ("max_ms", 1))
    )
    arrived = f"{row['arrived']:.0%}" if "arrived" in row else "-"
    return (
        f"{label:<32} {row['notifications_per_s']:>8} {p50:>8} {p99:>8} {p999:>8} {top:>8} "
        f"{arrived:>7} "
        f"{row['server_cpu_s_per_10k']:>9} {row['client_cpu_s_per_10k']:>9} "
        f"{row['load_before']:>5.2f} {row['load_after']:>5.2f}"
        + (f"  {row['note']}" if "note" in row else "")
    )


def per_server_line(row: dict[str, object]) -> str:
    """Each server process's CPU per notification delivered (us), in each phase: for our
    daemons in the order of their node ids (``sp0``: the publisher's, the last: the
    subscribers'). The latency phase's includes its drain and, at a low rate, the timers of
    an idle daemon."""
    each: dict[str, list[int]] = row["server_cpu_us_each"]  # type: ignore[assignment]
    parts = [f"{phase} " + " ".join(str(us) for us in values) for phase, values in each.items()]
    return "    CPU us / notification, each server: " + "; ".join(parts)


def fixed_and_per_delivery(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Per system (and TLS, log copy, acknowledgement delay), the sustained server CPU split in
    what a publication costs whoever takes it (``fixed_us``) and what each delivery adds
    (``per_delivery_us``), from its rows of the fewest and the most subscribers: a publication
    to n subscribers costs fixed + n x per delivery. One subscriber pays the fixed part alone,
    many share it, so this says which of the two a gap between systems is in."""
    measured: dict[tuple, dict[int, float]] = {}
    for row in rows:
        if "skipped" in row:
            continue
        key = (row["system"], row["tls"], row.get("log_copy"), row.get("peer_ack_delay"))
        n = int(row["subscribers"])  # type: ignore[call-overload]
        per_notification = float(row["server_cpu_s_per_10k"]) * 100  # type: ignore[arg-type]
        measured.setdefault(key, {})[n] = per_notification * n  # us per publication
    splits = []
    for (system, tls, copy, delay), costs in measured.items():
        if len(costs) < 2:
            continue
        fewest, most = min(costs), max(costs)
        per_delivery = (costs[most] - costs[fewest]) / (most - fewest)
        splits.append(
            {
                "system": system,
                "tls": tls,
                "log_copy": copy,
                "peer_ack_delay": delay,
                "subscribers": [fewest, most],
                "fixed_us": round(costs[fewest] - fewest * per_delivery),
                "per_delivery_us": round(per_delivery),
            }
        )
    return splits


def split_line(split: dict[str, object]) -> str:
    """One ``fixed_and_per_delivery`` split as the text report prints it."""
    fewest, most = split["subscribers"]  # type: ignore[misc]
    return (
        f"{split['system']}, TLS {'on' if split['tls'] else 'off'}: server CPU per publication "
        f"{split['fixed_us']} us + {split['per_delivery_us']} us per delivery (sustained rows of "
        f"{fewest} and {most} subscribers)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--subscribers", default="1,10,100")
    parser.add_argument("--tls", default="on,off", help="on, off or on,off")
    parser.add_argument(
        "--offered", type=float, default=1000.0, help="notifications/s in the latency phase"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="latency phase")
    parser.add_argument("--burst-seconds", type=float, default=3.0, help="sustained phase")
    parser.add_argument(
        "--drain", type=float, default=30.0, help="how long to wait for what is in flight"
    )
    parser.add_argument(
        "--data-dir", help="where the super-peers keep their stores (default: a temp dir)"
    )
    parser.add_argument(
        "--sync",
        choices=SYNC_MODES,
        default="full",
        help="the super-peers' [store] sync (full: fsync'd commits, the default)",
    )
    parser.add_argument(
        "--log-copy",
        default="on",
        help="on, off or on,off: the super-peers' [recovery] log_copy (off: the origin's log "
        "alone, no neighbour's copy before the Ack), alternated per row",
    )
    parser.add_argument(
        "--peer-ack-delay",
        default=str(Setup.peer_ack_delay),
        help="seconds, or a list (0,0.005): how long our peers' Delivered waits for more "
        "(the peer daemon's ack_delay_seconds; 0: each read's at once), alternated per row",
    )
    parser.add_argument(
        "--per-server",
        action="store_true",
        help="also print each server process's CPU per notification in each phase (for "
        "superpeer-8: which daemon of the path pays what)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    systems = args.systems.split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    tls_choices = [{"on": True, "off": False}[t] for t in args.tls.split(",")]
    copy_choices = [{"on": True, "off": False}[c] for c in args.log_copy.split(",")]
    delay_choices = [float(d) for d in args.peer_ack_delay.split(",")]
    rows = []
    if not args.json:
        print(
            f"1 publisher, N subscribers, {PAYLOAD_BYTES}-byte payloads; latency at "
            f"{args.offered:.0f} notifications/s offered for {args.seconds} s; CPU s per 10^4 "
            "notifications of the server processes and of the driving process; load average "
            "(1 min) before and after each row"
        )
        print(
            f"{'system, TLS, subscribers':<32} {'notif/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'p99.9 ms':>8} {'max ms':>8} {'arrived':>7} {'CPU srv':>9} {'CPU cli':>9} "
            f"{'load':>5} {'after':>5}",
            flush=True,
        )
    for system in systems:
        for tls in tls_choices:
            for n in (int(k) for k in args.subscribers.split(",")):
                ours = system.startswith("superpeer-")
                for copy, delay in itertools.product(
                    copy_choices if ours else [True], delay_choices if ours else [0.0]
                ):
                    before = load_average()
                    try:
                        row = measure_row(Setup(system, tls, n, args, copy, delay))
                    except Skipped as skipped:
                        row = {
                            "system": system,
                            "tls": tls,
                            "subscribers": n,
                            "skipped": str(skipped),
                        }
                    if ours:
                        row["log_copy"], row["peer_ack_delay"] = copy, delay
                    row["load_before"], row["load_after"] = before, load_average()
                    rows.append(row)
                    if not args.json:
                        print(_format(row), flush=True)
                        if args.per_server and "server_cpu_us_each" in row:
                            print(per_server_line(row), flush=True)
    splits = fixed_and_per_delivery(rows)
    if args.json:
        print(json.dumps({"rows": rows, "splits": splits, "options": vars(args)}, indent=2))
    else:
        for split in splits:
            print(split_line(split))


if __name__ == "__main__":
    main()
