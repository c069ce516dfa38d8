"""The workload format the simulator and the replay tool read: one JSON object per line, applied in
order. Operations and their fields:

=============  ==================================================================================
op             fields
=============  ==================================================================================
join           ``peer``, ``superpeer`` (index of the access point, 0 <= k < number of super-peers)
advertise      ``peer`` and the advertisement's own keys (``prefixes``, ``schemas``,
               ``properties``, ``values``; see ``qel.parse_advertisement``)
publish_schema ``peer``, ``data`` (an RDFS schema document: ``qel.parse_schema``), ``format``
               (``turtle`` by default); added to the peer's schemas (``superpeer.schemas``)
subscribe      ``peer``, ``id`` (the peer's name for it), ``query`` (QEL text or SPARQL);
               optional ``expires`` (seconds from the operation: ``superpeer.expiry``) and
               ``on`` (``"change"``: also hear of extensions of a resource it matched already,
               ``superpeer.versions``)
unsubscribe    ``peer``, ``id``
publish        ``peer``, ``id`` (publication id), ``data`` (the RDF document), ``format``
               (``turtle`` by default; ``nt``, ``xml``, ``json-ld``); optional ``expires``
               (seconds from the operation; the resource's updates and extensions keep it) and
               ``file`` (the resource's content as UTF-8 text; every publication of the
               document offers it)
update         ``peer``, ``id``, ``data``, ``format``: a new version of the peer's resource
               published earlier under ``id`` (``superpeer.versions``)
retract        ``peer``, ``id``: the peer's resource published under ``id`` is withdrawn
extend         ``peer``, ``id``, ``data``, ``format``: triples added to that resource
fetch          ``peer``, ``id`` (a publication id the peer was notified of): the peer asks for
               its resource, directly or by rendezvous (``superpeer.rendezvous``)
detach         ``peer`` (goes offline; keeps its subscriptions; notifications are kept for it)
attach         ``peer`` (comes back and receives what was kept)
leave          ``peer`` (leaves for good)
locate         ``peer``, ``id`` (the peer's name for the look-up), ``target`` (the peer to find)
move           ``peer``, ``superpeer`` (the peer connects to another access point; migration)
wait           ``seconds`` (time passes: simulated in the simulator, slept by the replay tool)
superpeer_join     (a new super-peer joins the cube; it gets the next index)
superpeer_leave    ``superpeer`` (a clean departure: its peers go to the super-peer that adopts
                   them)
superpeer_fail     ``superpeer`` (a crash: detected by silence; its attached peers move to the
                   next live super-peer by themselves)
superpeer_restart  ``superpeer`` (a failed super-peer comes back on its data)
superpeer_bounce   ``superpeer`` (killed and started again on its data at once, before anyone
                   noticed: its neighbours learn it from its new incarnation; its attached
                   peers reconnect to it)
superpeer_pause    ``superpeer``, ``seconds`` (the process stops, as with ``SIGSTOP``, and
                   goes on after that long: what was sent to it waits; longer than the
                   failure timeout, its neighbours repair its place and it rejoins when it
                   wakes; its attached peers stay connected)
superpeer_cut      ``superpeer``, ``seconds`` (every connection to it breaks and none can be
                   made for that long; it runs on: each side may declare the other failed;
                   the links' unacknowledged frames are sent again afterwards)
skew           ``superpeer`` (an index) or ``peer``, and ``seconds`` (any sign, at most
               ``MAX_SKEW_SECONDS``): from now on that process's wall clock is that far from
               true time (a bad NTP step, a restored snapshot; its monotonic clock untouched).
               A running super-peer does not step its clock (``clocks``, rule 11): it is
               restarted on its data under the new one (a bounce, as the chaos harness's
               ``skew`` fault restarts a daemon under ``faketime``); one that is down takes it
               when it restarts. A peer's clock changes at once. Nothing anyone is owed
               changes.
partition      ``groups``: lists of super-peer indices; from now on two super-peers can reach
               each other only if some group holds both (a super-peer in two groups is a
               bridge; one in none is cut off from everyone: ``[[3]]`` isolates 3 and nothing
               else, as every other one shares the implicit group of those unlisted). Packets
               between the sides vanish (no reset); each side runs on, and so does the
               workload; peers reach their access points whatever the cut
heal           the partition ends: every super-peer reaches every other one again
=============  ==================================================================================

A document with several subjects makes several publications, ``id#1``, ``id#2``, ... in subject
order. ``read_workload`` checks every line's shape and reports the first bad one with its number.

``Planner`` is what an operation means whatever runs it (the simulator, or the replay tool on real
daemons): it checks the operation against who has joined where, which super-peers are live, and
turns it into ``Step`` s; both runners execute the same steps and report the same errors.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import qel
from peer.session import plan_resend
from qel.resources import Resource, with_resource
from wire import messages as m
from wire.requests import Request

OPERATIONS: Final = {
    "join": {"peer", "superpeer"},
    "advertise": {"peer"},
    "publish_schema": {"peer", "data"},
    "subscribe": {"peer", "id", "query"},
    "unsubscribe": {"peer", "id"},
    "publish": {"peer", "id", "data"},
    "update": {"peer", "id", "data"},
    "retract": {"peer", "id"},
    "extend": {"peer", "id", "data"},
    "detach": {"peer"},
    "attach": {"peer"},
    "leave": {"peer"},
    "locate": {"peer", "id", "target"},
    "fetch": {"peer", "id"},
    "move": {"peer", "superpeer"},
    "wait": {"seconds"},
    "superpeer_join": set(),
    "superpeer_leave": {"superpeer"},
    "superpeer_fail": {"superpeer"},
    "superpeer_restart": {"superpeer"},
    "superpeer_bounce": {"superpeer"},
    "superpeer_pause": {"superpeer", "seconds"},
    "superpeer_cut": {"superpeer", "seconds"},
    "skew": {"seconds"},
    "partition": {"groups"},
    "heal": set(),
}
MAX_SKEW_SECONDS: Final = 3600.0
"""The largest clock skew a workload may give a process (``skew``)."""
OPTIONAL: Final = {
    "advertise": {"prefixes", "schemas", "properties", "values"},
    "publish_schema": {"format"},
    "subscribe": {"expires", "on"},
    "publish": {"format", "expires", "file"},
    "update": {"format"},
    "extend": {"format"},
    "skew": {"superpeer", "peer"},
}


REQUESTS: Final = frozenset(
    {
        "advertise",
        "publish_schema",
        "subscribe",
        "unsubscribe",
        "publish",
        "update",
        "retract",
        "extend",
        "locate",
    }
)
"""The operations that are a peer's requests to its access point."""


