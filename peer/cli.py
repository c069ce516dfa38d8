"""``peer``: run a desktop peer's daemon, and talk to it.

    peer keygen [--bits 3072] [--force]         (the peer's key; prints its public identifier)
    peer run --superpeer HOST:PORT (--ca FILE | --pin FINGERPRINT | --no-tls)
             [--config FILE] [--name NAME] [--data-dir DIR] [--log-level L]
             [--log-format text|json] [--ui [HOST:PORT] | --no-ui]
    peer ui [--no-browser]                       (opens the running daemon's web app)
    peer stop                                   (stops the daemon; the peer stays registered)
    peer advertise FILE                         (JSON, or TOML if FILE ends in .toml)
    peer publish-schema FILE [--format turtle|nt|xml|json-ld]   (RDFS axioms, for entailment)
    peer subscribe QUERY|FILE [--id ID] [--expires 2h|ISO-TIME] [--on change]   (QEL or SPARQL)
    peer unsubscribe ID
    peer publish FILE [--format turtle|nt|xml|json-ld] [--id ID] [--expires 2h|ISO-TIME]
                 [--file PATH | --file SUBJECT=PATH ...]   (FILE "-" reads stdin; the resources' bytes, offered)
    peer publish FILE --replaces ID | --extends ID   (a new version of a resource, or triples added)
    peer publish CATALOGUE [--batch-bytes 1048576] [--batch-resources 2000] [--batches-in-flight 2]
                 (a document larger than a batch goes in batches, with a progress bar; run
                 again after an interruption, it goes on where it stopped: ``peer.bulk``,
                 ``peer.jobs``)
    peer retract ID                             (withdraw a resource this peer published)
    peer fetch PUBLICATION_ID [--owner PUBLIC_ID] [--out PATH] [--wait SECONDS] [--status]
    peer inbox [--follow]
    peer status
    peer locate PUBLIC_ID                       (is that peer online, and where?)
    peer leave                                  (leaves the network for good)

Every command takes ``--data-dir DIR``, ``--config FILE`` and ``--name NAME``, which locate the
daemon (several peers run side by side with different data directories), and ``--json``: it
answers in sentences by default, in JSON with ``--json`` (one object; ``inbox``, one record per
line; a failure, ``{"error", "message"}`` on stdout besides the line on stderr). The commands talk to the
running daemon over its control socket; ``run`` is the daemon itself (SIGTERM or SIGINT stop it
cleanly), and ``keygen`` creates the peer's identity, which ``run`` needs with TLS.

Security (``peer.config``, ``peer.identity``): the access point is reached over TLS 1.3 and
authenticated by the network CA's certificate (``--ca``) or by its key fingerprint (``--pin``, for
a single super-peer, which logs it); ``--no-tls`` is for a plaintext super-peer (``superpeer run
--no-tls``). The network knows the peer by its key's public identifier (``pk1-...``); ``--name`` is
a local label. A passphrase-protected key is unlocked with ``$PEER_KEY_PASSPHRASE`` (``keygen``
encrypts the new key with it when it is set).

The daemon serves a web app (``peer.ui``) on a free loopback port unless ``--no-ui`` (or
``[ui] listen = false``); ``--ui HOST:PORT`` chooses the address. It prints the app's address
with its access token, and ``peer ui`` opens it in the default browser.

Exit codes: 0 done; 1 refused by the network; 2 a local error (usage, unreadable file, a query
outside the language, ...); 3 no daemon running, or the access point is not connected or did not
answer. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import queue
import shutil
import signal
import sys
import threading
import time
import tomllib
import webbrowser
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, NoReturn, TextIO

import daemonlog
from peer import bulk, jobs
from peer.config import ConfigError, PeerConfig, load_config, toml_to_json
from peer.control import EXIT_CODES, ControlClient, ControlUnavailable
from peer.expires import parse_expires

DEFAULT_KEY_BITS = 3072
STOP_SECONDS = 30.0
"""How long ``peer stop`` waits for the daemon to let go of its data directory."""
KINDS_OF_EXIT = {code: kind for kind, code in EXIT_CODES.items()}
EXPIRES_HELP = "when it expires: a duration (90s, 30m, 2h, 7d) or an ISO 8601 time (UTC if no zone)"

FORMATS_BY_SUFFIX = {
    ".ttl": "turtle",
    ".turtle": "turtle",
    ".nt": "nt",
    ".rdf": "xml",
    ".xml": "xml",
    ".owl": "xml",
    ".jsonld": "json-ld",
    ".json": "json-ld",
}


class UsageError(Exception):
    """A problem with the command line or its files (exit 2)."""


class CommandFailed(Exception):
    """The daemon reported a failure; ``code`` is the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def main(argv: list[str] | None = None) -> int:
    _interruptible()
    parser = _build_parser()
    as_json = "--json" in (sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        config = load_config(
            args.config,
            data_dir=args.data_dir,
            name=args.name,
            superpeer=args.superpeer,
            ca=args.ca,
            pin=args.pin,
            no_tls=args.no_tls,
            ui=args.ui,
            no_ui=args.no_ui,
        )
        if args.command == "run":
            return _run(config, args.log_level, args.log_format, as_json=args.json)
        return _COMMANDS[args.command](args, config)
    except (UsageError, ConfigError) as error:
        return _fail(str(error), 2, as_json)
    except ControlUnavailable as error:
        return _fail(str(error), 3, as_json)
    except CommandFailed as error:
        return _fail(str(error), error.code, as_json)
    except KeyboardInterrupt:
        return 130


def _interruptible() -> None:
    """SIGINT stops a command (``KeyboardInterrupt``, exit 130) even in a process that started
    with it ignored, as a non-interactive shell starts its background jobs: ``peer inbox
    --follow &`` in a script, then ``kill -INT``, did nothing (Python keeps an ignored SIGINT
    ignored), and the process tests that stop a reader so outlived 30 s in clean-clone CI runs
    started in the background (stops 53 and 61). ``peer run`` handles the signal itself."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _fail(message: str, code: int, as_json: bool = False) -> int:
    """One line on stderr; with ``--json`` also the error as JSON on stdout."""
    if as_json:
        print(json.dumps({"error": KINDS_OF_EXIT.get(code, "failed"), "message": message}))
    print(f"peer: {message}", file=sys.stderr)
    return code


def _say(args: argparse.Namespace, result: object, sentence: str) -> int:
    """A command's answer: ``sentence``, or ``result`` as JSON with ``--json``."""
    print(json.dumps(result) if args.json else sentence)
    return 0


def _build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--data-dir", help="the peer's data directory")
    common.add_argument("--config", help="TOML configuration file")
    common.add_argument(
        "--name",
        help="the peer's name (a local label; its id with --no-tls; picks the default data dir)",
    )
    common.add_argument(
        "--json", action="store_true", help="answer in JSON (default: in sentences)"
    )
    parser = _Parser(prog="peer", description="Run a desktop peer's daemon, and talk to it.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, parents=[common], description=help)
        sub.set_defaults(superpeer=None, ca=None, pin=None, no_tls=False, ui=None, no_ui=False)
        return sub

    keygen = command("keygen", "create the peer's key (its identity) and print its identifier")
    keygen.add_argument(
        "--bits", type=int, default=DEFAULT_KEY_BITS, help="RSA key size (default 3072)"
    )
    keygen.add_argument(
        "--force",
        action="store_true",
        help="replace an existing key: the peer becomes a new peer for the network",
    )
    run = command("run", "run the peer daemon")
    run.add_argument(
        "--superpeer",
        metavar="HOST:PORT",
        action="append",
        help="the access point (super-peer); repeat it to name where to go when it is down",
    )
    trust = run.add_mutually_exclusive_group()
    trust.add_argument(
        "--ca",
        metavar="FILE",
        help="trust the access point if the network CA (this PEM file) vouches",
    )
    trust.add_argument(
        "--pin",
        metavar="FINGERPRINT",
        help="trust only the super-peer with this key fingerprint (pk1-...; `superpeer run` logs it)",
    )
    trust.add_argument(
        "--no-tls",
        action="store_true",
        help="plaintext, for a super-peer run with --no-tls (no identification)",
    )
    web = run.add_mutually_exclusive_group()
    web.add_argument(
        "--ui",
        nargs="?",
        const="127.0.0.1:0",
        metavar="HOST:PORT",
        help="serve the web app here (default: on, at a free port of 127.0.0.1; a bare PORT "
        "means 127.0.0.1:PORT; another host is reachable from other machines: every request "
        "still needs the token)",
    )
    web.add_argument("--no-ui", action="store_true", help="no web app")
    run.add_argument("--log-level", default="INFO", help="stderr log level (default INFO)")
    run.add_argument(
        "--log-format",
        choices=daemonlog.FORMATS,
        default="text",
        help="stderr log lines: key=value text or one JSON object per line (default text)",
    )
    command("advertise", "say what this peer publishes").add_argument(
        "file", metavar="FILE", help="the advertisement: JSON, or TOML (.toml)"
    )
    schema = command(
        "publish-schema", "publish RDFS axioms: publications are matched under their closure"
    )
    schema.add_argument("file", metavar="FILE", help="the schema document")
    schema.add_argument(
        "--format",
        choices=["turtle", "nt", "xml", "json-ld"],
        help="the document's format (default: from the file name, else turtle)",
    )
    subscribe = command("subscribe", "subscribe with a QEL or SPARQL query")
    subscribe.add_argument("query", metavar="QUERY|FILE", help="the query, or a file holding it")
    subscribe.add_argument("--id", help="the subscription's id (default: a hash of the query)")
    subscribe.add_argument("--expires", metavar="WHEN", help=EXPIRES_HELP)
    subscribe.add_argument(
        "--on",
        choices=["change"],
        help="also hear of extensions of a resource it matched already (default: once, when "
        "what is known of the resource starts matching)",
    )
    command("unsubscribe", "withdraw a subscription").add_argument("id", metavar="ID")
    publish = command("publish", "publish the resources an RDF document describes")
    publish.add_argument("file", metavar="FILE", help='the RDF document ("-" for stdin)')
    publish.add_argument(
        "--format",
        choices=["turtle", "nt", "xml", "json-ld"],
        help="the document's format (default: from the file name, else turtle)",
    )
    publish.add_argument("--id", help="the publication's id (default: a hash of its content)")
    publish.add_argument("--expires", metavar="WHEN", help=EXPIRES_HELP)
    changes = publish.add_mutually_exclusive_group()
    changes.add_argument(
        "--replaces", metavar="ID", help="a new version of the resource published under ID"
    )
    changes.add_argument(
        "--extends", metavar="ID", help="add the document's triples to the resource ID"
    )
    command("retract", "withdraw a resource this peer published").add_argument("id", metavar="ID")
    publish.add_argument(
        "--batch-bytes",
        type=_positive_int,
        default=bulk.BATCH_BYTES,
        metavar="BYTES",
        help="a larger document goes to the daemon in batches of at most BYTES of N-Triples, "
        f"going on where an interrupted run stopped (default {bulk.BATCH_BYTES})",
    )
    publish.add_argument(
        "--batch-resources",
        type=_positive_int,
        default=bulk.BATCH_RESOURCES,
        metavar="N",
        help=f"at most N resources per batch (default {bulk.BATCH_RESOURCES})",
    )
    publish.add_argument(
        "--batches-in-flight",
        type=_positive_int,
        default=bulk.BATCHES_IN_FLIGHT,
        metavar="N",
        help=f"batches sent before the first is answered (default {bulk.BATCHES_IN_FLIGHT})",
    )
    publish.add_argument(
        "--file",
        dest="files",
        action="append",
        default=[],
        metavar="[SUBJECT=]PATH",
        help="the file of the resource the document describes (SUBJECT=PATH for each resource "
        "of a document with several); the daemon keeps a copy and serves it to other peers",
    )
    fetch = command("fetch", "get the resource of a publication in the inbox from its owner")
    fetch.add_argument("publication", metavar="PUBLICATION_ID")
    fetch.add_argument("--owner", help="the owner's public identifier, if several used the id")
    fetch.add_argument("--out", help="where to put the file (default: beside the inbox record)")
    fetch.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds to wait for it (default 30; an owner offline answers later, by itself)",
    )
    fetch.add_argument(
        "--status", action="store_true", help="only show how an earlier fetch is going"
    )
    inbox = command("inbox", "list the notifications received")
    inbox.add_argument("--follow", action="store_true", help="keep printing new notifications")
    command("status", "show the daemon's state")
    locate = command("locate", "ask the network whether a peer is online, and where")
    locate.add_argument(
        "public_id",
        metavar="PUBLIC_ID",
        help="the peer's public identifier (pk1-...; its name on a plaintext network)",
    )
    command("leave", "leave the network for good (keeps the inbox) and stop the daemon")
    command(
        "stop", "stop the daemon; the peer stays registered and its access point keeps its mail"
    )
    command("ui", "open the running daemon's web app in the default browser").add_argument(
        "--no-browser", action="store_true", help="only print its address"
    )
    return parser


# -- run ----------------------------------------------------------------------------------------
def _run(config: PeerConfig, log_level: str, log_format: str, *, as_json: bool = False) -> int:
    import trio

    from peer.daemon import DaemonError
    from peer.identity import IdentityError, passphrase_from

    passphrase = None
    if config.security.tls:
        try:
            passphrase = passphrase_from(os.environ)
        except IdentityError as error:
            raise UsageError(str(error)) from None

    try:
        daemonlog.configure(level=log_level, form=log_format)
    except ValueError as error:
        raise UsageError(str(error)) from None
    try:
        trio.run(_serve_until_signal, config, passphrase, as_json)
    except (DaemonError, OSError, BaseExceptionGroup) as caught:
        leaves = list(_leaves(caught))
        for error in leaves:
            if isinstance(error, DaemonError):
                return _fail(str(error), 2)
        if all(isinstance(e, OSError) for e in leaves):
            return _fail(f"the daemon stopped: {_stopped_because(leaves[0], config)}", 1)
        raise
    return 0


def _stopped_because(error: OSError, config: PeerConfig) -> str:
    """Why the daemon stopped; for a full disk also how much space is left and that nothing
    was lost: a notification is acknowledged only once its record is written, so its access
    point keeps every one the inbox could not take, and sends it when the daemon is back."""
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return str(error)
    where = Path(error.filename or config.data_dir)
    directory = where if where.is_dir() else where.parent
    try:
        usage = shutil.disk_usage(directory)
        space = f"{usage.free} bytes free of {usage.total} on the file system of {directory}"
    except OSError as unknown:
        space = f"the free space of {directory} is not known: {unknown.strerror}"
    return (
        f"could not write {error.filename or 'a file in ' + str(directory)}: {error.strerror} "
        f"({space}); the access point keeps what was not written: make room and start it again"
    )


async def _serve_until_signal(config: PeerConfig, passphrase: bytes | None, as_json: bool) -> None:
    import signal

    import trio

    from peer.daemon import Running, serve_peer

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def serve(*, task_status: trio.TaskStatus[Running]) -> None:
                await serve_peer(config, passphrase=passphrase, task_status=task_status)
                nursery.cancel_scope.cancel()  # the peer left the network

            running: Running = await nursery.start(serve)
            if as_json:
                print(
                    json.dumps(
                        {
                            "peer_id": running.peer_id,
                            "name": running.name,
                            "access_point": running.access_point,
                            "control": str(running.control_path),
                            "ui": running.ui_url,
                        }
                    ),
                    flush=True,
                )
            else:
                print(
                    f"peer {_who(running.peer_id, running.name)} running (access point "
                    f"{running.access_point}, control socket {running.control_path})",
                    flush=True,
                )
                if running.ui_url is not None:
                    print(f"web app: {running.ui_url} (`peer ui` opens it)", flush=True)
            async for number in signals:
                logging.getLogger("peer").info(
                    "event=stopping signal=%s", signal.Signals(number).name
                )
                nursery.cancel_scope.cancel()
                return


def _who(peer_id: str, name: str) -> str:
    return peer_id if peer_id == name else f"{peer_id} ({name})"


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


# -- keygen -------------------------------------------------------------------------------------
def _keygen(args: argparse.Namespace, config: PeerConfig) -> int:
    """Creates the key (never over an existing one without ``--force``). Replacing a key makes a
    new identity: the registration of the old one goes with it, and no daemon may be running."""
    import crypto
    from peer.files import DataDirBusy, hold_data_dir
    from peer.identity import IdentityError, create_key, forget_registration, passphrase_from

    path = config.key_path
    try:
        passphrase = passphrase_from(os.environ)
        if path.is_relative_to(config.data_dir):
            config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if args.force:
            with hold_data_dir(config.data_dir):
                key = create_key(path, bits=args.bits, passphrase=passphrase, force=True)
                dropped = forget_registration(config.identity_dir)
        else:
            key = create_key(path, bits=args.bits, passphrase=passphrase, force=False)
            dropped = False
    except IdentityError as error:
        raise UsageError(str(error)) from None
    except DataDirBusy:
        raise UsageError(
            f"a peer daemon is running with the data directory {config.data_dir}; stop it before "
            "replacing its key"
        ) from None
    except OSError as error:
        raise UsageError(f"cannot use the data directory {config.data_dir}: {error}") from None
    encrypted = ", encrypted with $PEER_KEY_PASSPHRASE" if passphrase is not None else ""
    public_id = crypto.public_identifier(key)
    sentence = f"public identifier {public_id} (key {path}{encrypted})"
    if dropped:
        sentence += "\nthe registration of the replaced key was removed: the peer registers again"
    result = {
        "public_id": public_id,
        "key": str(path),
        "encrypted": passphrase is not None,
        "registration_removed": dropped,
    }
    return _say(args, result, sentence)


# -- the commands -------------------------------------------------------------------------------
def _call(config: PeerConfig, command: str, **arguments: str) -> dict[str, Any]:
    """One command to the daemon; its result, or ``CommandFailed``."""
    with ControlClient(config.control_path, timeout=_answer_timeout(config)) as control:
        return _result(*control.call(command, **arguments))


def _result(ok: bool, body: dict[str, Any]) -> dict[str, Any]:
    """A reply's body, or ``CommandFailed`` (after the results of a partly done ``publish``)."""
    if not ok:
        _report_results(body.get("results", []))
        raise CommandFailed(str(body.get("message")), EXIT_CODES.get(body.get("error", ""), 2))
    return body


def _answer_timeout(config: PeerConfig) -> float:
    """The daemon always answers: the access point has ``request_timeout`` to answer it, and
    ``locate_timeout`` for a look-up."""
    return max(60.0, 2 * config.request_timeout, 2 * config.locate_timeout)


def _advertise(args: argparse.Namespace, config: PeerConfig) -> int:
    path = Path(args.file)
    text = _read(path)
    if path.suffix == ".toml":
        try:
            text = toml_to_json(tomllib.loads(text))
        except tomllib.TOMLDecodeError as error:
            raise UsageError(f"{path} is not valid TOML: {error}") from None
    result = _call(config, "advertise", advertisement=text)
    return _say(args, result, f"advertised: {_summary(result['advertisement'])}")


def _publish_schema(args: argparse.Namespace, config: PeerConfig) -> int:
    path = Path(args.file)
    fmt = args.format or FORMATS_BY_SUFFIX.get(path.suffix.lower(), "turtle")
    result = _call(config, "publish-schema", data=_read(path), format=fmt)
    return _say(
        args, result, f"published a schema of {_plural(result['axioms'], 'axiom', 'axioms')}"
    )


def _summary(advertisement: dict[str, int]) -> str:
    return ", ".join(
        _plural(advertisement[key], singular, plural)
        for key, singular, plural in (
            ("schemas", "schema", "schemas"),
            ("properties", "property", "properties"),
            ("value_sets", "value set", "value sets"),
        )
    )


def _plural(count: int, singular: str, plural: str) -> str:
    return f"{count} {singular if count == 1 else plural}"


def _subscribe(args: argparse.Namespace, config: PeerConfig) -> int:
    query = args.query
    if _is_file(query):
        query = _read(Path(query))
    arguments = {"query": query, **_expires(args)}
    if args.id is not None:
        arguments["id"] = args.id
    if args.on is not None:
        arguments["on"] = args.on
    result = _call(config, "subscribe", **arguments)
    verb = "already subscribed" if result["repeated"] else "subscribed"
    return _say(args, result, f"{verb} {result['id']}: {result['query']}")


def _expires(args: argparse.Namespace) -> dict[str, str]:
    """``--expires`` as the absolute time the daemon puts on the wire (none if not given)."""
    if args.expires is None:
        return {}
    try:
        return {"expires": repr(parse_expires(args.expires, time.time()))}
    except ValueError as error:
        raise CommandFailed(str(error), 2) from None


def _unsubscribe(args: argparse.Namespace, config: PeerConfig) -> int:
    result = _call(config, "unsubscribe", id=args.id)
    return _say(args, result, f"unsubscribed {args.id}")


def _publish(args: argparse.Namespace, config: PeerConfig) -> int:
    if args.file == "-":
        data = sys.stdin.read()
        fmt = args.format or "turtle"
    else:
        path = Path(args.file)
        data = _read(path)
        fmt = args.format or FORMATS_BY_SUFFIX.get(path.suffix.lower(), "turtle")
    if len(data.encode()) > args.batch_bytes:
        if args.id or args.replaces or args.extends or args.files:
            raise UsageError(
                f"a document larger than {args.batch_bytes} bytes (--batch-bytes) is published "
                "in batches, each resource under the hash of its content: --id, --replaces, "
                "--extends and --file take a smaller document"
            )
        return _publish_in_batches(args, config, data.encode(), fmt)
    arguments = {"data": data, "format": fmt, **_expires(args)}
    if args.id is not None:
        arguments["id"] = args.id
    for change, resource in (("update", args.replaces), ("extend", args.extends)):
        if resource is not None:
            if args.id is not None and args.id != resource:
                raise CommandFailed(f"--id {args.id} and the resource {resource} differ", 2)
            arguments.update(id=resource, change=change)
    if args.files:
        files = {}
        for item in args.files:
            # SUBJECT=PATH splits at the last "=", unless the whole argument is a file's name
            subject, _, path = ("", "", item) if Path(item).exists() else item.rpartition("=")
            files[subject] = str(Path(path).expanduser().resolve())
        arguments["files"] = json.dumps(files)
    result = _call(config, "publish", **arguments)
    if args.json:
        print(json.dumps(result))
    else:
        _report_results(result["results"])
    return 0


def _publish_in_batches(args: argparse.Namespace, config: PeerConfig, raw: bytes, fmt: str) -> int:
    """A large document in batches (``peer.bulk``), going on from where an earlier run of the
    same command stopped (``peer.jobs``), with a progress bar on stderr; then what was
    published and what was refused, why, and the first subjects per reason."""
    sizes = {"max_bytes": args.batch_bytes, "max_resources": args.batch_resources}
    key = bulk.document_key(raw, fmt, **sizes)
    bar = _ProgressBar(sys.stderr)
    bar.note(f"reading the document ({len(raw):,} bytes)")
    try:
        reading = bulk.read(raw, fmt, max_bytes=args.batch_bytes)
        parts = bulk.batches(reading.resources, **sizes)
    except (bulk.BulkError, ValueError) as error:
        raise UsageError(f"cannot publish: {error}") from None
    of = {"of": str(len(parts)), "resources": str(len(reading.resources)), **_expires(args)}
    timeout = _answer_timeout(config)
    with ControlClient(config.control_path, timeout=timeout) as control:
        job = _result(*control.call("job", key=key))["job"]
    done = set() if job is None else set(job["done"])
    answered = sum(len(b.resources) for b in parts if b.number in done)
    started = time.monotonic()
    sent = 0
    failure: dict[str, Any] | None = None
    bar.show(bulk.Progress(answered, len(reading.resources), 0.0))
    for batch, ok, body in _sent_batches(
        config.control_path,
        [b for b in parts if b.number not in done],
        dict(of, job=key),
        in_flight=args.batches_in_flight,
        timeout=timeout,
    ):
        if not ok:
            failure = failure or body
            continue
        answered += len(batch.resources)
        sent += len(batch.resources)
        bar.show(bulk.Progress(answered, len(reading.resources), _rate(sent, started)))
    bar.end()
    if failure is not None:
        raise CommandFailed(
            f"{failure.get('message')}; {answered:,} of {len(reading.resources):,} "
            f"resources answered (job {key}): run the same command again to go on",
            EXIT_CODES.get(failure.get("error", ""), 2),
        )
    rate = _rate(sent, started)
    if parts:
        with ControlClient(config.control_path, timeout=timeout) as control:
            job = _result(*control.call("job", key=key))["job"]
    return _report_job(
        args, key=key, job=job, reading=reading, batches=len(parts), sent=sent, rate=rate
    )


def _sent_batches(
    control_path: Path,
    batches: list[bulk.Batch],
    arguments: dict[str, str],
    *,
    in_flight: int,
    timeout: float,
) -> Iterator[tuple[bulk.Batch, bool, dict[str, Any]]]:
    """Sends ``batches`` (``publish-batch``) over ``in_flight`` control connections at once,
    so that the daemon reads one batch while the access point answers another; yields each
    batch with its reply as it comes. After a failure no batch is sent any more; those in
    flight are still answered (and yielded)."""
    if not batches:
        return
    waiting = deque(batches)
    lock = threading.Lock()
    replies: queue.Queue[tuple[bulk.Batch, bool, dict[str, Any]] | None] = queue.Queue()
    failed = threading.Event()

    def send() -> None:
        try:
            with ControlClient(control_path, timeout=timeout) as control:
                while not failed.is_set():
                    with lock:
                        if not waiting:
                            return
                        batch = waiting.popleft()
                    try:
                        ok, body = control.call(
                            "publish-batch", batch=str(batch.number), data=batch.text, **arguments
                        )
                    except ControlUnavailable as error:
                        ok, body = False, {"error": "unavailable", "message": str(error)}
                    if not ok:
                        failed.set()
                    replies.put((batch, ok, body))
                    if not ok:
                        return
        except ControlUnavailable as error:
            failed.set()
            replies.put((batches[0], False, {"error": "unavailable", "message": str(error)}))
        finally:
            replies.put(None)

    senders = [threading.Thread(target=send, daemon=True) for _ in range(in_flight)]
    for sender in senders:
        sender.start()
    running = len(senders)
    while running:
        reply = replies.get()
        if reply is None:
            running -= 1
        else:
            yield reply


def _rate(count: int, started: float) -> float:
    elapsed = time.monotonic() - started
    return count / elapsed if elapsed > 0 else 0.0


def _report_job(
    args: argparse.Namespace,
    *,
    key: str,
    job: dict[str, Any] | None,
    reading: bulk.Reading,
    batches: int,
    sent: int,
    rate: float,
) -> int:
    """What the whole job published and refused (this run and earlier ones): one line, then a
    line per reason with its count and first subjects; exit 1 if anything was refused."""
    refusals = {
        k: jobs.Refusals(r["count"], r["example"], tuple(r["subjects"]))
        for k, r in (job or {}).get("refused", {}).items()
    }
    refusals = jobs.tally(refusals, reading.refused)
    published = 0 if job is None else job["published"]
    total = len(reading.resources) + len(reading.refused)
    if args.json:
        print(
            json.dumps(
                {
                    "job": key,
                    "resources": total,
                    "batches": batches,
                    "published": published,
                    "refused": {k: r.to_plain() for k, r in refusals.items()},
                    "sent": sent,
                    "rate": round(rate, 1),
                }
            )
        )
    else:
        this_run = (
            f"{sent:,} sent now at {rate:,.0f} resources/s"
            if sent
            else "nothing left to send: the job was done before"
        )
        print(
            f"published {published:,} of {total:,} resources in {batches:,} batches "
            f"(job {key}; {this_run})"
        )
        for refused in sorted(refusals.values(), key=lambda r: -r.count):
            subjects = ", ".join(f"<{s}>" for s in refused.subjects)
            more = ", ..." if refused.count > len(refused.subjects) else ""
            print(f"refused {refused.count:,}: {refused.example} ({subjects}{more})")
    return 1 if refusals else 0


class _ProgressBar:
    """The progress of a long command on ``stream``: one line redrawn on a terminal (at most
    ``REDRAWS`` a second), else a line each tenth of the way."""

    REDRAWS: Final = 10.0

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.terminal = stream.isatty()
        self._drawn = 0.0
        self._tenth = -1
        self._open = False

    def note(self, text: str) -> None:
        print(f"peer: {text}", file=self.stream, flush=True)

    def show(self, progress: bulk.Progress) -> None:
        if self.terminal:
            now = time.monotonic()
            if now - self._drawn >= 1 / self.REDRAWS or progress.done == progress.total:
                self.stream.write(f"\r{progress.line()}")
                self.stream.flush()
                self._drawn, self._open = now, True
            return
        tenth = 10 * progress.done // max(progress.total, 1)
        if tenth > self._tenth:
            self._tenth = tenth
            print(progress.line(), file=self.stream, flush=True)

    def end(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def _retract(args: argparse.Namespace, config: PeerConfig) -> int:
    result = _call(config, "retract", id=args.id)
    return _say(args, result, f"retracted {args.id}")


def _fetch(args: argparse.Namespace, config: PeerConfig) -> int:
    """Fetched, or still waiting for the owner (a rendezvous: exit 0, it completes by itself);
    a failed fetch exits 1."""
    arguments = {"publication": args.publication, "wait": str(max(0.0, args.wait))}
    if args.owner:
        arguments["owner"] = args.owner
    if args.status:
        arguments["status"] = "true"
    if args.out:
        arguments["out"] = str(Path(args.out).expanduser().resolve())
    with ControlClient(config.control_path, timeout=_answer_timeout(config) + args.wait) as control:
        found = _result(*control.call("fetch", **arguments))
    if args.json:
        print(json.dumps(found))
    elif found["state"] == "done":
        print(
            f"fetched {found['publication']}: {found['size']} bytes, sha256 verified, in {found['out']}"
        )
    elif found["state"] == "failed":
        print(f"peer: fetch of {found['publication']} failed: {found['reason']}", file=sys.stderr)
    else:
        print(
            f"waiting for {found['publication']} ({found['received']} of {found['size']} bytes): "
            "the owner uploads it to the access point when it is online (a rendezvous); "
            "`peer fetch` again shows the progress"
        )
    return 1 if found["state"] == "failed" else 0


def _report_results(results: list[dict[str, Any]]) -> None:
    """One line per publication: published ones on stdout, the others on stderr."""
    for result in results:
        line = f"{result['outcome']} {result['id']} <{result['subject']}>"
        if "sha256" in result:
            line += f" with its file ({result['size']} bytes, sha256 {result['sha256']})"
        if result.get("alone"):
            line += (
                " (held by its access point alone, cut off from the other super-peers: "
                "kept here and sent again until a second copy is made)"
            )
        if result["outcome"] == "published":
            print(line)
        else:
            reason = f": {result['reason']}" if "reason" in result else ""
            print(f"peer: {line}{reason}", file=sys.stderr)


def _inbox(args: argparse.Namespace, config: PeerConfig) -> int:
    with ControlClient(config.control_path, timeout=None if args.follow else 60.0) as control:
        after = 0
        wait = False
        while True:
            arguments = {"after": str(after)}
            if wait:
                arguments["wait"] = "true"
            body = _result(*control.call("inbox", **arguments))
            for record in body["records"]:
                print(json.dumps(record) if args.json else _record_line(record), flush=True)
                after = record["sequence"]
            if not body["records"]:
                if not args.follow:
                    return 0
                wait = True


def _record_line(record: dict[str, Any]) -> str:
    received = _when(record["received_at"])
    matched = ",".join(record["subscriptions"])
    return (
        f"{record['sequence']:>5}  {received}  {record.get('kind', 'added'):<7}  "
        f"{record['publication']}  <{record['subject']}>  "
        f"from {record['owner']} at {record['access_point']} ({record['hops']} hops; {matched})"
    )


def _clock_offset(offset: float | None, error: float | None) -> str:
    """This computer's clock against its access point's, in words (``clocks``: nothing the
    peer is owed depends on it; expiries given as times of day and what the inbox shows do)."""
    if offset is None:
        return "offset from the access point not measured yet"
    margin = f" (+/- {error:.3f} s)" if error else ""
    if abs(offset) < 0.0005:
        return f"agrees with the access point's{margin}"
    side = "behind" if offset > 0 else "ahead of"
    return f"{abs(offset):.3f} s {side} the access point's{margin}"


def _status(args: argparse.Namespace, config: PeerConfig) -> int:
    status = _call(config, "status")
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    since = _when(status["since"])
    if status["connected"]:
        link = f"connected to {status['superpeer_id']} since {since}"
    else:
        link = "not connected"
        if status["last_error"]:
            link += f" ({status['last_error']})"
        if status["retry_at"] is not None:
            link += f"; next attempt at {_when(status['retry_at'])}"
    print(f"peer {_who(status['peer_id'], status['name'])}  (data {status['data_dir']})")
    print(f"  access point {status['access_point']}: {link}")
    print(
        f"  clock: {_clock_offset(status.get('clock_offset_seconds'), status.get('clock_error_seconds'))}"
    )
    security = status["security"]
    if security["tls"]:
        registered = security["registered_with"]
        print(
            f"  security: TLS, trusting {security['trust']}; "
            + (f"registered with {registered}" if registered else "not registered yet")
        )
    else:
        print("  security: plaintext (--no-tls)")
    advertisement = status["advertisement"]
    if advertisement is None:
        print("  advertisement: none")
    elif "problem" in advertisement:
        print(f"  advertisement: unusable ({advertisement['problem']})")
    else:
        print(f"  advertisement: {_summary(advertisement)}")
    print(f"  schemas published: {status['schemas']}")
    print(f"  subscriptions: {len(status['subscriptions'])}")
    for name, query in status["subscriptions"].items():
        every = " (on change)" if name in status["on_change"] else ""
        print(f"    {name}{every}: {' '.join(query.split())}")
    if status["in_doubt"]:
        print(f"  withdrawing on reconnection: {', '.join(status['in_doubt'])}")
    inbox = status["inbox"]
    print(
        f"  inbox: {_plural(inbox['records'], 'notification', 'notifications')}, "
        f"{_plural(inbox['duplicates_ignored'], 'repeat', 'repeats')} ignored"
        + (
            f", {inbox['withdrawn_ignored']} for withdrawn subscriptions ignored"
            if inbox.get("withdrawn_ignored")
            else ""
        )
        + (f", {inbox['unreadable']} unreadable" if inbox["unreadable"] else "")
    )
    counters = status["counters"]
    print(
        f"  requests: {counters['requests']} sent, {counters['acknowledged']} acknowledged, "
        f"{counters['refused']} refused, {counters['failed']} failed; "
        f"connections: {counters['connections']}"
    )
    kept = status.get("kept") or {}
    if kept.get("publications") or kept.get("forgotten"):
        print(
            f"  held by one super-peer alone: "
            f"{_plural(kept['publications'], 'publication', 'publications')}, sent again until "
            f"copied ({kept['forgotten']} forgotten unconfirmed)"
        )
    offset = status.get("clock_offset_seconds")
    print(
        "  clock offset from the access point: "
        + ("not measured" if offset is None else f"{offset:+.3f} s")
    )
    for move in status.get("moves", []):
        print(f"  moved from {move['from']} to {move['to']} at {_when(move['at'])}")
    if status.get("ui"):
        print(f"  web app: {status['ui']} (`peer ui` opens it)")
    for problem in status["problems"]:
        print(f"  problem: {problem}")
    return 0


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _locate(args: argparse.Namespace, config: PeerConfig) -> int:
    """Not online is an answer, not a failure (exit 0); ``--json`` says it to scripts."""
    found = _call(config, "locate", public_id=args.public_id)
    if args.json:
        print(json.dumps(found))
    elif found["online"]:
        print(
            f"{found['public_id']} is online at {found['address']} "
            f"(super-peer {found['superpeer']} at {found['access_point']})"
        )
    else:
        print(f"{found['public_id']} is not online")
    return 0


def _leave(args: argparse.Namespace, config: PeerConfig) -> int:
    result = _call(config, "leave")
    return _say(
        args,
        result,
        f"peer {result['peer_id']} left the network: its subscriptions and advertisement are "
        "gone, its inbox is kept; the daemon stopped",
    )


def _stop(args: argparse.Namespace, config: PeerConfig) -> int:
    """Asks the daemon to stop, then waits until it has let go of its data directory."""
    result = _call(config, "stop")
    stopped = _wait_released(config.data_dir, STOP_SECONDS)
    if not stopped:
        raise CommandFailed(
            f"the daemon was asked to stop but still holds {config.data_dir} after "
            f"{STOP_SECONDS:g} s",
            3,
        )
    return _say(
        args,
        {**result, "stopped": True},
        f"peer {result['peer_id']} stopped; it stays registered, and its access point keeps "
        "its subscriptions and what arrives for it until it runs again",
    )


def _wait_released(directory: Path, seconds: float) -> bool:
    """Whether the daemon's lock on ``directory`` is free within ``seconds`` (tried without
    writing to the lock file: it is the daemon's)."""
    import fcntl

    from peer.files import LOCK_FILE

    deadline = time.monotonic() + seconds
    while True:
        try:
            descriptor = os.open(directory / LOCK_FILE, os.O_RDONLY)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            return True
        finally:
            os.close(descriptor)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _ui(args: argparse.Namespace, config: PeerConfig) -> int:
    """The running daemon's web app: its address (with the token), opened in the default
    browser (``webbrowser``: ``$BROWSER`` if set, else the desktop's)."""
    status = _call(config, "status")
    if not status.get("ui"):
        raise CommandFailed(
            "the daemon runs without its web app (it was started with --no-ui or [ui] listen = "
            "false); start it again without that",
            2,
        )
    try:
        url = config.ui_url_path.read_text().strip()
    except OSError as error:
        raise CommandFailed(f"cannot read {config.ui_url_path}: {error.strerror}", 2) from None
    opened = False if args.no_browser else webbrowser.open(url)
    if opened:
        sentence = f"opening {url} in the default browser"
    elif args.no_browser:
        sentence = url
    else:
        sentence = f"{url} (no browser could be opened here: open the address yourself)"
    return _say(args, {"url": url, "opened": opened}, sentence)


def _is_file(argument: str) -> bool:
    try:
        return Path(argument).is_file()
    except (OSError, ValueError):  # not a possible path (too long, NUL, ...): it is a query
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None


_COMMANDS = {
    "keygen": _keygen,
    "advertise": _advertise,
    "publish-schema": _publish_schema,
    "subscribe": _subscribe,
    "unsubscribe": _unsubscribe,
    "retract": _retract,
    "publish": _publish,
    "inbox": _inbox,
    "status": _status,
    "locate": _locate,
    "fetch": _fetch,
    "leave": _leave,
    "stop": _stop,
    "ui": _ui,
}


if __name__ == "__main__":
    sys.exit(main())
