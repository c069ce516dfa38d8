"""``superpeer``: run a super-peer daemon, or ask a running one how it is doing.

    superpeer run [--config FILE] [--join HOST:PORT]... [--listen HOST:PORT] [--data-dir DIR]
                  [--node-id ID] [--http HOST:PORT] [--log-format text|json] [--log-level LEVEL]
    superpeer check-config FILE
    superpeer status [--config FILE | --data-dir DIR | --listen HOST:PORT] [--json]
    superpeer stop   [--config FILE | --data-dir DIR | --listen HOST:PORT] [--json]
    superpeer keygen [--config FILE | --data-dir DIR] [--bits 3072] [--force]
    superpeer ca init  --ca-dir DIR [--name NAME] [--bits 3072]
    superpeer ca issue --ca-dir DIR [--config FILE | --data-dir DIR] --node-id ID [--host H]...

``run`` with no options starts a standalone super-peer on 127.0.0.1:7400 with its data under the
user's data home (creating its own identity the first time, see ``superpeer.security``); SIGTERM or
SIGINT shuts it down cleanly. ``status`` and ``stop`` talk to the daemon over the control socket in
its data directory. A backbone of several super-peers shares a network CA: ``ca init`` creates it
(keep its directory offline), ``keygen`` creates a super-peer's key in its data directory, ``ca
issue`` signs that key's certificate for a node id and installs it, with the CA's certificate, in
the data directory. ``check-config`` reads a configuration and says what a daemon would run with,
or what is wrong with it. Exit codes: 0 ok, 2 bad usage or configuration, 3 no daemon answering,
4 the data directory's disk is full: ``run`` did not start, or stopped when a write failed
(``superpeer.diskspace``; it says which file and how much space is left).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import shutil
import signal
import socket
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import trio

import crypto
import daemonlog
import wire
from superpeer import checkconfig, collector, diskspace
from superpeer.config import ConfigError, SuperPeerConfig, load_config, parse_address
from superpeer.daemon import DaemonError, SuperPeerDaemon
from superpeer.security import IdentityError, identity_paths
from wire import messages as m
from wire.framing import Link, Violation

log = logging.getLogger("superpeer")
EXIT_DISK_FULL = 4
LISTEN_ERRNOS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})
"""What binding the listening socket answers when the address cannot be had."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="superpeer", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a super-peer daemon")
    status = commands.add_parser("status", help="show a running daemon's state")
    stop = commands.add_parser("stop", help="shut a running daemon down cleanly")
    forget = commands.add_parser(
        "forget-peer",
        help="drop a detached peer's registration so its key can register again",
    )
    forget.add_argument("peer", help="the peer's public identifier (pk1-...)")
    peers = commands.add_parser(
        "peers", help="list the peers this super-peer holds something for (state, mail)"
    )
    subscriptions = commands.add_parser(
        "subscriptions", help="list the subscriptions this super-peer holds, and where they went"
    )
    subscriptions.add_argument("--peer", help="only this peer's (pk1-... or name)")
    check = commands.add_parser(
        "check-config", help="check a configuration file and show what it means"
    )
    check.add_argument("file", help="TOML configuration file")
    keygen = commands.add_parser("keygen", help="create this super-peer's key")
    ca = commands.add_parser("ca", help="the network CA").add_subparsers(
        dest="ca_command", required=True
    )
    ca_init = ca.add_parser("init", help="create the network CA")
    ca_issue = ca.add_parser("issue", help="certify a super-peer's key for a node id")
    for sub in (ca_init, ca_issue):
        sub.add_argument("--ca-dir", required=True, help="the CA's directory")
    ca_init.add_argument("--name", default="semantic-pubsub network CA")
    ca_init.add_argument("--bits", type=int, default=3072)
    ca_issue.add_argument("--node-id", required=True)
    ca_issue.add_argument(
        "--host", action="append", help="address or DNS name it is reached at (repeatable)"
    )
    keygen.add_argument("--bits", type=int, default=3072)
    keygen.add_argument("--force", action="store_true", help="replace an existing key")
    for sub in (run, status, stop, forget, peers, subscriptions, keygen, ca_issue):
        sub.add_argument("--config", help="TOML configuration file")
        sub.add_argument("--data-dir", help="data directory (default: under the user's data home)")
        sub.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:7400)")
    run.add_argument("--join", action="append", help="join the backbone through this member")
    run.add_argument("--node-id", help="this super-peer's id (default: generated and kept)")
    run.add_argument("--log-level", help="stderr log level (default INFO, or [logging] level)")
    run.add_argument(
        "--log-format", choices=("text", "json"), help="stderr log lines (default text)"
    )
    run.add_argument(
        "--http",
        help="serve /metrics, /healthz, /readyz and the status page on HOST:PORT (or PORT,"
        " on 127.0.0.1)",
    )
    run.add_argument(
        "--no-tls",
        action="store_true",
        help="plaintext connections (only to measure what TLS costs)",
    )
    for sub in (status, peers, subscriptions, stop, forget):
        sub.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.command == "check-config":
        return _check_config(args.file)
    try:
        config = _config(args)
    except ConfigError as error:
        print(f"superpeer: {error}", file=sys.stderr)
        return 2
    if args.command in ("keygen", "ca"):
        try:
            return _identity_command(args, config)
        except (crypto.CryptoError, IdentityError, OSError) as error:
            print(f"superpeer: {error}", file=sys.stderr)
            return 2
    if args.command == "run":
        try:
            repeats = daemonlog.configure(
                level=args.log_level or config.logs.level,
                form=args.log_format or config.logs.format,
                repeat_seconds=config.logs.repeat_seconds,
            )
        except ValueError as error:
            print(f"superpeer: {error}", file=sys.stderr)
            return 2
        return _serve(config, lambda: repeats.suppressed)
    try:
        arguments = None
        if args.command == "forget-peer" or (args.command == "subscriptions" and args.peer):
            arguments = {"peer": args.peer}
        reply = control_blocking(config.directory, args.command, arguments)
    except ControlUnavailable as error:
        print(f"superpeer: {error}", file=sys.stderr)
        return 3
    if not reply.ok:
        print(f"superpeer: {reply.body}", file=sys.stderr)
        return 2
    printers = {
        "status": _print_status,
        "peers": _print_peers,
        "subscriptions": _print_subs,
        "stop": _print_stopping,
        "forget-peer": _print_forgotten,
    }
    if args.command in printers and not args.json:
        printers[args.command](json.loads(reply.body))
    else:
        print(reply.body)
    return 0


