"""The local control protocol between the ``peer`` commands and the running daemon.

Transport: the Unix socket ``<data>/control.sock`` (mode 0600: only the user who runs the daemon
can connect), with the network's frames (``wire.framing``) under larger limits (``CONTROL_LIMITS``:
a publication document or a page of the inbox can exceed what one network frame carries). The
command side sends ``Hello(role="control", node_id="cli")`` and gets ``Welcome(node_id=<peer id>,
address=<access point>)``; then each ``ControlRequest`` gets exactly one ``ControlReply``, in
order, and the connection may carry several.

A reply's body is JSON. When ``ok``, it is the command's result. Otherwise it is
``{"error": KIND, "message": TEXT}`` (plus ``"results"`` for a partly done ``publish``), where
``KIND`` says whose fault it is and so the command's exit code (``EXIT_CODES``):

* ``refused`` - the access point refused the request (1);
* ``invalid`` - the request is wrong before it reaches the network: a query outside the language,
  an unreadable document, an unknown subscription id, a missing argument (2);
* ``unavailable`` - the access point is not connected, or the connection was lost before it
  answered, or a look-up had no answer in time (3).

Commands and their arguments (all strings; ``?`` marks optional ones)::

    advertise    advertisement=<JSON text>
    subscribe    query=<QEL or SPARQL text>  id?=<id>
    unsubscribe  id=<id>
    publish      data=<RDF document>  format?=<turtle|nt|xml|json-ld>  id?=<id>
                 change?=<publish|update|extend> (update, extend: id names the resource)
    publish-batch  job=<key> batch=<n> of=<batches> resources=<count> data=<N-Triples>
                 expires?=<time>   (one batch of a bulk publication: ``peer.bulk``, ``peer.jobs``)
    job          key=<key>   (a bulk publication's job: which batches were answered, what was
                 published and refused; ``{"job": null}`` if none was started)
    retract      id=<id>
    inbox        after?=<sequence>  wait?=<true|false>   (wait: block until there is a record)
    status
    locate       public_id=<the peer's public identifier; its name on a plaintext network>
    leave        (leaves the network for good, then the daemon stops)
    stop         (the daemon stops after the reply; the peer stays registered)

``locate`` answers ``{"id", "public_id", "online", "address", "superpeer", "access_point"}``
(the ``Located`` message; the addresses are empty when the peer is not online).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Final

import wire
from wire import messages as m
from wire.codec import WireLimits
from wire.framing import Link, Violation

CONTROL_LIMITS: Final = WireLimits(
    max_frame_bytes=16 * 1024 * 1024,
    max_string_bytes=16 * 1024 * 1024,
    max_binary_bytes=0,
    max_collection_items=16,
    max_depth=4,
)
EXIT_CODES: Final = {"refused": 1, "invalid": 2, "unavailable": 3}
INBOX_PAGE_BYTES: Final = 1024 * 1024
"""How much record JSON one ``inbox`` reply carries (at least one record)."""
READ_SIZE: Final = 65536


class ControlUnavailable(Exception):
    """No daemon answers on the control socket, or it went away mid-conversation."""


class ControlClient:
    """A blocking connection to a daemon's control socket (the command-line side).

    Blocking sockets keep the commands free of an event loop; ``timeout`` bounds every wait
    (None waits for as long as it takes, for ``inbox --follow``).
    """

    def __init__(self, path: Path, *, timeout: float | None) -> None:
        self.path = path
        self.timeout = timeout
        self.peer_id = ""
        self.access_point = ""
        self._socket: socket.socket | None = None
        self._link = Link(accepting=False, limits=CONTROL_LIMITS)
        self._events: list[object] = []

    def __enter__(self) -> ControlClient:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise ControlUnavailable(
                f"no peer daemon is running with the data directory {self.path.parent} "
                "(start one with: peer run --superpeer HOST:PORT --ca FILE|--pin FINGERPRINT "
                "--data-dir DIR)"
            ) from None
        except OSError as error:
            sock.close()
            raise ControlUnavailable(
                f"cannot reach the peer daemon at {self.path}: {error}"
            ) from None
        self._socket = sock
        try:
            hello = m.Hello(
                role="control", node_id="cli", address="", protocol=wire.PROTOCOL_VERSION
            )
            self._send(self._link.send(hello))
            welcome = self._receive()
        except BaseException:
            self.close()
            raise
        assert isinstance(welcome, m.Welcome)
        self.peer_id, self.access_point = welcome.node_id, welcome.address
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def call(self, command: str, **arguments: str) -> tuple[bool, dict[str, Any]]:
        """Sends one command; returns ``ok`` and the reply's JSON body."""
        self._send(self._link.send(m.ControlRequest(command=command, arguments=arguments)))
        reply = self._receive()
        if not isinstance(reply, m.ControlReply):
            raise ControlUnavailable(f"the daemon sent {type(reply).KIND} instead of a reply")  # type: ignore[attr-defined]
        try:
            body = json.loads(reply.body)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {"error": "invalid", "message": reply.body} if not reply.ok else {}
        return reply.ok, body

    def _send(self, data: bytes) -> None:
        assert self._socket is not None
        try:
            self._socket.sendall(data)
        except OSError as error:
            raise ControlUnavailable(f"the peer daemon went away ({error})") from None

    def _receive(self) -> object:
        assert self._socket is not None
        while not self._events:
            try:
                data = self._socket.recv(READ_SIZE)
            except TimeoutError:
                raise ControlUnavailable(
                    f"the peer daemon did not answer within {self.timeout:g} s"
                ) from None
            except OSError as error:
                raise ControlUnavailable(f"the peer daemon went away ({error})") from None
            if not data:
                raise ControlUnavailable("the peer daemon closed the connection (stopped?)")
            for event in self._link.receive_data(data):
                if isinstance(event, Violation):
                    raise ControlUnavailable(f"control protocol error: {event.reason}")
                self._events.append(event.message)
        return self._events.pop(0)
