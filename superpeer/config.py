"""Super-peer daemon configuration: embedded defaults, a TOML file, command-line overrides.

With no file and no options a super-peer listens on 127.0.0.1:7400, keeps its data under the
user's data home (``platformdirs``), and starts a new network of its own. A TOML file may set::

    listen = "127.0.0.1:7401"
    advertise = "sp1.example.org:7401" # the address others use (default: the listen address)
    data_dir = "/var/lib/semantic-pubsub/sp1"
    node_id = "sp-hannover"            # default: generated once and kept in the data dir
    join = ["127.0.0.1:7400"]          # members to join through, tried in order (or one string)

    [limits]
    max_frame_bytes = 1048576          # largest frame accepted
    max_notification_bytes = 524288    # largest notification a publication may make (encoded;
                                       # an update carries the old version too); at most
                                       # max_frame_bytes - 65536, half of it if not given
    max_elements_bytes = 786432        # largest advertisement this super-peer sends the network
                                       # (all its peers' together); three quarters of the frame
                                       # if not given
    max_subscriptions_per_peer = 1000  # a notification names every subscription of its peer it
    max_subscription_id_bytes = 64     # matches, in one frame: max_notification_bytes + these
                                       # two multiplied (+ 4 KB) must fit max_frame_bytes
    max_held_requests = 1000           # a moved peer's requests held until its previous access
                                       # point handed over its resources; more close it
    max_resources_per_peer = 10000000  # resources (live or retracted) one peer may own here
    max_cached_versions = 10000        # versions of peers' resources held in memory (the most
                                       # recently used); the others are read from the store
    max_peer_queue = 1000              # frames waiting to be written to one peer connection
    max_neighbour_queue = 100000       # frames a super-peer has not acknowledged yet
    heartbeat_seconds = 1.0            # an idle backbone link carries a heartbeat this often
    ack_delay_seconds = 0.04           # a backbone frame is acknowledged this much later, with
                                       # the frames that came meanwhile (at once every 64)
    failure_seconds = 10.0             # a neighbour silent this long has failed
    wedged_seconds = 60.0              # a topology operation unfinished this long is wedged:
                                       # the super-peer rejoins
    reform_seconds = 30.0              # a failed neighbour unrepaired this long: this side of a
                                       # cut cannot repair it, and re-forms as a cube of its own
    admission_seconds = 10.0           # TLS + Hello + identification of a connection, in all
    join_contact_seconds = 60.0        # at start, the join addresses are asked again this long
                                       # while none answers (a cube busy repairing, a cut)
    max_unidentified_per_address = 32  # connections from one address not identified yet
    placements_per_step = 50           # subscriptions placed in one go at most: a burst is
                                       # placed in slices, heartbeats handled between them
    routings_per_step = 500            # subscriptions routed again in one go at most (a change
                                       # of the cube, a neighbour restarted): the rest in slices
    read_slice_seconds = 0.002         # one peer's messages read together are applied this long
                                       # at most before the other connections get a turn
    max_lookups_per_peer = 16          # peer look-ups (locate) one peer may have waiting
    locate_direct_seconds = 3.0        # a look-up sent to the super-peer the peer named falls
                                       # back to asking the whole network after this long
    max_clock_offset_seconds = 1.0     # a neighbour's or peer's clock further off is logged
                                       # and makes /readyz not ready (nothing is refused)
    max_clock_lead_seconds = 86400.0   # a hybrid time further ahead of this clock is not
                                       # absorbed (one clock a year ahead drags nobody)
    clock_sample_seconds = 10.0        # neighbours' and peers' clocks measured this often
    publications_per_second = 200.0    # per peer; faster, its connection is read more slowly,
    publication_burst = 400            # while another peer published within
    publication_contention_seconds = 1.0  # this long (alone, a peer publishes at full speed)
    subscriptions_per_second = 100.0   # per peer, subscriptions and unsubscriptions; faster
    subscription_burst = 2000          # are refused with the time to ask again (the peer does)
    lookups_per_second = 50.0          # per peer, look-ups (locate); faster are refused
    lookup_burst = 200                 # likewise, with the time to ask again

    [delivery]
    window = 64                        # notifications sent to a peer and not acknowledged yet
    retention_seconds = 604800.0       # kept notifications expire after this long (7 days)
    max_kept_per_peer = 100000         # beyond this, a peer's oldest kept notifications go

    [recovery]
    settle_seconds = 2.0               # old routes are kept this long after the cube changes
    log_seconds = 3600.0               # an origin keeps its publications this long (catch-up)
    max_logged = 100000                # and at most this many
    log_copy = true                    # a neighbour copies each log entry before the Ack
    copy_wait_seconds = 1.0            # then the next neighbour; after two, the Ack goes anyway
    catchup_margin_seconds = 5.0       # catch-up asks for this much more hybrid time (what a
                                       # clock reading takes to reach every super-peer)
    handover_seconds = 5.0             # wait for a previous access point before catching up
    catchup_retry_seconds = 10.0       # a catch-up not answered this long is asked again
                                       # (then after twice as long, and so on)
    retracted_seconds = 20.0           # a retracted subscription still routes what was
                                       # published before and arrives late, this long

    [rendezvous]                       # resources fetched for this super-peer's peers
    max_bytes = 1073741824             # quota of the rendezvous directory
    retention_seconds = 604800.0       # a rendezvous not completed and collected goes after this
    retry_seconds = 30.0               # ask a stalled transfer again after this long
    window_bytes = 4194304             # bytes asked for in one request
    windows_in_flight = 2              # requests of one transfer outstanding at once (1: stop-and-wait)
    chunk_bytes = 196608               # bytes per frame (at most 262144, the wire's binary limit)

    [store]                            # <data_dir>/state.sqlite
    sync = "full"                      # fsync every commit: what was acknowledged survives a
                                       # power loss; "normal": only a killed process
    max_inputs_per_commit = 256        # inputs (messages, timers) that share one commit at most
    inline_sync_seconds = 0.001        # a commit's fsync runs on the event loop's thread when the
                                       # last took less than this (0: always a worker thread)
    switch_interval_seconds = 0.0005   # how long a worker thread whose fsync is done waits at
                                       # most for the busy loop to let it go on (Python's 5 ms)
    min_free_bytes = 67108864          # below this free on the data directory's file system:
                                       # paused, takes nothing (superpeer.diskspace); no start
    resume_free_bytes = 134217728      # a paused super-peer goes on once this much is free
    disk_check_seconds = 1.0           # free space looked at this often (and after each commit)
    max_log_bytes = 16777216           # the write-ahead log (one fold's pages) is truncated back
                                       # to this size, at most min_free_bytes / 4
    fold_bytes = 4194304               # the redo journal (a commit is a frame of it): sqlite
                                       # commits once it is full; at most max_log_bytes / 2
    cache_bytes = 67108864             # sqlite's page cache (memory): the indexes' pages a
                                       # store of an hour's log reads again and again

    [trace]
    enabled = true
    max_bytes = 67108864
    keep = 10

    [routing]
    summarise_values_above = 1000      # summarise larger advertised value sets (0: never)

    [schemas]                          # RDFS axioms peers publish (superpeer.schemas)
    max_axioms_per_peer = 10000        # the union of one peer's schemas
    max_axioms_total = 100000          # axioms this super-peer accepts to know in all

    [http]                             # the operator's endpoint: /metrics, /healthz, /readyz, /
    listen = "127.0.0.1:9400"          # default "": off; a bare port means 127.0.0.1
    metrics = true                     # false: no counting and no /metrics (the rest stays)
    max_header_bytes = 16384           # a request's head beyond this is refused
    keep_alive_seconds = 5.0           # an idle HTTP connection is closed after this

    [logging]
    format = "text"                    # or "json": one object per line
    level = "INFO"
    repeat_seconds = 10.0              # the same warning at most once per this (with repeated=N)

    [security]
    tls = true                         # false only to measure what encryption costs
    key = "/var/lib/semantic-pubsub/sp1/identity/key.pem"     # defaults: <data_dir>/identity/...
    certificate = "/var/lib/semantic-pubsub/sp1/identity/cert.pem"
    ca = "/var/lib/semantic-pubsub/sp1/identity/ca.pem"
    key_bits = 3072                    # for the identity a fresh standalone super-peer creates

    [collector]                        # Python's cyclic garbage collector (superpeer.collector)
    young_objects = 10000              # new objects before its youngest pass (Python: 700)
    long_full_pass_seconds = 0.05      # a full pass this long (CPU) freezes what survived it;
                                       # less than limits.failure_seconds

Unknown keys are errors: a typo must not silently change how a server runs.
"""

