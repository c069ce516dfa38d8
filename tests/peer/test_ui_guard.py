"""Who may use the web app (``peer.ui.guard``): the rules as a pure function of a request's head.
The same rules over HTTP are in ``test_ui.py``, and in a real browser in ``test_ui_browser.py``."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from peer.ui.guard import Allowed, Guard, Refused

TOKEN = "t" * 43
PORT = 8123
HOST = f"127.0.0.1:{PORT}"


def guard(**options) -> Guard:
    return Guard(TOKEN, port=PORT, bound_host=options.pop("bound_host", "127.0.0.1"), **options)


def check(method="GET", token=None, **headers: str):
    sent = {name.replace("_", "-"): [value] for name, value in headers.items()}
    sent.setdefault("host", [HOST])
    return guard().check(method, token, sent)


def cookie(token: str = TOKEN, port: int = PORT) -> str:
    return f"theme=dark; peer-ui-{port}={token}"


def test_the_token_in_a_get_logs_in_and_the_cookie_proves_it_afterwards():
    assert check(token=TOKEN) == Allowed(login=True)
    assert check("POST", token=TOKEN, origin=f"http://{HOST}") == Allowed(login=False)
    assert check(cookie=cookie()) == Allowed()
    assert check(authorization=f"token {TOKEN}") == Allowed()
    assert check(authorization=f"Token {TOKEN}") == Allowed()
    assert guard().cookie() == f"peer-ui-{PORT}={TOKEN}; Path=/; HttpOnly; SameSite=Strict"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"cookie": cookie("x" * 43)},
        {"cookie": cookie(port=PORT + 1)},
        {"authorization": f"Bearer {TOKEN}"},
        {"authorization": TOKEN},
    ],
)
def test_anything_else_needs_the_token(headers):
    verdict = check(**headers)
    assert isinstance(verdict, Refused)
    assert verdict.status == 401


@given(st.text(max_size=60))
def test_no_other_token_is_accepted(candidate):
    assume(candidate != TOKEN)
    for verdict in (
        check(token=candidate),
        check(cookie=cookie(candidate)),
        check(authorization=f"token {candidate}"),
    ):
        assert isinstance(verdict, Refused)
        assert verdict.status == 401


@pytest.mark.parametrize(
    "host",
    [
        "rebind.example:8123", "rebind.example", "127.0.0.1", "127.0.0.1:80", "127.0.0.2:8123",
        "localhost", "localhost.:8123", "[::1]", "127.0.0.1:8123.evil.example", "",
    ],
)  # fmt: skip
def test_a_foreign_host_is_refused_before_anything_else(host):
    verdict = check(token=TOKEN, host=host, cookie=cookie())
    assert isinstance(verdict, Refused)
    assert verdict.status == 403


@given(st.text(max_size=40))
def test_only_the_apps_own_names_are_hosts(host):
    allowed = {f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}"}
    verdict = check(cookie=cookie(), host=host)
    assert (verdict == Allowed()) == (host.lower() in allowed)


def test_two_host_headers_are_refused():
    verdict = guard().check("GET", TOKEN, {"host": [HOST, "rebind.example"]})
    assert verdict == Refused(
        403, "this peer's web app does not answer to the host name 127.0.0.1:8123, rebind.example"
    )


def test_configured_and_bound_names_are_hosts_too():
    proxied = guard(allowed_hosts=("Peer.Example", "other.example:443"), bound_host="0.0.0.0")
    for host in ("peer.example", "peer.example:8443", "other.example:443", f"localhost:{PORT}"):
        assert proxied.host_allowed(host), host
    for host in ("other.example", "other.example:80", f"0.0.0.0:{PORT}"):
        assert not proxied.host_allowed(host), host
    bound = guard(bound_host="192.168.1.5")
    assert bound.host_allowed(f"192.168.1.5:{PORT}")
    assert not bound.host_allowed("192.168.1.5:80")
    v6 = Guard(TOKEN, port=PORT, bound_host="fe80::1")
    assert v6.host_allowed(f"[fe80::1]:{PORT}")


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({"origin": f"http://{HOST}"}, True),
        ({"origin": f"https://{HOST}"}, True),
        ({"origin": "http://evil.example"}, False),
        ({"origin": "http://127.0.0.1:8124"}, False),  # another local app: same site, not origin
        ({"origin": "null"}, False),
        ({"origin": f"http://{HOST}.evil.example"}, False),
        ({"origin": f"ftp://{HOST}"}, False),
        ({"sec_fetch_site": "same-origin"}, True),
        ({"sec_fetch_site": "none"}, True),
        ({"sec_fetch_site": "same-site"}, False),
        ({"sec_fetch_site": "cross-site"}, False),
        ({"sec_fetch_site": "Cross-Site"}, False),
    ],
)
def test_cross_site_requests_are_refused_cookie_or_not(headers, allowed):
    for method in ("GET", "POST"):
        verdict = check(method, cookie=cookie(), **headers)
        assert (verdict == Allowed()) == allowed, (method, headers)
        if not allowed:
            assert verdict.status == 403


def test_a_link_from_another_site_may_open_the_app_with_its_token():
    navigation = {"sec_fetch_site": "cross-site", "sec_fetch_mode": "navigate"}
    assert check(token=TOKEN, **navigation) == Allowed(login=True)
    assert check(**navigation).status == 401, "its cookie is not sent along cross-site"
    posted = check("POST", token=TOKEN, **navigation)
    assert isinstance(posted, Refused) and posted.status == 403, "a cross-site form post"


def test_a_short_token_is_a_mistake():
    with pytest.raises(ValueError, match="32 characters"):
        Guard("short", port=1, bound_host="127.0.0.1")
