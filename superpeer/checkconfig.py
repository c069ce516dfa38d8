"""``superpeer check-config FILE``: what a daemon would run with, checked before it runs.

Operators (and ``ExecStartPre=`` in the service unit) run it after editing the file: a typo, a bad
address or a missing certificate is reported at once, with the key at fault, instead of as a
failed start. It reads the file and the identity files it names; it opens no socket and starts
nothing, so it can run beside the live daemon.
"""

from __future__ import annotations

import os
from pathlib import Path

from superpeer.config import SuperPeerConfig
from superpeer.security import identity_paths


def problems(config: SuperPeerConfig) -> list[str]:
    """What would stop a daemon with ``config`` from starting (empty: nothing found)."""
    found = []
    directory = config.directory
    existing = _nearest_existing(directory)
    if not existing.is_dir():
        found.append(f"data_dir: {existing} is not a directory")
    elif not os.access(existing, os.W_OK | os.X_OK):
        found.append(f"data_dir: {existing} is not writable by this user")
    if config.security.tls:
        paths = identity_paths(directory, config.security)
        configured = [config.security.key, config.security.certificate, config.security.ca]
        present = [p.exists() for p in paths]
        if any(configured) or any(present):
            for name, path, there in zip(("key", "certificate", "ca"), paths, present, strict=True):
                if not there:
                    found.append(f"security.{name}: {path} does not exist")
                elif not os.access(path, os.R_OK):
                    found.append(f"security.{name}: {path} is not readable by this user")
    if (
        config.http.enabled
        and config.http.bind[1] == config.port
        and (config.http.bind[0] == config.host)
    ):
        found.append(f"http.listen: {config.http.listen} is the super-peer's own listen address")
    return found


def summary(config: SuperPeerConfig) -> list[str]:
    """What the daemon would do, one line per concern."""
    lines = [
        f"listen {config.listen}, advertised as {config.address}",
        f"data directory {config.directory}",
        f"node id {config.node_id or '(generated once, kept in the data directory)'}",
        "join " + (", ".join(f"{h}:{p}" for h, p in config.join) or "nothing (a new network)"),
    ]
    if config.security.tls:
        key, certificate, ca = identity_paths(config.directory, config.security)
        if key.exists() or any((config.security.key, config.security.certificate)):
            lines.append(f"TLS with key {key}, certificate {certificate}, network CA {ca}")
        else:
            lines.append("TLS with a standalone identity, created at the first start")
    else:
        lines.append("NO TLS (plaintext; only to measure what encryption costs)")
    if config.http.enabled:
        host, port = config.http.bind
        what = "metrics, health, status page" if config.http.metrics else "health, status page"
        lines.append(f"HTTP endpoint http://{host}:{port}/ ({what})")
    else:
        lines.append("no HTTP endpoint")
    store = config.store
    lines.append(
        f"store {config.directory / 'state.sqlite'}, "
        + (
            "fsync at every commit"
            if store.sync == "full"
            else "sync normal (survives a killed process, not a power loss)"
        )
        + f", at most {store.max_inputs_per_commit} inputs per commit, paused below"
        + f" {store.min_free_bytes} bytes free (goes on at {store.resume_free_bytes})"
    )
    trace = config.trace
    lines.append(
        f"trace log {'on' if trace.enabled else 'off'}"
        + (f", rotated at {trace.max_bytes} bytes, {trace.keep} kept" if trace.enabled else "")
    )
    lines.append(
        f"log {config.logs.format} at {config.logs.level}, repeats at most every"
        f" {config.logs.repeat_seconds:g} s"
    )
    return lines


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path