def _check_config(path: str) -> int:
    try:
        config = load_config(path)
    except ConfigError as error:
        print(f"superpeer: {error}", file=sys.stderr)
        return 2
    found = checkconfig.problems(config)
    for line in checkconfig.summary(config):
        print(line)
    for problem in found:
        print(f"superpeer: {path}: {problem}", file=sys.stderr)
    return 2 if found else 0


def _serve(config: SuperPeerConfig, suppressed_logs: Callable[[], int]) -> int:
    sys.setswitchinterval(config.store.switch_interval_seconds)  # the process's, not the daemon's
    try:
        trio.run(_run, config, suppressed_logs)
    except (
        BaseExceptionGroup, DaemonError, diskspace.NoRoom, OSError, sqlite3.Error, IdentityError,
        crypto.CryptoError,
    ) as caught:  # fmt: skip
        full = diskspace.disk_full(caught)
        if full is not None:  # wherever it was written: the store, the trace log, the identity
            print(
                f"superpeer: {diskspace.stopped_because(full, config.directory)}", file=sys.stderr
            )
            return EXIT_DISK_FULL
        error = _first(caught)
        if isinstance(error, diskspace.NoRoom):
            print(f"superpeer: {error}", file=sys.stderr)
            return EXIT_DISK_FULL
        if isinstance(error, DaemonError | IdentityError | crypto.CryptoError):
            print(f"superpeer: {error}", file=sys.stderr)
            return 2
        if isinstance(error, sqlite3.Error):
            print(
                f"superpeer: the store {config.directory / 'state.sqlite'}: {error}",
                file=sys.stderr,
            )
            return 2
        if isinstance(error, OSError):
            if error.filename is None and error.errno in LISTEN_ERRNOS:
                print(f"superpeer: cannot listen on {config.address}: {error}", file=sys.stderr)
            else:
                print(f"superpeer: {error}", file=sys.stderr)
            return 2
        raise
    return 0