from __future__ import annotations

import logging
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import platformdirs

from superpeer.collector import CollectorSettings
from superpeer.core import CoreConfig
from superpeer.locating import LocatorConfig
from superpeer.node import NodeConfig
from superpeer.ratelimit import Rate, RateLimits
from superpeer.rendezvous import RendezvousConfig
from superpeer.schemas import SchemaLimits
from superpeer.security import SecuritySettings
from superpeer.store import CACHE_BYTES, FOLD_BYTES, SYNC_MODES
from superpeer.versions import VersionLimits
from wire.acknowledging import ACK_DELAY_SECONDS
from wire.codec import WireLimits

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 7400


FRAME_FIELDS: Final = 4096
"""What a frame keeps, beyond the largest notification (and the ids of the subscriptions it
matches) or advertisement, for the other fields of the message that carries it."""


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    max_frame_bytes: int = 1024 * 1024
    max_notification_bytes: int = 512 * 1024
    max_elements_bytes: int = 768 * 1024
    max_subscriptions_per_peer: int = 1000
    max_subscription_id_bytes: int = 64
    max_held_requests: int = 1000
    max_resources_per_peer: int = VersionLimits().max_resources_per_peer
    max_cached_versions: int = VersionLimits().max_cached_versions
    max_peer_queue: int = 1000
    max_neighbour_queue: int = 100_000
    heartbeat_seconds: float = 1.0
    ack_delay_seconds: float = ACK_DELAY_SECONDS
    failure_seconds: float = 10.0
    wedged_seconds: float = 60.0
    reform_seconds: float = 30.0
    admission_seconds: float = 10.0
    join_contact_seconds: float = 60.0
    max_unidentified_per_address: int = 32
    placements_per_step: int = 50
    routings_per_step: int = 500
    read_slice_seconds: float = 0.002
    max_lookups_per_peer: int = 16
    locate_direct_seconds: float = 3.0
    max_clock_offset_seconds: float = 1.0
    max_clock_lead_seconds: float = 86400.0
    clock_sample_seconds: float = 10.0
    publications_per_second: float = 200.0
    publication_burst: int = 400
    publication_contention_seconds: float = 1.0
    subscriptions_per_second: float = 100.0
    subscription_burst: int = 2000
    lookups_per_second: float = 50.0
    lookup_burst: int = 200

    def rates(self) -> RateLimits:
        """The per-peer rate limits (``superpeer.ratelimit``)."""
        return RateLimits(
            publications=Rate(
                per_second=self.publications_per_second, burst=self.publication_burst
            ),
            subscriptions=Rate(
                per_second=self.subscriptions_per_second, burst=self.subscription_burst
            ),
            lookups=Rate(per_second=self.lookups_per_second, burst=self.lookup_burst),
            contention_seconds=self.publication_contention_seconds,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    window: int = 64
    retention_seconds: float = 7 * 86400.0
    max_kept_per_peer: int = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    settle_seconds: float = 2.0
    log_seconds: float = 3600.0
    max_logged: int = 100_000
    log_copy: bool = True
    copy_wait_seconds: float = 1.0
    catchup_margin_seconds: float = 5.0
    handover_seconds: float = 5.0
    catchup_retry_seconds: float = 10.0
    retracted_seconds: float = 20.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSettings:
    sync: str = "full"
    """``superpeer.store.SYNC_MODES``: how durable a commit is."""
    max_inputs_per_commit: int = 256
    """The inputs that arrive together share one commit (``superpeer._commits``), at most this
    many: more per fsync, against the first output of a group waiting for the rest."""
    inline_sync_seconds: float = 0.001
    """A commit's fsync runs on the trio thread when the last one took less than this, else on
    a worker thread (``superpeer._commits``): the hand-off to a thread costs more CPU than a
    fast disk's fsync, and the thread is held at most one slow sync. 0: always the worker."""
    switch_interval_seconds: float = 0.0005
    """The process's ``sys.setswitchinterval``: how long a thread that wants the interpreter
    waits at most for the one holding it. A worker thread's fsync is done long before its
    result is: it needs the interpreter back to hand the result to trio, and a busy loop held it
    for Python's 5 ms, so every output of that group waited 5 ms more (an fsync on the worker
    thread took 5 to 9 ms beside a peer churning its subscriptions, against 0.3 ms on the loop's
    thread: BENCHMARKS.md, issue 37, stop 87). Set by the process entry point
    (``superpeer.cli``), not by the daemon: a daemon run inside another program leaves that
    program's threads alone."""
    min_free_bytes: int = 64 * 1024 * 1024
    """Below this many bytes free on the data directory's file system the daemon pauses, and
    it does not start (``superpeer.diskspace``): room for what it has let in to be written."""
    resume_free_bytes: int = 128 * 1024 * 1024
    """A paused daemon goes on once this many bytes are free (at least ``min_free_bytes``)."""
    disk_check_seconds: float = 1.0
    """How often the free space is looked at, besides after each group commit."""
    max_log_bytes: int = 16 * 1024 * 1024
    """The size the write-ahead log is truncated back to when it starts over, capped by the
    reserve (``log_bound``). Every fold checkpoints the log (copies its pages into the
    database, ``SqliteStore._copy``) and the next fold starts it over, so it holds one fold's
    pages; a fold larger than this leaves the file larger until it starts over."""

    fold_bytes: int = FOLD_BYTES
    """The size of the redo journal (``<data>/state.sqlite-redo``, ``superpeer.redo``): a commit
    is a frame of it, the statements the commit's inputs ran, and sqlite commits its own
    transaction (the fold: every page those commits changed, written once) when the next frame
    would not fit. Larger folds write a hot page less often and stall the trio thread longer
    when they come; at most half the log's bound (``log_bound``), since a fold's pages go to
    the write-ahead log."""

    cache_bytes: int = CACHE_BYTES
    """sqlite's page cache, at most this much memory: a notification reads and writes index
    pages at random keys (the log's, the bodies', the deliveries'), and once the store holds
    the log of an hour those indexes outgrow sqlite's default 2 MiB, and each of their pages is
    read from the operating system again and again (``bench.storecpu``, best of three: 111 us
    of CPU per notification at 150,000 against 99 with 64 MiB; BENCHMARKS.md, issue 37, stop
    80)."""

    @property
    def log_bound(self) -> int:
        """The size the store truncates its write-ahead log back to: ``max_log_bytes``, but at
        most a quarter of ``min_free_bytes``. Every fold of the redo journal writes the pages its
        commits touched to the log (``fold_bytes`` is at most half of this bound), and the free
        space the pause keeps in reserve must hold them (``superpeer.diskspace``)."""
        return min(self.max_log_bytes, self.min_free_bytes // 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceSettings:
    enabled: bool = True
    max_bytes: int = 64 * 1024 * 1024
    keep: int = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSettings:
    listen: str = ""
    metrics: bool = True
    max_header_bytes: int = 16384
    keep_alive_seconds: float = 5.0

    @property
    def enabled(self) -> bool:
        return bool(self.listen)

    @property
    def bind(self) -> tuple[str, int]:
        """Where the endpoint listens: loopback unless the configuration names a host."""
        if self.listen.isdigit():
            return DEFAULT_HOST, int(self.listen)
        return parse_address(self.listen, what="http.listen")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSettings:
    format: str = "text"
    level: str = "INFO"
    repeat_seconds: float = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SuperPeerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    advertise: str | None = None
    data_dir: Path | None = None
    node_id: str | None = None
    join: tuple[tuple[str, int], ...] = ()
    limits: Limits = field(default_factory=Limits)
    delivery: Delivery = field(default_factory=Delivery)
    recovery: Recovery = field(default_factory=Recovery)
    rendezvous: RendezvousConfig = field(default_factory=RendezvousConfig)
    store: StoreSettings = field(default_factory=StoreSettings)
    trace: TraceSettings = field(default_factory=TraceSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    logs: LogSettings = field(default_factory=LogSettings)
    summarise_values_above: int | None = None
    schemas: SchemaLimits = field(default_factory=SchemaLimits)
    collector: CollectorSettings = field(default_factory=CollectorSettings)

    @property
    def address(self) -> str:
        """The address other super-peers and peers use: ``advertise``, else the listen address
        (a proxy, a NAT or a DNS name may stand in front of the listener)."""
        return self.advertise or f"{self.host}:{self.port}"

    @property
    def listen(self) -> str:
        return f"{self.host}:{self.port}"

    def node_config(self, *, tracing: bool) -> NodeConfig:
        """What the sans-IO node needs of this configuration."""
        limits, delivery, recovery = self.limits, self.delivery, self.recovery
        return NodeConfig(
            routing=CoreConfig(
                summarise_values_above=self.summarise_values_above,
                tracing=tracing,
                max_lookups_per_peer=limits.max_lookups_per_peer,
                settle_seconds=recovery.settle_seconds,
                retracted_seconds=recovery.retracted_seconds,
                schemas=self.schemas,
                max_notification_bytes=limits.max_notification_bytes,
                max_elements_bytes=limits.max_elements_bytes,
                max_subscriptions_per_peer=limits.max_subscriptions_per_peer,
                max_subscription_id_bytes=limits.max_subscription_id_bytes,
                routings_per_step=limits.routings_per_step,
                versions=VersionLimits(
                    max_resources_per_peer=limits.max_resources_per_peer,
                    max_cached_versions=limits.max_cached_versions,
                ),
            ),
            max_frame_bytes=limits.max_frame_bytes,
            max_held_requests=limits.max_held_requests,
            heartbeat_seconds=limits.heartbeat_seconds,
            failure_seconds=limits.failure_seconds,
            wedged_seconds=limits.wedged_seconds,
            reform_seconds=limits.reform_seconds,
            admission_seconds=limits.admission_seconds,
            max_unidentified_per_address=limits.max_unidentified_per_address,
            placements_per_step=limits.placements_per_step,
            window=delivery.window,
            retention_seconds=delivery.retention_seconds,
            max_kept_per_peer=delivery.max_kept_per_peer,
            log_seconds=recovery.log_seconds,
            max_logged=recovery.max_logged,
            log_copy=recovery.log_copy,
            copy_wait_seconds=recovery.copy_wait_seconds,
            catchup_margin_seconds=recovery.catchup_margin_seconds,
            max_clock_offset_seconds=limits.max_clock_offset_seconds,
            max_clock_lead_seconds=limits.max_clock_lead_seconds,
            clock_sample_seconds=limits.clock_sample_seconds,
            handover_seconds=recovery.handover_seconds,
            catchup_retry_seconds=recovery.catchup_retry_seconds,
            rendezvous=self.rendezvous,
            locating=LocatorConfig(direct_seconds=limits.locate_direct_seconds),
            rates=limits.rates(),
        )

    @property
    def directory(self) -> Path:
        if self.data_dir is not None:
            return self.data_dir
        return Path(platformdirs.user_data_dir("semantic-pubsub")) / f"superpeer-{self.port}"

    def wire_limits(self) -> WireLimits:
        return WireLimits(max_frame_bytes=self.limits.max_frame_bytes)

    def with_overrides(self, **changes: Any) -> SuperPeerConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def parse_address(text: str, *, what: str = "address") -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what} must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def load_config(path: str | Path | None) -> SuperPeerConfig:
    """The defaults, updated by the TOML file at ``path`` if given."""
    if path is None:
        return SuperPeerConfig()
    try:
        with Path(path).open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"cannot read the configuration {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    return config_from_mapping(data, source=str(path))


def config_from_mapping(data: dict[str, Any], *, source: str = "configuration") -> SuperPeerConfig:
    known = {
        "listen", "advertise", "data_dir", "node_id", "join", "limits", "delivery", "recovery",
        "rendezvous", "store", "trace", "routing", "schemas", "security", "http", "logging",
        "collector",
    }  # fmt: skip
    _no_unknown(data, known, source)
    changes: dict[str, Any] = {}
    if "listen" in data:
        changes["host"], changes["port"] = parse_address(
            _str(data, "listen", source), what="listen"
        )
    if "advertise" in data:
        parse_address(_str(data, "advertise", source), what="advertise")
        changes["advertise"] = data["advertise"]
    if "data_dir" in data:
        changes["data_dir"] = Path(_str(data, "data_dir", source)).expanduser()
    if "node_id" in data:
        changes["node_id"] = _str(data, "node_id", source)
    if "join" in data:
        joins = data["join"] if isinstance(data["join"], list) else [data["join"]]
        if not all(isinstance(j, str) for j in joins):
            raise ConfigError(f"{source}: join is an address or a list of addresses")
        changes["join"] = tuple(parse_address(j, what="join") for j in joins)
    if "limits" in data:
        changes["limits"] = _limits(data["limits"], source)
    if "delivery" in data:
        changes["delivery"] = _section(Delivery, data["delivery"], "delivery", source)
    if "recovery" in data:
        changes["recovery"] = _section(Recovery, data["recovery"], "recovery", source)
    if "rendezvous" in data:
        rendezvous = _section(RendezvousConfig, data["rendezvous"], "rendezvous", source)
        if rendezvous.chunk_bytes > WireLimits().max_binary_bytes:
            raise ConfigError(
                f"{source}: rendezvous.chunk_bytes must be at most "
                f"{WireLimits().max_binary_bytes} (the wire's binary limit)"
            )
        changes["rendezvous"] = rendezvous
    if "store" in data:
        store = _section(StoreSettings, data["store"], "store", source)
        if store.sync not in SYNC_MODES:
            raise ConfigError(
                f"{source}: store.sync must be one of {', '.join(map(repr, SYNC_MODES))}"
            )
        if store.resume_free_bytes < store.min_free_bytes:
            raise ConfigError(
                f"{source}: store.resume_free_bytes ({store.resume_free_bytes}) must be at least "
                f"store.min_free_bytes ({store.min_free_bytes})"
            )
        if store.max_log_bytes < 64 * 1024:
            raise ConfigError(
                f"{source}: store.max_log_bytes ({store.max_log_bytes}) must be at least 65536"
            )
        if store.fold_bytes < 4096:
            raise ConfigError(
                f"{source}: store.fold_bytes ({store.fold_bytes}) must be at least 4096"
            )
        if store.cache_bytes < 1024 * 1024:
            raise ConfigError(
                f"{source}: store.cache_bytes ({store.cache_bytes}) must be at least 1048576"
            )
        changes["store"] = store
    if "trace" in data:
        changes["trace"] = _section(TraceSettings, data["trace"], "trace", source)
    if "schemas" in data:
        changes["schemas"] = _section(SchemaLimits, data["schemas"], "schemas", source)
    if "security" in data:
        changes["security"] = _security(data["security"], source)
    if "http" in data:
        changes["http"] = _http(data["http"], source)
    if "logging" in data:
        changes["logs"] = _logging(data["logging"], source)
    if "routing" in data:
        routing = data["routing"]
        if not isinstance(routing, dict):
            raise ConfigError(f"{source}: [routing] must be a table")
        _no_unknown(routing, {"summarise_values_above"}, f"{source} [routing]")
        value = routing.get("summarise_values_above", 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{source}: routing.summarise_values_above must be an integer >= 0")
        changes["summarise_values_above"] = value or None
    if "collector" in data:
        changes["collector"] = _section(CollectorSettings, data["collector"], "collector", source)
    config = SuperPeerConfig(**changes)
    if config.collector.long_full_pass_seconds >= config.limits.failure_seconds:
        raise ConfigError(
            f"{source}: collector.long_full_pass_seconds "
            f"({config.collector.long_full_pass_seconds}) must be less than "
            f"limits.failure_seconds ({config.limits.failure_seconds}): a full pass that long "
            "holds the loop until the neighbours declare the super-peer failed"
        )
    if config.limits.reform_seconds <= config.limits.failure_seconds:
        raise ConfigError(
            f"{source}: limits.reform_seconds ({config.limits.reform_seconds}) must be more "
            f"than limits.failure_seconds ({config.limits.failure_seconds}): a failed "
            "neighbour's repair takes a while, and every failure would re-form the cube"
        )
    return config


def _http(value: object, source: str) -> HttpSettings:
    if isinstance(value, dict) and value.get("listen") == "":
        value = {k: v for k, v in value.items() if k != "listen"}  # "" says: off
    settings = _section(HttpSettings, value, "http", source)
    if settings.enabled:
        try:
            settings.bind  # noqa: B018 (checked now, not when the daemon starts)
        except ConfigError as error:
            raise ConfigError(f"{source}: {error} (or a bare port for 127.0.0.1)") from None
    return settings


def _logging(value: object, source: str) -> LogSettings:
    settings = _section(LogSettings, value, "logging", source)
    if settings.format not in ("text", "json"):
        raise ConfigError(f'{source}: logging.format must be "text" or "json"')
    if not isinstance(logging.getLevelName(settings.level.upper()), int):
        raise ConfigError(f"{source}: logging.level {settings.level!r} is not a log level")
    return settings


def _security(value: object, source: str) -> SecuritySettings:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: [security] must be a table")
    _no_unknown(value, {"tls", "key", "certificate", "ca", "key_bits"}, f"{source} [security]")
    settings = SecuritySettings()
    if "tls" in value:
        if not isinstance(value["tls"], bool):
            raise ConfigError(f"{source}: security.tls must be true or false")
        settings = replace(settings, tls=value["tls"])
    for name in ("key", "certificate", "ca"):
        if name in value:
            settings = replace(
                settings, **{name: Path(_str(value, name, f"{source} [security]")).expanduser()}
            )
    if "key_bits" in value:
        bits = value["key_bits"]
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < 2048:
            raise ConfigError(f"{source}: security.key_bits must be an integer >= 2048")
        settings = replace(settings, key_bits=bits)
    return settings


def _no_unknown(data: dict[str, Any], known: set[str], source: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown}; known: {sorted(known)}")


def _str(data: dict[str, Any], key: str, source: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: {key} must be a non-empty string")
    return value


def _limits(value: object, source: str) -> Limits:
    limits = _section(Limits, value, "limits", source)
    given = value if isinstance(value, dict) else {}
    frame, defaults = limits.max_frame_bytes, Limits()
    if "max_notification_bytes" not in given:
        half = min(defaults.max_notification_bytes, frame // 2)
        limits = replace(limits, max_notification_bytes=half)
    if "max_elements_bytes" not in given:
        most = min(defaults.max_elements_bytes, frame * 3 // 4)
        limits = replace(limits, max_elements_bytes=most)
    if limits.max_elements_bytes > frame - FRAME_FIELDS:
        raise ConfigError(
            f"{source}: limits.max_elements_bytes must be at most max_frame_bytes - "
            f"{FRAME_FIELDS} ({frame - FRAME_FIELDS}): the advertisement travels in one frame"
        )
    names = limits.max_subscriptions_per_peer * (limits.max_subscription_id_bytes + 3)
    if limits.max_notification_bytes + names + FRAME_FIELDS > frame:
        raise ConfigError(
            f"{source}: limits.max_notification_bytes ({limits.max_notification_bytes}) + "
            f"max_subscriptions_per_peer * (max_subscription_id_bytes + 3) ({names}) + "
            f"{FRAME_FIELDS} must be at most max_frame_bytes ({frame}): a notification travels "
            "in one frame with the ids of the subscriptions it matches"
        )
    return limits


def _section(cls: type, value: object, name: str, source: str) -> Any:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: [{name}] must be a table")
    defaults = cls()
    _no_unknown(value, set(defaults.__dataclass_fields__), f"{source} [{name}]")
    checked = {
        key: _typed(
            item,
            type(getattr(defaults, key)),
            f"{source}: {name}.{key}",
            zero=f"{name}.{key}" in _ZERO_ALLOWED,
        )
        for key, item in value.items()
    }
    return replace(defaults, **checked)


_ZERO_ALLOWED: Final = frozenset({"store.inline_sync_seconds", "limits.ack_delay_seconds"})
"""The numbers for which 0 means something (never), and so may be 0; every other is positive."""


def _typed(item: object, expected: type, where: str, *, zero: bool = False) -> object:
    """``item`` as the type of the default it replaces (an integer is fine for a float)."""
    if isinstance(item, bool) != (expected is bool):
        raise ConfigError(f"{where} must be a {expected.__name__}")
    if expected is float and isinstance(item, int):
        item = float(item)
    if not isinstance(item, expected):
        raise ConfigError(f"{where} must be a {expected.__name__}")
    if expected in (int, float) and (item < 0 if zero else item <= 0):  # type: ignore[operator]
        raise ConfigError(f"{where} must be {'0 or more' if zero else 'positive'}")
    return item