ON_CHANGE: Final = "change"
"""A subscription's ``on``: it hears of extensions of resources it matched already."""


class WorkloadError(ValueError):
    """A workload line that is not a valid operation."""


class OperationError(ValueError):
    """An operation whose content the peer's own parsers refuse: nothing is sent."""


class ElsewhereError(OperationError):
    """A change of a resource whose versions another access point keeps (the peer moved since
    it published it there): refused before anything is sent."""


def peer_requests(
    op: dict, public_id: Callable[[str], str] = str, now: float = 0.0
) -> list[object]:
    """The messages a peer sends for ``op`` (one of ``REQUESTS``), made in one place so that the
    simulator and the replay tool send the same things. ``public_id`` names a ``locate`` target
    the way the network knows it (on a TLS network, by its key); ``now`` is the runner's clock,
    from which an ``expires`` in seconds becomes the absolute time the wire carries."""
    kind = op["op"]
    expires = now + op["expires"] if op.get("expires") is not None else None
    try:
        if kind == "advertise":
            fields = {k: v for k, v in op.items() if k not in ("op", "peer")}
            return [m.Advertise(advertisement=qel.parse_advertisement(fields))]
        if kind == "publish_schema":
            axioms = qel.parse_schema(op["data"], op.get("format", "turtle"))
            return [m.PublishSchema(axioms=tuple(sorted(axioms, key=repr)))]
        if kind == "subscribe":
            subscription = qel.parse_subscription(op["query"])
            on_change = op.get("on") == ON_CHANGE
            return [
                m.Subscribe(
                    id=op["id"], subscription=subscription, expires=expires, on_change=on_change
                )
            ]
        if kind == "unsubscribe":
            return [m.Unsubscribe(id=op["id"])]
        if kind in m.CHANGES:
            publications = qel.parse_publications(
                op["data"], op.get("format", "turtle"), publisher=op["peer"], id=op["id"]
            )
            if "file" in op:
                resource = resource_of_text(op["file"])
                publications = [with_resource(p, resource) for p in publications]
            if kind != "publish":
                expires = None  # an update or extension keeps the resource's expiry
            return [m.Publish(publication=p, change=kind, expires=expires) for p in publications]
        if kind == "retract":
            return [m.Withdraw(id=op["id"])]
        if kind == "locate":
            return [m.Locate(id=op["id"], public_id=public_id(op["target"]))]
    except (
        qel.AdvertisementError,
        qel.QueryError,
        qel.PublicationError,
        qel.SchemaError,
    ) as error:
        raise OperationError(str(error)) from None
    raise ValueError(f"{kind!r} is not a peer request")


