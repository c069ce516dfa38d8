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
from collections.abc import Iterator
from pathlib import Path
from typing import Final

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


class WorkloadError(ValueError):
    """A workload line that is not a valid operation."""


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
