"""Who may use the web app: its access rules, as a pure function of a request's head.

A desktop is shared: other users of the machine, and every web page its browser opens, can reach a
loopback port. The app acts as the peer (it subscribes, publishes, fetches files), so each request
must prove it comes from the person who runs the daemon. Three rules, checked in this order:

1. **Host.** The request names this app: a loopback name (``127.0.0.1``, ``localhost``,
   ``[::1]``) with the port the app listens on, the listen address itself, or a configured
   ``allowed_hosts`` entry. A page whose own name was made to resolve to 127.0.0.1 (DNS
   rebinding) sends that name, and is refused (403) before anything else is looked at.
2. **Origin.** A browser says where a request comes from. ``Origin``, when present, must be this
   app (its host and port, ``http`` or ``https``); ``Sec-Fetch-Site``, when present, must be
   ``same-origin`` or ``none`` (typed or bookmarked), except for a top-level navigation by
   ``GET`` (a link to the app: the token it carries is checked next, and the cookie is not sent
   along cross-site). Another site's form or script is refused (403), cookie or not.
3. **Token.** The daemon makes a random token at start and prints the app's address with it
   (``?token=``, as Jupyter does). A ``GET`` with the right token in the URL gets the cookie
   (``HttpOnly``, ``SameSite=Strict``, named after the port: cookies do not tell ports apart,
   and several peers may run side by side) and is sent to the same address without the token,
   so that it stays out of the history and of ``Referer``. Afterwards the cookie is the proof;
   scripts may send ``Authorization: token ...``. Anything else is refused (401). Tokens are
   compared in constant time.

Nothing here reads a clock or a socket: ``Guard.check`` takes the method, the URL's token and
the headers, and answers ``Allowed`` or ``Refused``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS: Final = frozenset({"0.0.0.0", "::", ""})
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, slots=True)
class Allowed:
    """The request may go on. ``login``: the token came in the URL of a ``GET``; the answer is
    the cookie and a redirect to the same address without the token."""

    login: bool = False


@dataclass(frozen=True, slots=True)
class Refused:
    status: int
    reason: str


def _host_text(host: str, port: int) -> str:
    host = host.lower()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


class Guard:
    """The rules for one app: its token, the port it listens on, the host it is bound to and
    the extra host names it answers to (``[ui] allowed_hosts``)."""

    def __init__(
        self, token: str, *, port: int, bound_host: str, allowed_hosts: Iterable[str] = ()
    ) -> None:
        if len(token) < 32:
            raise ValueError("a token needs at least 32 characters")
        self.token = token
        self.port = port
        exact = {_host_text(name, port) for name in LOOPBACK_NAMES}
        if bound_host not in WILDCARDS:
            exact.add(_host_text(bound_host, port))
        any_port: set[str] = set()
        for allowed in allowed_hosts:
            entry = allowed.lower()
            name, colon, port_text = entry.rpartition(":")
            if colon and port_text.isdigit() and not name.endswith(":"):
                exact.add(entry)
            else:
                any_port.add(entry.strip("[]"))
        self._exact = frozenset(exact)
        self._any_port = frozenset(any_port)

    @property
    def cookie_name(self) -> str:
        return f"peer-ui-{self.port}"

    def cookie(self) -> str:
        """The ``Set-Cookie`` value that proves the token from now on."""
        return f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"

    def host_allowed(self, host: str) -> bool:
        host = host.lower()
        if host in self._exact:
            return True
        name, colon, port = host.rpartition(":")
        if not colon or not port.isdigit() or "]" in port:
            name = host
        return name.strip("[]") in self._any_port

    def check(
        self, method: str, url_token: str | None, headers: Mapping[str, Sequence[str]]
    ) -> Allowed | Refused:
        """``headers``: lower-case names to every value the request sent."""
        hosts = headers.get("host", ())
        if len(hosts) != 1 or not self.host_allowed(hosts[0]):
            shown = ", ".join(hosts) or "none"
            return Refused(403, f"this peer's web app does not answer to the host name {shown}")
        host = hosts[0].lower()
        origins = headers.get("origin", ())
        if len(origins) > 1 or (origins and not _same_origin(origins[0], host)):
            return Refused(403, f"cross-site request refused (Origin {', '.join(origins)})")
        site = (_single(headers, "sec-fetch-site") or "").lower() or None
        mode = (_single(headers, "sec-fetch-mode") or "").lower()
        navigation = mode == "navigate" and method in SAFE_METHODS
        if site not in (None, "same-origin", "none") and not navigation:
            return Refused(403, f"cross-site request refused (Sec-Fetch-Site {site})")
        if url_token is not None and self._is_token(url_token):
            return Allowed(login=method in SAFE_METHODS)
        if self._is_token(_cookie(headers, self.cookie_name)):
            return Allowed()
        authorization = _single(headers, "authorization") or ""
        scheme, _, credential = authorization.partition(" ")
        if scheme.lower() == "token" and self._is_token(credential.strip()):
            return Allowed()
        return Refused(
            401,
            "this page needs the peer's access token: open the address the daemon printed, "
            "or run `peer ui`",
        )

    def _is_token(self, candidate: str | None) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())


def _same_origin(origin: str, host: str) -> bool:
    scheme, separator, rest = origin.lower().partition("://")
    return bool(separator) and scheme in ("http", "https") and rest == host


def _single(headers: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = headers.get(name, ())
    return values[-1].strip() if values else None


def _cookie(headers: Mapping[str, Sequence[str]], name: str) -> str | None:
    """The value of cookie ``name`` (the last one, if the browser sent several)."""
    found = None
    for header in headers.get("cookie", ()):
        for item in header.split(";"):
            key, equals, value = item.strip().partition("=")
            if equals and key == name:
                found = value.strip().strip('"')
    return found
