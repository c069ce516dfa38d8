"""``superpeer``: run a super-peer daemon, or ask a running one how it is doing.

    superpeer run [--config FILE] [--join HOST:PORT]... [--listen HOST:PORT] [--data-dir DIR]
                  [--node-id ID]
    superpeer status [--config FILE | --data-dir DIR | --listen HOST:PORT] [--json]
    superpeer stop   [--config FILE | --data-dir DIR | --listen HOST:PORT]

``run`` with no options starts a standalone super-peer on 127.0.0.1:7400 with its data under the
user's data home; SIGTERM or SIGINT shuts it down cleanly. ``status`` and ``stop`` talk to the
daemon over the control socket in its data directory. Exit codes: 0 ok, 2 bad usage or
configuration, 3 no daemon answering.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

import trio

import wire
from superpeer.config import ConfigError, SuperPeerConfig, load_config, parse_address
from superpeer.daemon import DaemonError, SuperPeerDaemon
from wire import messages as m
from wire.framing import Link, Violation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="superpeer", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a super-peer daemon")
    status = commands.add_parser("status", help="show a running daemon's state")
    stop = commands.add_parser("stop", help="shut a running daemon down cleanly")
    for sub in (run, status, stop):
        sub.add_argument("--config", help="TOML configuration file")
        sub.add_argument("--data-dir", help="data directory (default: under the user's data home)")
        sub.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:7400)")
    run.add_argument("--join", action="append", help="join the backbone through this member")
    run.add_argument("--node-id", help="this super-peer's id (default: generated and kept)")
    run.add_argument("--log-level", default="INFO", help="stderr log level (default INFO)")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        config = _config(args)
    except ConfigError as error:
        print(f"superpeer: {error}", file=sys.stderr)
        return 2
    if args.command == "run":
        logging.basicConfig(
            level=args.log_level.upper(),
            stream=sys.stderr,
            format="ts=%(asctime)s level=%(levelname)s %(message)s",
        )
        return _serve(config)
    try:
        reply = trio.run(control, config.directory, args.command)
    except ControlUnavailable as error:
        print(f"superpeer: {error}", file=sys.stderr)
        return 3
    if not reply.ok:
        print(f"superpeer: {reply.body}", file=sys.stderr)
        return 2
    if args.command == "status" and not args.json:
        _print_status(json.loads(reply.body))
    else:
        print(reply.body)
    return 0


def _serve(config: SuperPeerConfig) -> int:
    try:
        trio.run(_run, config)
    except (BaseExceptionGroup, DaemonError, OSError) as caught:
        error = _first(caught)
        if isinstance(error, DaemonError):
            print(f"superpeer: {error}", file=sys.stderr)
            return 2
        if isinstance(error, OSError):
            print(f"superpeer: cannot listen on {config.address}: {error}", file=sys.stderr)
            return 2
        raise
    return 0


def _first(group: BaseException) -> BaseException:
    """The first leaf of an exception group (trio wraps a task's error in its nursery's group)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _config(args: argparse.Namespace) -> SuperPeerConfig:
    config = load_config(args.config)
    changes: dict[str, object] = {}
    if args.listen:
        changes["host"], changes["port"] = parse_address(args.listen, what="--listen")
    if args.data_dir:
        changes["data_dir"] = Path(args.data_dir).expanduser()
    if getattr(args, "join", None):
        changes["join"] = tuple(parse_address(j, what="--join") for j in args.join)
    if getattr(args, "node_id", None):
        changes["node_id"] = args.node_id
    return config.with_overrides(**changes)


async def _run(config: SuperPeerConfig) -> None:
    daemon = SuperPeerDaemon(config)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def serve_then_stop(*, task_status: trio.TaskStatus[str]) -> None:
                await daemon.serve(task_status=task_status)
                nursery.cancel_scope.cancel()

            await nursery.start(serve_then_stop)
            print(f"superpeer {daemon.node_id} listening on {daemon.address}", flush=True)
            async for _ in signals:
                await daemon.shutdown()


class ControlUnavailable(RuntimeError):
    """No daemon answers on the control socket."""


async def control(
    directory: Path, command: str, arguments: dict[str, str] | None = None
) -> m.ControlReply:
    """Send one command to the daemon whose data directory is ``directory``."""
    path = directory / "control.sock"
    try:
        stream = await trio.open_unix_socket(str(path))
    except OSError as error:
        raise ControlUnavailable(f"no super-peer daemon at {path} ({error.strerror})") from None
    async with stream:
        link = Link(accepting=False)
        hello = m.Hello(role="control", node_id="cli", address="", protocol=wire.PROTOCOL_VERSION)
        await stream.send_all(link.send(hello))
        await stream.send_all(
            link.send(m.ControlRequest(command=command, arguments=arguments or {}))
        )
        while True:
            data = await stream.receive_some(65536)
            if not data:
                raise ControlUnavailable("the daemon closed the control connection")
            for event in link.receive_data(data):
                if isinstance(event, Violation):
                    raise ControlUnavailable(f"control protocol error: {event.reason}")
                if isinstance(event.message, m.ControlReply):
                    return event.message


def _print_status(status: dict) -> None:
    print(
        f"super-peer {status['node']} at {status['address']} ({status['state']}, up {status['uptime_seconds']} s)"
    )
    if "positions" in status:
        print(f"  positions {status['positions']} in a {status['dimension']}-dimensional cube")
        for node, address in status["neighbours"].items():
            print(f"  neighbour {node} at {address}")
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
    print(
        f"  protocol violations: {status['violations']}, authentication failures: {status['auth_failures']}"
    )


if __name__ == "__main__":
    sys.exit(main())
