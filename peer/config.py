"""Peer daemon configuration: embedded defaults, a TOML file, command-line overrides (in that
order of precedence, the command line last).

A TOML file may set::

    superpeer = "127.0.0.1:7400"       # the access point (required to run, here or --superpeer);
                                       # a list: the others are where the peer goes when the
                                       # one it is attached to cannot be reached
    data_dir = "~/peers/alice"         # relative to this file; default: under the user's
                                       # data dir, semantic-pubsub/peer-<name or "default">
    name = "alice"                     # the peer's name (default: generated once, kept in
                                       # data_dir): a local label with TLS (the network knows
                                       # the peer by its key), the peer's id without TLS
    request_timeout = 30.0             # seconds the access point has to answer a request
    locate_timeout = 10.0              # seconds the network has to answer a look-up (peer
                                       # locate); only the look-up fails when it does not
    max_rate_retries = 20              # a request the access point refused for the peer's rate
                                       # is sent again when it says, this many times at most
    silence_seconds = 45.0             # an access point that said nothing this long (it sends a
                                       # clock reading every 10 s) is gone: the next super-peer
                                       # of the list is tried (a path that vanished sends no reset)
    max_frame_bytes = 1048576          # largest frame sent or accepted on the network link
    max_kept = 10000                   # publications an access point acknowledged with its own
    kept_seconds = 3600.0              # copy alone, kept here and sent again until a second
    kept_resend_seconds = 30.0         # copy is made, at most this many and this long; the
                                       # one kept longest goes again this often (``peer.kept``)
    reconnect_initial = 0.5            # first reconnection delay, doubled up to reconnect_max
    reconnect_max = 30.0
    inbox_group = 64                   # notifications of one read stored with one pair of
                                       # syncs at most (a group commit), then acknowledged
                                       # together; 1: each with its own
    ack_delay_seconds = 0.04           # stored notifications are acknowledged this much later,
                                       # with those stored meanwhile (0: at once), or before
    ack_every = 16                     # anything else is sent, or once this many wait (keep it
                                       # below the access point's window, 64)

    [advertisement]                    # what this peer publishes, applied at every start
    schemas = ["dc"]                   # (same keys as the JSON advertisement, see README)

    [ui]                               # the local web app (``peer.ui``), on by default
    listen = "127.0.0.1:0"             # HOST:PORT or a bare PORT (on 127.0.0.1); port 0 takes a
                                       # free port; false turns the web app off. A host other
                                       # than loopback is served only when named here (or --ui)
    allowed_hosts = ["peer.example"]   # more Host names the app answers to (a reverse proxy);
                                       # loopback names and the listen host always are
    desktop_notifications = true       # notify-send for each new publication, where it exists
                                       # (the page's setting, once changed, wins)
    max_upload_bytes = 1073741824      # largest file the Share page accepts
    max_request_bytes = 16777216       # largest other request body (an RDF document)

    [security]                         # how the peer and its access point authenticate
    ca = "network-ca.pem"              # trust the network CA's certificate (relative to this
                                       # file), or
    pin = "pk1-..."                    # trust one super-peer's key fingerprint; or
    tls = false                        # a plaintext super-peer (`superpeer run --no-tls`)
    key = "~/keys/alice.pem"           # the peer's RSA key (default <data_dir>/identity/key.pem)

Exactly one of ``ca``, ``pin`` and ``tls = false`` (or ``--ca``, ``--pin``, ``--no-tls``, which
replace the file's choice): a peer never trusts a server it cannot authenticate. The key's
passphrase, if it has one, comes from the environment variable ``PEER_KEY_PASSPHRASE``.

Unknown keys are errors: a typo must not silently change what a daemon does. The data directory
holds everything a peer has (identity, subscriptions, notifications, the control socket), so
several peers run side by side on one machine with different ``--data-dir`` (or ``--name``).
"""

from __future__ import annotations

import datetime
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import platformdirs

from wire.acknowledging import ACK_DELAY_SECONDS

NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEYS: Final = frozenset(
    {
        "superpeer",
        "data_dir",
        "name",
        "request_timeout",
        "locate_timeout",
        "max_rate_retries",
        "silence_seconds",
        "max_frame_bytes",
        "max_kept",
        "kept_seconds",
        "kept_resend_seconds",
        "reconnect_initial",
        "reconnect_max",
        "inbox_group",
        "ack_delay_seconds",
        "ack_every",
        "advertisement",
        "security",
        "ui",
    }
)
_SECURITY_KEYS: Final = frozenset({"tls", "key", "ca", "pin"})
_UI_KEYS: Final = frozenset(
    {"listen", "allowed_hosts", "desktop_notifications", "max_upload_bytes", "max_request_bytes"}
)
UI_DEFAULT_LISTEN: Final = ("127.0.0.1", 0)
"""The web app's default address: loopback, on a port free when the daemon starts."""
_NUMBERS: Final = {
    "request_timeout": float,
    "locate_timeout": float,
    "max_rate_retries": int,
    "silence_seconds": float,
    "max_frame_bytes": int,
    "max_kept": int,
    "kept_seconds": float,
    "kept_resend_seconds": float,
    "reconnect_initial": float,
    "reconnect_max": float,
    "inbox_group": int,
    "ack_delay_seconds": float,
    "ack_every": int,
}
"""The positive numbers a file may set (the defaults are ``PeerConfig``'s), and zero for those
in ``_ZERO_ALLOWED``."""
_ZERO_ALLOWED: Final = frozenset({"ack_delay_seconds"})


class ConfigError(ValueError):
    """A configuration or option that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SecurityConfig:
    """TLS to the access point and the peer's key. With ``tls``, exactly one of ``ca`` and
    ``pin`` says whom to trust; ``serve_peer`` refuses to start with neither."""

    tls: bool = True
    ca: Path | None = None
    """The network CA's certificate: the access point's certificate must verify against it."""
    pin: str | None = None
    """The access point's key fingerprint (``pk1-...``, canonical lower case)."""
    key: Path | None = None
    """The peer's key file (default ``<data_dir>/identity/key.pem``)."""

    @property
    def trust(self) -> str | None:
        """How the access point is authenticated, for humans: ``ca FILE``, ``pin FP`` or None."""
        if self.ca is not None:
            return f"ca {self.ca}"
        if self.pin is not None:
            return f"pin {self.pin}"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class UiConfig:
    """The local web app (``peer.ui``). ``listen`` None: off."""

    listen: tuple[str, int] | None = UI_DEFAULT_LISTEN
    allowed_hosts: tuple[str, ...] = ()
    """Host header values accepted besides the loopback names and the listen host (lower case;
    ``name`` accepts any port, ``name:port`` that port only)."""
    desktop_notifications: bool = True
    max_upload_bytes: int = 1024 * 1024 * 1024
    max_request_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerConfig:
    data_dir: Path
    superpeers: tuple[tuple[str, int], ...] = ()
    name: str | None = None
    request_timeout: float = 30.0
    locate_timeout: float = 10.0
    max_rate_retries: int = 20
    silence_seconds: float = 45.0
    max_frame_bytes: int = 1024 * 1024
    max_kept: int = 10_000
    kept_seconds: float = 3600.0
    kept_resend_seconds: float = 30.0
    reconnect_initial: float = 0.5
    reconnect_max: float = 30.0
    inbox_group: int = 64
    """Notifications of one read stored with one pair of syncs at most (``peer.inbox``)."""
    ack_delay_seconds: float = ACK_DELAY_SECONDS
    ack_every: int = 16
    """When stored notifications are acknowledged (``peer.session``, ``wire.acknowledging``)."""
    advertisement: str | None = None
    """The config file's advertisement as JSON text (validated when the daemon starts)."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    ui: UiConfig = field(default_factory=UiConfig)

    @property
    def control_path(self) -> Path:
        return self.data_dir / "control.sock"

    @property
    def ui_url_path(self) -> Path:
        """Where the running daemon writes its web app's address, with the token (``peer ui``)."""
        return self.data_dir / "ui.url"

    @property
    def identity_dir(self) -> Path:
        """Where the peer keeps its key (by default) and its private identifier."""
        return self.data_dir / "identity"

    @property
    def key_path(self) -> Path:
        return self.security.key or self.identity_dir / "key.pem"


def default_data_dir(name: str | None) -> Path:
    return Path(platformdirs.user_data_dir("semantic-pubsub")) / f"peer-{name or 'default'}"