def _first(group: BaseException) -> BaseException:
    """The first leaf of an exception group (trio wraps a task's error in its nursery's group)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _identity_command(args: argparse.Namespace, config: SuperPeerConfig) -> int:
    if args.command == "ca" and args.ca_command == "init":
        certificate = crypto.init_ca(args.ca_dir, name=args.name, bits=args.bits)
        print(
            f"network CA created in {args.ca_dir} (fingerprint {crypto.fingerprint(certificate)})"
        )
        print("keep ca-key.pem secret and offline; give ca-cert.pem to every super-peer and peer")
        return 0
    key_path, cert_path, ca_path = identity_paths(config.directory, config.security)
    key_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if args.command == "keygen":
        key = crypto.generate_private_key(args.bits)
        crypto.save_private_key(key, key_path, overwrite=args.force)
        print(f"key written to {key_path} (fingerprint {crypto.fingerprint(key)})")
        return 0
    key = crypto.load_private_key(key_path)
    hosts = args.host or [config.host, "127.0.0.1", "localhost"]
    certificate = crypto.issue_certificate(
        args.ca_dir, node_key=key, node_id=args.node_id, hosts=sorted(set(hosts))
    )
    crypto.save_certificate(certificate, cert_path, overwrite=True)
    shutil.copyfile(Path(args.ca_dir) / "ca-cert.pem", ca_path)
    print(
        f"certificate for node {args.node_id!r} written to {cert_path}; network CA copied to {ca_path}"
    )
    return 0


def _config(args: argparse.Namespace) -> SuperPeerConfig:
    config = load_config(getattr(args, "config", None))
    changes: dict[str, object] = {}
    if getattr(args, "no_tls", False):
        changes["security"] = replace(config.security, tls=False)
    if getattr(args, "listen", None):
        changes["host"], changes["port"] = parse_address(args.listen, what="--listen")
    if getattr(args, "data_dir", None):
        changes["data_dir"] = Path(args.data_dir).expanduser()
    if getattr(args, "join", None):
        changes["join"] = tuple(parse_address(j, what="--join") for j in args.join)
    if getattr(args, "node_id", None):
        changes["node_id"] = args.node_id
    if getattr(args, "http", None):
        changes["http"] = replace(config.http, listen=args.http)
        try:
            changes["http"].bind  # noqa: B018 (a bad address is a usage error now)
        except ConfigError as error:
            raise ConfigError(f"--http: {error} (or a bare port for 127.0.0.1)") from None
    return config.with_overrides(**changes)


async def _run(config: SuperPeerConfig, suppressed_logs: Callable[[], int]) -> None:
    """The daemon until SIGTERM or SIGINT: a member leaves the cube cleanly
    (``SuperPeerDaemon.shutdown``); one still starting (asking its join addresses, refused
    while the cube repairs its previous incarnation) has nothing to hand over and stops at once
    rather than leave the signal unanswered until it becomes a member."""
    daemon = SuperPeerDaemon(config, suppressed_logs=suppressed_logs)
    started = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def serve_then_stop(*, task_status: trio.TaskStatus[str]) -> None:
                await daemon.serve(task_status=task_status)
                nursery.cancel_scope.cancel()

            async def stop_on_signal() -> None:
                async for _ in signals:
                    if not started.is_set():
                        log.info("event=stopped_while_starting node=%s", daemon.node_id)
                        nursery.cancel_scope.cancel()
                        return
                    await daemon.shutdown()

            nursery.start_soon(stop_on_signal)
            await nursery.start(serve_then_stop)
            await nursery.start(collector.run, config.collector)
            started.set()
            if daemon.http_address is not None:
                print(f"superpeer {daemon.node_id} status page {daemon.http_address}/", flush=True)
            print(f"superpeer {daemon.node_id} listening on {daemon.address}", flush=True)


class ControlUnavailable(RuntimeError):
    """No daemon answers on the control socket."""


def _request_frames(link: Link, command: str, arguments: dict[str, str] | None) -> bytes:
    hello = m.Hello(role="control", node_id="cli", address="", protocol=wire.PROTOCOL_VERSION)
    return link.send(hello) + link.send(
        m.ControlRequest(command=command, arguments=arguments or {})
    )


def _reply_in(link: Link, data: bytes) -> m.ControlReply | None:
    if not data:
        raise ControlUnavailable("the daemon closed the control connection")
    for event in link.receive_data(data):
        if isinstance(event, Violation):
            raise ControlUnavailable(f"control protocol error: {event.reason}")
        if isinstance(event.message, m.ControlReply):
            return event.message
    return None


async def control(
    directory: Path, command: str, arguments: dict[str, str] | None = None
) -> m.ControlReply:
    """Send one command to the daemon whose data directory is ``directory`` (from trio code)."""
    path = directory / "control.sock"
    try:
        stream = await trio.open_unix_socket(str(path))
    except OSError as error:
        raise ControlUnavailable(f"no super-peer daemon at {path} ({error.strerror})") from None
    async with stream:
        link = Link(accepting=False)
        await stream.send_all(_request_frames(link, command, arguments))
        while (reply := _reply_in(link, await stream.receive_some(65536))) is None:
            pass
        return reply


def control_blocking(
    directory: Path, command: str, arguments: dict[str, str] | None = None, timeout: float = 30
) -> m.ControlReply:
    """``control`` for plain (blocking) code: the command line, launchers, tests."""
    path = directory / "control.sock"
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout)
    with client:
        try:
            client.connect(str(path))
        except OSError as error:
            raise ControlUnavailable(f"no super-peer daemon at {path} ({error.strerror})") from None
        link = Link(accepting=False)
        client.sendall(_request_frames(link, command, arguments))
        while (reply := _reply_in(link, client.recv(65536))) is None:
            pass
        return reply


def _print_stopping(reply: dict) -> None:
    print(
        "the super-peer is stopping: it hands its peers over, withdraws its advertisements and "
        "leaves the cube (as on SIGTERM)"
    )


def _print_forgotten(reply: dict) -> None:
    print(f"forgot the registration of {reply['forgotten']}: its key may register again")


def _print_status(status: dict) -> None:
    print(
        f"super-peer {status['node']} at {status['address']} ({status['state']}, up {status['uptime_seconds']} s)"
    )
    if "positions" in status:
        print(f"  positions {status['positions']} in a {status['dimension']}-dimensional cube")
        for node, link in status["neighbours"].items():
            state = "suspected" if link["suspected"] else f"heard {link['silent_seconds']} s ago"
            print(f"  neighbour {node} at {link['address']} ({state})")
    if status.get("waiting"):
        print(f"  waiting for: {'; '.join(status['waiting'])}")
    peers = status.get("peers", {})
    print(
        f"  peers: {len(peers.get('attached', []))} attached, {len(peers.get('detached', []))} detached"
    )
    subs = status.get("subscriptions", {})
    ads = status.get("advertisements", {})
    print(f"  subscriptions: {subs.get('held', 0)} held, {subs.get('distinct', 0)} distinct")
    print(
        f"  advertisements: {ads.get('elements', 0)} elements from {ads.get('origins', 0)} origins"
    )
    messages = status.get("messages", {})
    print(
        f"  messages sent: {sum(messages.get('sent', {}).values())}, received: {sum(messages.get('received', {}).values())}, delivered: {messages.get('delivered', 0)}"
    )
    mail = status.get("mail", {})
    print(
        f"  mail kept: {sum(mail.get('kept', {}).values())} for {len(mail.get('kept', {}))} peers,"
        f" unacknowledged: {sum(mail.get('unacknowledged', {}).values())},"
        f" expired: {sum(mail.get('expired', {}).values())}"
        f" (retention {mail.get('retention_seconds', 0):g} s, cap {mail.get('max_kept_per_peer', 0)} per peer)"
    )
    print(
        f"  failures detected: {status['failures_detected']}, repairs: {status['repairs']},"
        f" rejoins: {status['rejoins']}"
    )
    print(
        f"  protocol violations: {status['violations']}, authentication failures: {status['auth_failures']}"
    )
    disk = status.get("disk", {})
    if disk.get("free_bytes") is not None:
        print(
            f"  disk: {disk['free_bytes']} bytes free of {disk['total_bytes']},"
            f" paused below {disk['min_free_bytes']}"
            + (f"; PAUSED: {disk['paused']}" if disk.get("paused") else "")
        )


def _print_peers(peers: list[dict]) -> None:
    if not peers:
        print("no peers")
        return
    print(
        f"{'peer':<58} {'state':<9} {'subs':>5} {'mail':>6} {'unacked':>7} {'expired':>7}  moved to"
    )
    for row in peers:
        print(
            f"{row['peer']:<58} {row['state']:<9} {row['subscriptions']:>5} {row['mail']:>6}"
            f" {row['unacknowledged']:>7} {row['expired']:>7}  {row['moved_to'] or '-'}"
        )


def _print_subs(rows: list[dict]) -> None:
    if not rows:
        print("no subscriptions")
        return
    for row in rows:
        sent = ", ".join(
            f"{node} (for {', '.join(origins)})" for node, origins in row["sent_to"].items()
        )
        print(f"{row['source']} {row['id']}: {row['query']}")
        print(f"    sent to: {sent or 'nowhere (no covering advertisement, or covered)'}")


if __name__ == "__main__":
    sys.exit(main())