def resource_of_text(text: str) -> Resource:
    """The descriptor of a workload's ``file``: its UTF-8 bytes' SHA-256 and size."""
    content = text.encode()
    return Resource(sha256=hashlib.sha256(content).hexdigest(), size=len(content))


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
    for key in ("query", "data", "format", "file"):
        if key in op and not isinstance(op[key], str):
            raise WorkloadError(f"line {line}: {key} must be a string")
    if "on" in op and op["on"] != ON_CHANGE:
        raise WorkloadError(f"line {line}: on must be {ON_CHANGE!r}")
    if name == "partition":
        groups = op["groups"]
        if (
            not isinstance(groups, list)
            or not groups
            or not all(
                isinstance(g, list)
                and g
                and all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in g)
                for g in groups
            )
        ):
            raise WorkloadError(f"line {line}: groups is a list of lists of super-peer indices")
    if name == "skew":
        seconds = op["seconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise WorkloadError(f"line {line}: seconds must be a number")
        if abs(seconds) > MAX_SKEW_SECONDS:
            raise WorkloadError(f"line {line}: a skew is at most {MAX_SKEW_SECONDS:g} s either way")
        if ("peer" in op) == ("superpeer" in op):
            raise WorkloadError(f"line {line}: skew names a superpeer or a peer (one of them)")
    for key in ("expires", "seconds"):
        if (
            key in op
            and name != "skew"
            and (isinstance(op[key], bool) or not isinstance(op[key], int | float) or op[key] < 0)
        ):
            raise WorkloadError(f"line {line}: {key} must be a number of seconds (>= 0)")
    if "superpeer" in op and (
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


# -- the planner ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connect:
    """``peer`` connects to super-peer ``superpeer`` (an index). With ``moved_from`` (an index)
    it was attached there before: it sends its whole state again (``resend``) and says so
    (``Moved``).

    ``resend`` is that state as it was when the step was planned (``Planner.resend``), carried by
    the step rather than read from the planner when the step runs: a detached peer whose access
    point is gone and that leaves connects through another one first, and the planner has
    forgotten it by the time its steps run."""

    peer: str
    superpeer: int
    moved_from: int | None = None
    resend: PlannedState | None = None


@dataclass(frozen=True, slots=True)
class PlannedState:
    """What a peer has told its access points, as the planner knows it: the arguments of
    ``peer.session.plan_resend`` that do not depend on how the run went (a runner adds when its
    subscriptions became active, its recent withdrawals and its kept publications)."""

    advertisement: qel.Advertisement
    subscriptions: dict[str, qel.Subscription]
    expires: dict[str, float]
    axioms: frozenset[qel.Axiom]
    on_change: frozenset[str]

    def plan(
        self,
        *,
        active_since: Mapping[str, float] | None = None,
        withdrawn: Mapping[str, tuple[qel.Subscription, float, float]] | None = None,
        kept: Sequence[m.Publish] = (),
    ) -> list[Request]:
        """The requests the peer sends, in the peer daemon's order (``plan_resend``)."""
        return plan_resend(
            self.advertisement,
            self.subscriptions,
            (),
            expires=self.expires,
            axioms=self.axioms,
            on_change=self.on_change,
            active_since=active_since,
            withdrawn=withdrawn,
            kept=kept,
        )


@dataclass(frozen=True, slots=True)
class Disconnect:
    peer: str


@dataclass(frozen=True, slots=True)
class Send:
    """``peer`` sends ``message``; ``op`` is the operation it belongs to (for errors)."""

    peer: str
    message: object


@dataclass(frozen=True, slots=True)
class Offer:
    """``peer`` keeps ``content`` as the resource of publication ``publication`` (before it
    publishes it, as ``peer publish --file`` copies the file first)."""

    peer: str
    publication: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Want:
    """``peer`` fetches the resource of publication ``publication`` from its inbox's
    notification; the runner refuses it (``OperationError``) when there is none or it names no
    resource (``superpeer.sim.fetching``)."""

    peer: str
    publication: str


@dataclass(frozen=True, slots=True)
class Forget:
    """``peer`` left for good."""

    peer: str


@dataclass(frozen=True, slots=True)
class SuperPeerJoin:
    superpeer: int


@dataclass(frozen=True, slots=True)
class SuperPeerLeave:
    superpeer: int


@dataclass(frozen=True, slots=True)
class SuperPeerFail:
    superpeer: int


@dataclass(frozen=True, slots=True)
class SuperPeerRestart:
    superpeer: int


@dataclass(frozen=True, slots=True)
class SuperPeerBounce:
    superpeer: int


@dataclass(frozen=True, slots=True)
class SuperPeerPause:
    superpeer: int
    seconds: float


@dataclass(frozen=True, slots=True)
class SuperPeerCut:
    superpeer: int
    seconds: float


Step = (
    Connect
    | Disconnect
    | Send
    | Offer
    | Want
    | Forget
    | SuperPeerJoin
    | SuperPeerLeave
    | SuperPeerFail
    | SuperPeerRestart
    | SuperPeerBounce
    | SuperPeerPause
    | SuperPeerCut
)


@dataclass
class PlannedPeer:
    superpeer: int
    attached: bool = True
    advertisement: dict | None = None
    schema: frozenset[qel.Axiom] = frozenset()
    """The union of the schemas it published."""
    subscriptions: dict[str, str] = field(default_factory=dict)
    keys: dict[str, frozenset] = field(default_factory=dict)
    expires: dict[str, float] = field(default_factory=dict)
    """Per subscription id, when it expires (absolute; the access point retracts it then)."""
    on_change: set[str] = field(default_factory=set)
    """The subscription ids that hear of extensions of what they matched already."""
    resources: dict[str, int] = field(default_factory=dict)
    """Per resource id, the access point it was first published through (its versions are
    kept there: ``superpeer.versions``)."""


class Planner:
    """The meaning of each operation, for every runner (see the module docstring)."""

    def __init__(self, superpeers: int) -> None:
        self.superpeers = superpeers
        self.down: set[int] = set()
        self.gone: set[int] = set()
        self.peers: dict[str, PlannedPeer] = {}
        self.now = 0.0
        """The runner's clock at the operation being planned (``plan``)."""

    def live(self) -> list[int]:
        return [k for k in range(self.superpeers) if k not in self.down and k not in self.gone]

    def next_live(self, after: int) -> int:
        """Where a peer goes when its access point is not there: the next live index."""
        live = self.live()
        if not live:
            raise OperationError("no super-peer is live")
        return min(live, key=lambda k: (k - after - 1) % max(self.superpeers, 1))

    def plan(self, op: dict, public_id: Callable[[str], str] = str, now: float = 0.0) -> list[Step]:
        """The steps of ``op`` at time ``now``; ``OperationError`` (nothing to do) with the text
        to report."""
        kind = op["op"]
        self.now = now
        planned = self.peers.get(op.get("peer", ""))
        if planned is not None:
            self._expire(planned)
        if kind == "wait":
            return []
        if kind.startswith("superpeer_"):
            return self._backbone(kind, op)
        if kind == "skew":
            return self._skew(op)
        if kind in ("partition", "heal"):
            return []  # the runner cuts its links (or its hosts' bridges): nothing to plan
        name = op["peer"]
        if kind == "join":
            return self._join(name, op["superpeer"])
        peer = self.peers.get(name)
        if peer is None:
            raise OperationError(f"peer {name} has not joined")
        if kind == "detach":
            if not peer.attached:
                return []
            peer.attached = False
            return [Disconnect(name)]
        if kind == "attach":
            if peer.attached:
                return []
            peer.attached = True
            return [self._connect(name, peer)]
        if kind == "leave":
            steps: list[Step] = [] if peer.attached else [self._connect(name, peer)]
            del self.peers[name]
            return [*steps, Send(name, m.Leave()), Forget(name)]
        if kind == "move":
            target = op["superpeer"]
            if target not in self.live():
                raise OperationError(f"there is no live super-peer {target}")
            if target == peer.superpeer and peer.attached:
                return []
            steps = [Disconnect(name)] if peer.attached else []
            previous = peer.superpeer
            peer.superpeer, peer.attached = target, True
            self._follow(peer, previous)
            return [*steps, *self._arrive(name, peer, previous)]
        if not peer.attached:
            raise OperationError(f"peer {name} is detached")
        if kind == "fetch":
            return [Want(name, op["id"])]
        messages = peer_requests(op, public_id, now)
        for message in messages:
            if isinstance(message, m.Publish | m.Withdraw):
                resource = message.id if isinstance(message, m.Withdraw) else message.publication.id
                where = peer.resources.setdefault(resource, peer.superpeer)
                if where != peer.superpeer:
                    raise ElsewhereError(
                        f"the resource {resource!r} was published through super-peer {where}: "
                        f"its changes go there, not to {peer.superpeer}"
                    )
        self._remember(peer, op, messages)
        offers: list[Step] = [
            Offer(name, message.publication.id, op["file"].encode())
            for message in messages
            if "file" in op and isinstance(message, m.Publish)
        ]
        return [*offers, *(Send(name, message) for message in messages)]

    def _join(self, name: str, index: int) -> list[Step]:
        if not 0 <= index < self.superpeers or index in self.gone:
            raise OperationError(f"there is no super-peer {index} (0..{self.superpeers - 1})")
        if index in self.down:
            raise OperationError(f"super-peer {index} is down")
        if name in self.peers:
            raise OperationError(f"peer {name} has already joined")
        self.peers[name] = PlannedPeer(index)
        return [Connect(name, index)]

    def _connect(self, name: str, peer: PlannedPeer) -> Connect:
        if peer.superpeer in self.live():
            return Connect(name, peer.superpeer)
        previous = peer.superpeer
        peer.superpeer = self.next_live(previous)
        self._follow(peer, previous)
        return self._moved(name, previous)

    def _follow(self, peer: PlannedPeer, previous: int) -> None:
        """``peer`` moved from ``previous``: the handover brings the versions of what it
        published there (``Versions``), from ``previous`` or from the super-peer that adopted
        its peers when it left; not while ``previous`` is down."""
        if previous in self.down:
            return
        for resource, where in peer.resources.items():
            if where == previous:
                peer.resources[resource] = peer.superpeer

    def _arrive(self, name: str, peer: PlannedPeer, previous: int) -> list[Step]:
        """``peer`` connects to its (new) access point, coming from ``previous``."""
        return [self._moved(name, previous)]

    def _moved(self, name: str, previous: int) -> Connect:
        """``name`` connects to its current access point coming from ``previous``."""
        peer = self.peers[name]
        return Connect(name, peer.superpeer, previous, self.resend(name))

    def resend(self, name: str) -> PlannedState:
        """What a peer that moved sends again (``peer.session.plan_resend``): its advertisement
        (an empty one if it never advertised, as the peer daemon sends), its schemas, its
        subscriptions with their absolute expiries."""
        peer = self.peers[name]
        self._expire(peer)
        return PlannedState(
            advertisement=qel.parse_advertisement(peer.advertisement or {}),
            subscriptions={
                sid: qel.parse_subscription(query) for sid, query in peer.subscriptions.items()
            },
            expires=dict(peer.expires),
            axioms=peer.schema,
            on_change=frozenset(peer.on_change),
        )

    def _expire(self, peer: PlannedPeer) -> None:
        """Subscriptions whose expiry passed are gone (their ids free again)."""
        for sid in [sid for sid, at in peer.expires.items() if at <= self.now]:
            del peer.expires[sid]
            peer.subscriptions.pop(sid, None)
            peer.keys.pop(sid, None)
            peer.on_change.discard(sid)

    def _remember(self, peer: PlannedPeer, op: dict, messages: list[object]) -> None:
        """Keep what a peer will send again after a move (as the oracle accepts it)."""
        if op["op"] == "advertise":
            peer.advertisement = {k: v for k, v in op.items() if k not in ("op", "peer")}
        elif op["op"] == "publish_schema":
            for message in messages:
                assert isinstance(message, m.PublishSchema)
                peer.schema |= frozenset(message.axioms)
        elif op["op"] == "subscribe":
            sid = op["id"]
            key = qel.parse_subscription(op["query"]).key
            if sid not in peer.keys or peer.keys[sid] == key:
                peer.subscriptions[sid] = op["query"]
                peer.keys[sid] = key
                peer.expires.pop(sid, None)
                if op.get("expires") is not None:
                    peer.expires[sid] = self.now + op["expires"]
                peer.on_change.discard(sid)
                if op.get("on") == ON_CHANGE:
                    peer.on_change.add(sid)
        elif op["op"] == "unsubscribe":
            peer.subscriptions.pop(op["id"], None)
            peer.keys.pop(op["id"], None)
            peer.expires.pop(op["id"], None)
            peer.on_change.discard(op["id"])

    def _skew(self, op: dict) -> list[Step]:
        """A clock set wrong changes nothing a peer is owed: the runner applies it (the
        simulator to its clocks, the chaos harness with ``faketime``); a live super-peer is
        restarted under it (its daemon's clock does not step while it runs)."""
        if "superpeer" in op:
            index = op["superpeer"]
            if not 0 <= index < self.superpeers or index in self.gone:
                raise OperationError(f"there is no super-peer {index}")
            return [] if index in self.down else [SuperPeerBounce(index)]
        if op["peer"] not in self.peers:
            raise OperationError(f"peer {op['peer']} has not joined")
        return []

    def _backbone(self, kind: str, op: dict) -> list[Step]:
        if kind == "superpeer_join":
            self.superpeers += 1
            return [SuperPeerJoin(self.superpeers - 1)]
        index = op["superpeer"]
        if not 0 <= index < self.superpeers or index in self.gone:
            raise OperationError(f"there is no super-peer {index}")
        if kind == "superpeer_restart":
            if index not in self.down:
                raise OperationError(f"super-peer {index} is not down")
            self.down.discard(index)
            return [SuperPeerRestart(index)]
        if index in self.down:
            raise OperationError(f"super-peer {index} is down")
        if kind == "superpeer_bounce":
            return [SuperPeerBounce(index)]
        if kind == "superpeer_pause":
            return [SuperPeerPause(index, float(op["seconds"]))]
        if kind == "superpeer_cut":
            return [SuperPeerCut(index, float(op["seconds"]))]
        if len(self.live()) == 1:
            raise OperationError(f"super-peer {index} is the last one")
        if kind == "superpeer_leave":
            self.gone.add(index)
            return [SuperPeerLeave(index)]
        self.down.add(index)
        return [SuperPeerFail(index)]

    def attached_to(self, index: int) -> list[str]:
        return sorted(n for n, p in self.peers.items() if p.superpeer == index and p.attached)

    def after_failure(self, index: int) -> list[Connect]:
        """The peers attached to failed super-peer ``index`` move by themselves."""
        steps = []
        for name in self.attached_to(index):
            peer = self.peers[name]
            peer.superpeer = self.next_live(index)
            steps.append(self._moved(name, index))
        return steps

    def after_leave(self, index: int, successor: int) -> list[Connect]:
        """The peers attached to super-peer ``index``, which left, go to ``successor``, which
        adopted them, and so do the resources they published through ``index``
        (``Versions``). A detached peer finds out when it comes back, at whichever
        super-peer it reaches then: its resources stay with the adopter. As the peer daemon
        does (``peer.client``: it follows ``Ended.successor``, and a new access point is a
        move), each says where it comes from: the adoption may still be on its way (a leave
        across a cut), and the successor then holds its requests for the leaver's hand-over
        instead of refusing them for an advertisement it has not heard of yet."""
        steps = []
        for name in self.attached_to(index):
            peer = self.peers[name]
            peer.superpeer = successor
            self._follow(peer, index)
            steps.append(self._moved(name, index))
        return steps