def parse_address(text: str, *, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a (host, port) pair."""
    host, colon, port_text = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"{what} must be HOST:PORT with a port in 1..65535, not {text!r}")
    return host, int(port_text)


def format_address(address: tuple[str, int]) -> str:
    """The inverse of ``parse_address``."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_name(name: str, *, what: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigError(
            f"{what} {name!r} is not a valid peer name (1-64 letters, digits, '.', '_', '-', "
            "starting with a letter or digit)"
        )
    return name


def load_config(
    config_file: str | None,
    *,
    data_dir: str | None = None,
    name: str | None = None,
    superpeer: str | list[str] | None = None,
    ca: str | None = None,
    pin: str | None = None,
    no_tls: bool = False,
    ui: str | None = None,
    no_ui: bool = False,
) -> PeerConfig:
    """The configuration from ``config_file`` (if any) with the command-line options on top.
    ``ca``, ``pin`` and ``no_tls`` (at most one) replace the file's choice of whom to trust;
    ``ui`` (an address) or ``no_ui`` the web app's ``listen``."""
    path = Path(config_file).expanduser().absolute() if config_file else None
    table: dict[str, Any] = _read_file(path) if path is not None else {}
    unknown = set(table) - _KEYS
    if unknown:
        raise ConfigError(f"unknown configuration key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    chosen_name = name if name is not None else _optional(table, "name", str)
    if chosen_name is not None:
        check_name(chosen_name, what="--name" if name is not None else "name")
    if data_dir is not None:
        directory = Path(data_dir).expanduser().absolute()
    elif (configured := _optional(table, "data_dir", str)) is not None and path is not None:
        directory = (path.parent / Path(configured).expanduser()).absolute()
    else:
        directory = default_data_dir(chosen_name)
    addresses: list[str]
    if superpeer:
        addresses = [superpeer] if isinstance(superpeer, str) else list(superpeer)
        what = "--superpeer"
    else:
        configured = table.get("superpeer")
        if configured is not None and not isinstance(configured, str | list):
            raise ConfigError("superpeer must be an address or a list of addresses")
        addresses = [configured] if isinstance(configured, str) else list(configured or [])
        if not all(isinstance(a, str) for a in addresses):
            raise ConfigError("superpeer must be an address or a list of addresses")
        what = "superpeer"
    advertisement = table.get("advertisement")
    if advertisement is not None and not isinstance(advertisement, dict):
        raise ConfigError("advertisement must be a table (the JSON advertisement's keys)")
    access_points = tuple(parse_address(a, what=what) for a in addresses)
    numbers = {key: _positive(table, key, kind) for key, kind in _NUMBERS.items() if key in table}
    config = PeerConfig(
        data_dir=directory,
        superpeers=access_points,
        name=chosen_name,
        advertisement=toml_to_json(advertisement) if advertisement is not None else None,
        security=_security(table, path, ca=ca, pin=pin, no_tls=no_tls),
        ui=_ui(table, ui=ui, no_ui=no_ui),
        **numbers,
    )
    if config.reconnect_max < config.reconnect_initial:
        raise ConfigError("reconnect_max must be at least reconnect_initial")
    return config


def _security(
    table: dict[str, Any], path: Path | None, *, ca: str | None, pin: str | None, no_tls: bool
) -> SecurityConfig:
    section = table.get("security", {})
    if not isinstance(section, dict):
        raise ConfigError("security must be a table (tls, key, ca, pin)")
    unknown = set(section) - _SECURITY_KEYS
    if unknown:
        raise ConfigError(
            f"unknown security key(s) {sorted(unknown)}; known: {sorted(_SECURITY_KEYS)}"
        )
    tls = section.get("tls", True)
    if not isinstance(tls, bool):
        raise ConfigError("security.tls must be true or false")
    base = path.parent if path is not None else Path.cwd()
    key = _optional(section, "key", str)
    settings = SecurityConfig(
        tls=tls,
        ca=_file_path(base, _optional(section, "ca", str)),
        pin=_pin(_optional(section, "pin", str), what="security.pin"),
        key=_file_path(base, key),
    )
    if settings.ca is not None and settings.pin is not None:
        raise ConfigError("security: give ca or pin, not both (whom the peer trusts is one choice)")
    if not settings.tls and (settings.ca is not None or settings.pin is not None):
        raise ConfigError("security: tls = false contradicts ca and pin (plaintext trusts no one)")
    if sum((ca is not None, pin is not None, no_tls)) > 1:
        raise ConfigError("--ca, --pin and --no-tls exclude each other")
    if ca is not None or pin is not None or no_tls:
        settings = SecurityConfig(
            tls=not no_tls,
            ca=_file_path(Path.cwd(), ca),
            pin=_pin(pin, what="--pin"),
            key=settings.key,
        )
    return settings


def _ui(table: dict[str, Any], *, ui: str | None, no_ui: bool) -> UiConfig:
    section = table.get("ui", {})
    if not isinstance(section, dict):
        raise ConfigError("ui must be a table (" + ", ".join(sorted(_UI_KEYS)) + ")")
    unknown = set(section) - _UI_KEYS
    if unknown:
        raise ConfigError(f"unknown ui key(s) {sorted(unknown)}; known: {sorted(_UI_KEYS)}")
    listen: tuple[str, int] | None = UI_DEFAULT_LISTEN
    configured = section.get("listen", True)
    if configured is False:
        listen = None
    elif isinstance(configured, str):
        listen = parse_ui_address(configured, what="ui.listen")
    elif configured is not True:
        raise ConfigError("ui.listen must be HOST:PORT, a PORT, or false")
    if ui is not None and no_ui:
        raise ConfigError("--ui and --no-ui exclude each other")
    if ui is not None:
        listen = parse_ui_address(ui, what="--ui")
    elif no_ui:
        listen = None
    hosts = section.get("allowed_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h.strip() for h in hosts):
        raise ConfigError("ui.allowed_hosts must be a list of host names")
    notifications = section.get("desktop_notifications", True)
    if not isinstance(notifications, bool):
        raise ConfigError("ui.desktop_notifications must be true or false")
    limits = {
        key: int(_positive(section, key, int))
        for key in ("max_upload_bytes", "max_request_bytes")
        if key in section
    }
    return UiConfig(
        listen=listen,
        allowed_hosts=tuple(h.strip().lower() for h in hosts),
        desktop_notifications=notifications,
        **limits,
    )


def parse_ui_address(text: str, *, what: str) -> tuple[str, int]:
    """The web app's address: ``HOST:PORT``, or a bare ``PORT`` on 127.0.0.1; port 0 means a
    port free when the daemon starts."""
    text = text.strip()
    if text.isdigit():
        text = f"127.0.0.1:{text}"
    host, colon, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ConfigError(
            f"{what} must be HOST:PORT or PORT with a port in 0..65535 (0: a free one), "
            f"not {text!r}"
        )
    return host, int(port_text)


def _file_path(base: Path, text: str | None) -> Path | None:
    if text is None:
        return None
    if not text:
        raise ConfigError("a file path must not be empty")
    return (base / Path(text).expanduser()).absolute()


def _pin(text: str | None, *, what: str) -> str | None:
    """The canonical form of a pinned fingerprint (``crypto`` is imported only when one is
    given: the commands that merely talk to the daemon start without it)."""
    if text is None:
        return None
    from crypto import IdentifierError, parse_public_identifier

    try:
        return parse_public_identifier(text.strip())
    except IdentifierError as error:
        raise ConfigError(
            f"{what} must be a super-peer's key fingerprint (pk1-...; `superpeer run` logs it): "
            f"{error}"
        ) from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"cannot read the configuration {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"the configuration {path} is not valid TOML: {error}") from None


def _optional(table: dict[str, Any], key: str, kind: type) -> Any:
    value = table.get(key)
    if value is not None and not isinstance(value, kind):
        raise ConfigError(f"{key} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def _positive(table: dict[str, Any], key: str, kind: type[float]) -> float:
    """``table[key]`` as ``kind`` (``int`` or ``float``), which must be positive (or zero,
    for a key in ``_ZERO_ALLOWED``)."""
    value = table[key]
    zero = key in _ZERO_ALLOWED
    if (
        isinstance(value, bool)
        or not isinstance(value, kind | int)
        or value < 0
        or (value == 0 and not zero)
    ):
        what = "integer" if kind is int else "number"
        raise ConfigError(f"{key} must be a {'non-negative' if zero else 'positive'} {what}")
    return kind(value)


def toml_to_json(table: dict[str, Any]) -> str:
    """A TOML table as JSON text; TOML's date and time values become ISO strings, which is how
    the JSON advertisement writes them."""
    return json.dumps(table, default=_iso_text)


def _iso_text(value: object) -> str:
    if isinstance(value, datetime.date | datetime.datetime | datetime.time):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} has no JSON form")
