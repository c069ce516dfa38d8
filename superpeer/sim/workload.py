"""The workload format the simulator and the replay tool read: one JSON object per line, applied in
order. Operations and their fields:

=============  ==================================================================================
op             fields
=============  ==================================================================================
join           ``peer``, ``superpeer`` (index of the access point, 0 <= k < number of super-peers)
advertise      ``peer`` and the advertisement's own keys (``prefixes``, ``schemas``,
               ``properties``, ``values``; see ``qel.parse_advertisement``)
subscribe      ``peer``, ``id`` (the peer's name for it), ``query`` (QEL text or SPARQL)
unsubscribe    ``peer``, ``id``
publish        ``peer``, ``id`` (publication id), ``data`` (the RDF document), ``format``
               (``turtle`` by default; ``nt``, ``xml``, ``json-ld``)
detach         ``peer`` (goes offline; keeps its subscriptions; notifications are kept for it)
attach         ``peer`` (comes back and receives what was kept)
leave          ``peer`` (leaves for good)
locate         ``peer``, ``id`` (the peer's name for the look-up), ``target`` (the peer to find)
=============  ==================================================================================

A document with several subjects makes several publications, ``id#1``, ``id#2``, ... in subject
order. ``read_workload`` checks every line's shape and reports the first bad one with its number.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import qel
from wire import messages as m

OPERATIONS: Final = {
    "join": {"peer", "superpeer"},
    "advertise": {"peer"},
    "subscribe": {"peer", "id", "query"},
    "unsubscribe": {"peer", "id"},
    "publish": {"peer", "id", "data"},
    "detach": {"peer"},
    "attach": {"peer"},
    "leave": {"peer"},
    "locate": {"peer", "id", "target"},
}
OPTIONAL: Final = {
    "advertise": {"prefixes", "schemas", "properties", "values"},
    "publish": {"format"},
}


REQUESTS: Final = frozenset({"advertise", "subscribe", "unsubscribe", "publish", "locate"})
"""The operations that are a peer's requests to its access point."""


class WorkloadError(ValueError):
    """A workload line that is not a valid operation."""


class OperationError(ValueError):
    """An operation whose content the peer's own parsers refuse: nothing is sent."""


def peer_requests(op: dict, public_id: Callable[[str], str] = str) -> list[object]:
    """The messages a peer sends for ``op`` (one of ``REQUESTS``), made in one place so that the
    simulator and the replay tool send the same things. ``public_id`` names a ``locate`` target
    the way the network knows it (on a TLS network, by its key)."""
    kind = op["op"]
    try:
        if kind == "advertise":
            fields = {k: v for k, v in op.items() if k not in ("op", "peer")}
            return [m.Advertise(advertisement=qel.parse_advertisement(fields))]
        if kind == "subscribe":
            return [m.Subscribe(id=op["id"], subscription=qel.parse_subscription(op["query"]))]
        if kind == "unsubscribe":
            return [m.Unsubscribe(id=op["id"])]
        if kind == "publish":
            publications = qel.parse_publications(
                op["data"], op.get("format", "turtle"), publisher=op["peer"], id=op["id"]
            )
            return [m.Publish(publication=publication) for publication in publications]
        if kind == "locate":
            return [m.Locate(id=op["id"], public_id=public_id(op["target"]))]
    except (qel.AdvertisementError, qel.QueryError, qel.PublicationError) as error:
        raise OperationError(str(error)) from None
    raise ValueError(f"{kind!r} is not a peer request")


def check_operation(op: object, line: int) -> dict:
    if not isinstance(op, dict):
        raise WorkloadError(f"line {line}: an operation is a JSON object")
    name = op.get("op")
    if name not in OPERATIONS:
        raise WorkloadError(f"line {line}: unknown op {name!r} (known: {', '.join(OPERATIONS)})")
    required = OPERATIONS[name]
    missing = required - set(op)
    if missing:
        raise WorkloadError(f"line {line}: {name} needs {sorted(missing)}")
    extra = set(op) - required - OPTIONAL.get(name, set()) - {"op"}
    if extra:
        raise WorkloadError(f"line {line}: {name} does not take {sorted(extra)}")
    for key in ("peer", "id", "target"):
        if key in op:
            if isinstance(op[key], bool) or not isinstance(op[key], str | int):
                raise WorkloadError(f"line {line}: {key} must be a string or a number")
            op[key] = str(op[key])
    for key in ("query", "data", "format"):
        if key in op and not isinstance(op[key], str):
            raise WorkloadError(f"line {line}: {key} must be a string")
    if name == "join" and (
        not isinstance(op["superpeer"], int) or isinstance(op["superpeer"], bool)
    ):
        raise WorkloadError(f"line {line}: superpeer must be an integer index")
    return op


def read_workload(path: str | Path) -> Iterator[dict]:
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                op = json.loads(line)
            except ValueError as error:
                raise WorkloadError(f"line {number}: not JSON: {error}") from None
            yield check_operation(op, number)
