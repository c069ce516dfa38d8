"""Peer daemon configuration: embedded defaults, a TOML file, command-line overrides (in that
order of precedence, the command line last).

A TOML file may set::

    superpeer = "127.0.0.1:7400"       # the access point (required to run, here or --superpeer)
    data_dir = "~/peers/alice"         # relative to this file; default: under the user's
                                       # data dir, semantic-pubsub/peer-<name or "default">
    name = "alice"                     # the peer id (default: generated once, kept in data_dir)
    request_timeout = 30.0             # seconds the access point has to answer a request
    max_frame_bytes = 1048576          # largest frame sent or accepted on the network link
    reconnect_initial = 0.5            # first reconnection delay, doubled up to reconnect_max
    reconnect_max = 30.0

    [advertisement]                    # what this peer publishes, applied at every start
    schemas = ["dc"]                   # (same keys as the JSON advertisement, see README)

Unknown keys are errors: a typo must not silently change what a daemon does. The data directory
holds everything a peer has (identity, subscriptions, notifications, the control socket), so
several peers run side by side on one machine with different ``--data-dir`` (or ``--name``).
"""

from __future__ import annotations

import datetime
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import platformdirs

NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEYS: Final = frozenset(
    {
        "superpeer",
        "data_dir",
        "name",
        "request_timeout",
        "max_frame_bytes",
        "reconnect_initial",
        "reconnect_max",
        "advertisement",
    }
)


class ConfigError(ValueError):
    """A configuration or option that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerConfig:
    data_dir: Path
    superpeer: tuple[str, int] | None = None
    name: str | None = None
    request_timeout: float = 30.0
    max_frame_bytes: int = 1024 * 1024
    reconnect_initial: float = 0.5
    reconnect_max: float = 30.0
    advertisement: str | None = None
    """The config file's advertisement as JSON text (validated when the daemon starts)."""

    @property
    def control_path(self) -> Path:
        return self.data_dir / "control.sock"


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
    superpeer: str | None = None,
) -> PeerConfig:
    """The configuration from ``config_file`` (if any) with the command-line options on top."""
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
    address = superpeer if superpeer is not None else _optional(table, "superpeer", str)
    advertisement = table.get("advertisement")
    if advertisement is not None and not isinstance(advertisement, dict):
        raise ConfigError("advertisement must be a table (the JSON advertisement's keys)")
    config = PeerConfig(
        data_dir=directory,
        superpeer=(
            parse_address(address, what="--superpeer" if superpeer is not None else "superpeer")
            if address
            else None
        ),
        name=chosen_name,
        request_timeout=_positive(table, "request_timeout", 30.0),
        max_frame_bytes=int(_positive(table, "max_frame_bytes", 1024 * 1024, integer=True)),
        reconnect_initial=_positive(table, "reconnect_initial", 0.5),
        reconnect_max=_positive(table, "reconnect_max", 30.0),
        advertisement=toml_to_json(advertisement) if advertisement is not None else None,
    )
    if config.reconnect_max < config.reconnect_initial:
        raise ConfigError("reconnect_max must be at least reconnect_initial")
    return config


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


def _positive(table: dict[str, Any], key: str, default: float, *, integer: bool = False) -> float:
    value = table.get(key, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise ConfigError(f"{key} must be a positive {'integer' if integer else 'number'}")
    return float(value)


def toml_to_json(table: dict[str, Any]) -> str:
    """A TOML table as JSON text; TOML's date and time values become ISO strings, which is how
    the JSON advertisement writes them."""
    return json.dumps(table, default=_iso_text)


def _iso_text(value: object) -> str:
    if isinstance(value, datetime.date | datetime.datetime | datetime.time):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} has no JSON form")
