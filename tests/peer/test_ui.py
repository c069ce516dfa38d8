"""The web app in one process: ``serve_peer`` (with TLS and secure identification, against the
fake access point) serves it on 127.0.0.1, and the test speaks HTTP to it from worker threads
(``ui_client``), sending the headers a browser would and those it would not. The pages in a real
browser, against real super-peers, are ``test_ui_browser.py``."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import stat
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives import serialization

import crypto
import qel
from peer import cli
from peer.config import load_config
from peer.daemon import DaemonError, Running, serve_peer
from peer.ui.app import ROUTES, STATIC, STREAMS
from qel.resources import resource_of
from tests.peer.helpers import attached, notify
from tests.peer.ui_client import UiClient
from wire import messages as m

ARTICLE = """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
<http://example.org/a> a dc:article ; dc:title "RDF in P2P networks" ; dc:creator "W. Nejdl" .
"""
NOTIFIER = """#!/bin/sh
printf '%s\\n' "$@" > "$0.fifo"
"""


@pytest.fixture
def notifier(tmp_path, monkeypatch) -> Path:
    """A ``notify-send`` on ``PATH`` that writes its arguments into a FIFO (``notify-send`` is
    not installed here; the desktop's would show them): reading the FIFO waits for a call."""
    directory = tmp_path / "bin"
    directory.mkdir()
    script = directory / "notify-send"
    script.write_text(NOTIFIER)
    script.chmod(0o755)
    os.mkfifo(f"{script}.fifo")
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return Path(f"{script}.fifo")


async def start_peer(nursery, tmp_path, tls_world, tls_access_point, name="alice", index=0, **ui):
    data = tmp_path / name
    tls_world.install_key(data, index)
    config = load_config(
        None,
        data_dir=str(data),
        name=name,
        superpeer=tls_access_point.address,
        ca=str(tls_world.network.ca),
    )
    if ui:
        config = config.__class__(**{**_fields(config), "ui": config.ui.__class__(**ui)})
    running: Running = await nursery.start(serve_peer, config)
    await attached(tls_access_point, running.peer_id)
    return running


def _fields(config) -> dict:
    return {name: getattr(config, name) for name in config.__slots__}


@pytest.fixture
async def alice(nursery, tmp_path, tls_world, tls_access_point) -> Running:
    return await start_peer(nursery, tmp_path, tls_world, tls_access_point)


@pytest.fixture
async def app(alice) -> UiClient:
    client = UiClient(alice.ui_url)
    await client.login()
    return client


async def test_the_daemon_serves_the_app_on_loopback_and_writes_where_peer_ui_finds_it(
    alice, tmp_path
):
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[\w-]{43}", alice.ui_url)
    url_file = tmp_path / "alice" / "ui.url"
    assert url_file.read_text() == alice.ui_url + "\n"
    assert stat.S_IMODE(url_file.stat().st_mode) == 0o600


async def test_the_token_in_the_url_becomes_a_strict_http_only_cookie(alice):
    client = UiClient(alice.ui_url)
    answer = await client.request("GET", "/inbox?token=" + client.token + "&x=1", cookie=False)
    assert answer.status == 303
    assert answer.headers["location"] == "/inbox?x=1", "the token leaves the address"
    name = f"peer-ui-{client.host.rpartition(':')[2]}"
    assert answer.headers["set-cookie"] == (
        f"{name}={client.token}; Path=/; HttpOnly; SameSite=Strict"
    )
    client.cookie = answer.headers["set-cookie"].split(";")[0]
    page = await client.request("GET", "/")
    assert page.status == 200
    assert b'<script src="/static/app.js"' in page.body
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    status = await client.request("GET", "/api/status", headers={"Authorization": ""})
    assert status.json()["peer_id"] == alice.peer_id
    scripted = UiClient(alice.ui_url)
    answer = await scripted.request(
        "GET", "/api/status", headers={"Authorization": f"token {client.token}"}
    )
    assert answer.status == 200, "scripts may send the token in a header"


async def test_a_missing_token_a_foreign_host_and_a_forged_origin_are_refused(
    app, alice, tls_access_point
):
    stranger = UiClient(alice.ui_url)
    for path in ("/", "/api/status", "/static/app.js", "/api/events"):
        answer = await stranger.request("GET", path)
        assert answer.status == 401, path
        assert b"peer ui" in answer.body
    wrong = await stranger.request("GET", "/?token=" + "x" * 43, cookie=False)
    assert wrong.status == 401
    other_port = app.cookie.replace("peer-ui-", "peer-ui-1")
    assert (await stranger.request("GET", "/", headers={"Cookie": other_port})).status == 401

    # DNS rebinding: a page at rebind.example made that name resolve to 127.0.0.1; the browser
    # sends its own name as Host, and the cookie would not even be sent (another site)
    port = app.host.rpartition(":")[2]
    for host in (f"rebind.example:{port}", "127.0.0.1:1", "localhost", f"127.0.0.2:{port}"):
        answer = await app.request("GET", "/api/status", headers={"Host": host})
        assert answer.status == 403, host
        assert b"does not answer to the host name" in answer.body
    for host in (f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        assert (await app.request("GET", "/api/status", headers={"Host": host})).status == 200

    # cross-site requests: the right cookie (a same-site page on another port gets it sent
    # along), but a foreign Origin or Sec-Fetch-Site
    before = len(tls_access_point.requests_from(alice.peer_id))
    subscribe = {"query": 'X : t(X, dc:title, T), T contains "RDF"'}
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1:1"},
        {"Origin": "null"},
        {"Origin": f"{app.origin}.evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        answer = await app.request("POST", "/api/subscribe", body=subscribe, headers=headers)
        assert answer.status == 403, headers
        assert b"cross-site request refused" in answer.body
    navigation = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert (await stranger.request("GET", "/", headers=navigation)).status == 401
    link = await stranger.request("GET", "/?token=" + app.token, headers=navigation)
    assert link.status == 303, "a link to the app, with its token, is how one opens it"
    assert len(tls_access_point.requests_from(alice.peer_id)) == before, "nothing went out"
    answer = await app.request("POST", "/api/subscribe", body=subscribe)
    assert answer.status == 200
    assert answer.json()["query"] == 'X : t(X, dc:title, T), T contains "RDF"'


def secrets_of(data_dir: Path) -> list[bytes]:
    """Every form in which the peer's private key or private identifier could leak."""
    identity = data_dir / "identity"
    pem = (identity / "key.pem").read_bytes()
    key = serialization.load_pem_private_key(pem, password=None)
    der = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    private_id = (identity / "private-id").read_text().strip()
    raw = base64.b32decode(private_id.removeprefix("secret1-").upper() + "====")
    numbers = key.private_numbers()
    return [
        b"PRIVATE KEY",
        *[line for line in pem.splitlines() if len(line) >= 40],
        base64.b64encode(der)[:64],
        private_id.encode(),
        private_id.upper().encode(),
        raw.hex().encode(),
        base64.b64encode(raw).rstrip(b"="),
        base64.urlsafe_b64encode(raw).rstrip(b"="),
        str(numbers.d).encode()[:40],
        format(numbers.d, "x").encode()[:40],
        format(numbers.p, "x").encode()[:40],
    ]


async def test_no_request_reads_the_private_key_or_the_private_identifier(
    app, alice, tmp_path, tls_access_point
):
    data = tmp_path / "alice"
    assert (data / "identity" / "private-id").exists(), "registered: the secret is on disk"
    await tls_access_point.deliver(alice.peer_id, notify(owner="pk1-" + "a" * 52))
    event = await app.first_event("/api/events?after=0")  # the app has something to show
    attempts = [(method, path, None) for method, path in alice_routes(app)]
    sneaky = [
        "/static/../identity/key.pem",
        "/static/%2e%2e/identity/private-id",
        "/identity/key.pem",
        "/ui.url",
        "/api/file?rendezvous=../identity/key.pem",
        "/api/file?rendezvous=" + "0" * 32,
        "/api/inbox?after=../../identity",
        "/api/events?after=x",
    ]
    attempts += [("GET", path, None) for path in sneaky]
    bodies = [
        {"publication": "../identity/key.pem"},
        {"id": "../identity/private-id"},
        {"query": str(data / "identity" / "key.pem")},
        {"document": "<http://e/a> <http://e/p> <file:///identity/key.pem> .", "format": "nt"},
        {"public_id": "../identity/private-id"},
    ]
    attempts += [("POST", path, body) for _, path in alice_routes(app, "POST") for body in bodies]
    forms = secrets_of(data)
    for method, path, body in attempts:
        if path == "/api/events":
            continue  # a stream: read below
        answer = await app.request(method, path, body=body)
        assert answer.status not in (500, 502), (method, path, body, answer.body)
        everything = answer.body + json.dumps(answer.headers).encode()
        for form in forms:
            assert form not in everything, (method, path, answer.status)
    for form in forms:
        assert form not in json.dumps(event).encode()
    assert "PRIVATE KEY" not in (data / "ui.url").read_text()


def alice_routes(app: UiClient, method: str | None = None) -> list[tuple[str, str]]:
    """Every route the app answers (its own tables)."""
    routes = [("GET", path) for path in STATIC] + [*ROUTES, *STREAMS]
    return [r for r in routes if method is None or r[0] == method]


async def test_a_subscription_built_from_the_form_is_the_query_it_shows(
    app, alice, tls_access_point
):
    form = {
        "class": "dc:article",
        "conditions": [
            {"property": "dc:creator", "operator": "contains", "values": ["Nejdl", "Koubarakis"]},
            {"property": "dc:date", "operator": "=", "values": ["2004"]},
        ],
    }
    built = (await app.request("POST", "/api/query/build", body=form)).json()
    paper = qel.parse_subscription(
        "X : t(X, rdf:type, dc:article), t(X, dc:creator, Y), t(X, dc:date, D), "
        '(Y contains "Nejdl" ; Y contains "Koubarakis"), D = 2004'
    )
    assert qel.parse_subscription(built["qel"]).key == paper.key
    assert qel.parse_subscription(built["sparql"]).key == paper.key
    bad = await app.request(
        "POST",
        "/api/query/build",
        body={
            "conditions": [
                {"property": "dc:date", "operator": "=", "type": "number", "values": ["soon"]}
            ]
        },
    )
    assert (bad.status, bad.json()["field"]) == (400, "conditions.0.values.0")
    typo = await app.request(
        "POST", "/api/query/check", body={"query": "X : t(X, dc:title, T),\n T contains"}
    )
    assert typo.status == 400
    assert (typo.json()["line"], typo.json()["column"]) == (2, 12)
    sparql = "SELECT ?x WHERE {\n  ?x dc:title ?t .\n  FILTER (?t > )\n}"
    wrong = (await app.request("POST", "/api/query/check", body={"query": sparql})).json()
    assert wrong["line"] == 3, wrong
    answer = await app.request(
        "POST",
        "/api/subscribe",
        body={"query": built["qel"], "id": "papers", "on_change": True, "expires": "2h"},
    )
    assert answer.status == 200, answer.body
    [subscribe] = [
        r for r in tls_access_point.requests_from(alice.peer_id) if isinstance(r, m.Subscribe)
    ]
    assert (subscribe.id, subscribe.on_change) == ("papers", True)
    assert subscribe.subscription.key == paper.key
    assert subscribe.expires is not None
    status = (await app.request("GET", "/api/status")).json()
    assert status["on_change"] == ["papers"]
    refused = await app.request("POST", "/api/subscribe", body={"query": "X : t(X, dc:title, T) ,"})
    assert refused.status == 400
    assert refused.json()["error"] == "invalid"


async def test_the_inbox_streams_new_records_with_readable_rdf_and_notifies_the_desktop(
    notifier, nursery, tmp_path, tls_world, tls_access_point
):
    alice = await start_peer(nursery, tmp_path, tls_world, tls_access_point)
    app = UiClient(alice.ui_url)
    await app.login()
    events = []

    async def listen() -> None:
        events.append(await app.first_event("/api/events?after=0"))

    owner = "pk1-" + "b" * 52
    item = qel.parse_publications(ARTICLE, publisher=owner, id="n1")[0]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listen)
        await tls_access_point.deliver(alice.peer_id, notify(item, owner=owner))
        shown = await trio.to_thread.run_sync(notifier.read_text)
    [record] = events
    assert (record["publication"], record["owner"], record["kind"]) == ("n1", owner, "added")
    readable = record["readable"]
    assert readable["title"] == "RDF in P2P networks"
    assert [(s["property"], s["value"]) for s in readable["statements"]] == [
        ("type", "dc:article"),
        ("title", "RDF in P2P networks"),
        ("creator", "W. Nejdl"),
    ]
    assert shown.splitlines() == [
        "--app-name",
        "semantic-pubsub peer",
        "New publication: RDF in P2P networks",
        "matches s1",
    ]
    off = await app.request("POST", "/api/settings", body={"desktop_notifications": False})
    assert off.json() == {"desktop_notifications": False}
    saved = json.loads((tmp_path / "alice" / "ui-settings.json").read_text())
    assert saved == {"desktop_notifications": False}, "kept for the next start"
    status = (await app.request("GET", "/api/status")).json()
    assert status["desktop_notifications"] == {"enabled": False, "available": True}


async def test_locate_says_whether_a_publisher_is_online_now(
    app, alice, tls_access_point, tls_world
):
    answer = await app.request("POST", "/api/locate", body={"public_id": alice.peer_id})
    assert answer.json()["online"] is True
    elsewhere = crypto.public_identifier(tls_world.peer_keys[1])
    answer = await app.request("POST", "/api/locate", body={"public_id": elsewhere})
    assert answer.json()["online"] is False
    tls_access_point.refuse_lookups = "too many look-ups"
    answer = await app.request("POST", "/api/locate", body={"public_id": elsewhere})
    assert (answer.status, answer.json()["error"]) == (409, "refused")


async def test_share_publishes_a_file_with_its_metadata_then_changes_and_withdraws_it(
    app, alice, tmp_path, tls_access_point
):
    await app.request("POST", "/api/advertise", body={"schemas": ["dc"]})
    assert tls_access_point.peers[alice.peer_id].advertisement == qel.parse_advertisement(
        {"schemas": ["dc"]}
    )
    paper = b"%PDF-1.4 a paper\n" * 500
    description = {
        "id": "paper-1",
        "metadata": {
            "identifier": "http://example.org/papers/p1.pdf",
            "class": "dc:article",
            "title": "Super-peers",
            "creators": "W. Nejdl\nP. Chirita",
            "date": "2004-05-31",
            "subjects": "p2p; rdf",
        },
    }
    header = {"X-Publish": json.dumps(description)}
    answer = await app.request("POST", "/api/publish/file", body=paper, headers=header)
    assert answer.status == 200, answer.body
    [result] = answer.json()["results"]
    assert (result["id"], result["outcome"], result["size"]) == ("paper-1", "published", len(paper))
    [sent] = [r for r in tls_access_point.requests_from(alice.peer_id) if isinstance(r, m.Publish)]
    resource = resource_of(sent.publication)
    assert resource is not None and resource.size == len(paper)
    assert sent.publication.subject.value == "http://example.org/papers/p1.pdf"
    assert not list((tmp_path / "alice" / "ui-uploads").iterdir()), "the upload is gone"
    published = (await app.request("GET", "/api/published")).json()["published"]
    [item] = published
    assert (item["id"], item["changes"], item["retracted"]) == ("paper-1", 1, False)
    assert item["readable"]["file"] == {"sha256": resource.sha256, "size": len(paper)}
    assert {(s["property"], s["value"], s["type"]) for s in item["readable"]["statements"]} >= {
        ("date", "2004-05-31", "date"),
        ("creator", "P. Chirita", "text"),
    }

    update = {
        "id": "paper-1",
        "change": "update",
        "document": item["turtle"].replace("Super-peers", "Super-peers, again"),
    }
    answer = await app.request("POST", "/api/publish", body=update)
    assert answer.status == 200, answer.body
    last = tls_access_point.requests_from(alice.peer_id)[-1]
    assert isinstance(last, m.Publish) and last.change == "update"
    assert resource_of(last.publication) == resource, "a new description keeps the file"
    item = (await app.request("GET", "/api/published")).json()["published"][0]
    assert (item["changes"], item["readable"]["title"]) == (2, "Super-peers, again")

    answer = await app.request("POST", "/api/retract", body={"id": "paper-1"})
    assert answer.status == 200, answer.body
    item = (await app.request("GET", "/api/published")).json()["published"][0]
    assert item["retracted"] is True
    outside = {"document": '<http://e/a> <http://xmlns.com/foaf/0.1/name> "x" .', "format": "nt"}
    answer = await app.request("POST", "/api/publish", body=outside)
    assert answer.status == 409
    assert answer.json()["results"][0]["reason"] == "the publication is outside your advertisement"


async def test_an_upload_beyond_the_limit_is_refused_and_leaves_nothing(
    nursery, tmp_path, tls_world, tls_access_point
):
    running = await start_peer(
        nursery, tmp_path, tls_world, tls_access_point, name="small", max_upload_bytes=1000
    )
    app = UiClient(running.ui_url)
    await app.login()
    await app.request("POST", "/api/advertise", body={"schemas": ["dc"]})
    header = {"X-Publish": json.dumps({"metadata": {"title": "big"}})}
    answer = await app.request("POST", "/api/publish/file", body=b"x" * 1001, headers=header)
    assert answer.status == 413
    assert "max_upload_bytes" in answer.json()["message"]
    assert not any(
        isinstance(r, m.Publish) for r in tls_access_point.requests_from(running.peer_id)
    )
    assert not list((tmp_path / "small" / "ui-uploads").iterdir())
    answer = await app.request("POST", "/api/publish/file", body=b"x" * 1000, headers=header)
    assert answer.status == 200, answer.body


async def test_peer_stop_stops_the_daemon_which_stays_registered(
    nursery, tmp_path, tls_world, tls_access_point, capsys
):
    data = tmp_path / "alice"
    tls_world.install_key(data)
    config = load_config(
        None, data_dir=str(data), superpeer=tls_access_point.address, ca=str(tls_world.network.ca)
    )
    finished = trio.Event()

    async def run(*, task_status) -> None:
        await serve_peer(config, task_status=task_status)
        finished.set()

    running = await nursery.start(run)
    await attached(tls_access_point, running.peer_id)
    code = await trio.to_thread.run_sync(cli.main, ["stop", "--data-dir", str(data)])
    out = capsys.readouterr().out
    assert code == 0
    assert out == (
        f"peer {running.peer_id} stopped; it stays registered, and its access point keeps its "
        "subscriptions and what arrives for it until it runs again\n"
    )
    await finished.wait()
    assert not (data / "ui.url").exists()
    assert not any(isinstance(r, m.Leave) for r in tls_access_point.requests_from(running.peer_id))
    assert (data / "identity" / "private-id").exists(), "still registered"
    code = await trio.to_thread.run_sync(cli.main, ["stop", "--json", "--data-dir", str(data)])
    captured = capsys.readouterr()
    assert code == 3
    assert json.loads(captured.out)["error"] == "unavailable"
    assert captured.err.startswith("peer: no peer daemon is running")


async def test_an_address_in_use_stops_the_daemon_with_a_clear_message(
    tmp_path, tls_world, tls_access_point
):
    data = tmp_path / "alice"
    tls_world.install_key(data)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = load_config(
            None,
            data_dir=str(data),
            superpeer=tls_access_point.address,
            ca=str(tls_world.network.ca),
            ui=f"127.0.0.1:{port}",
        )
        with pytest.raises(BaseException) as caught:
            await serve_peer(config)
    error = caught.value
    while isinstance(error, BaseExceptionGroup):
        [error] = error.exceptions
    assert isinstance(error, DaemonError)
    assert str(error) == (
        f"cannot serve the web app at 127.0.0.1:{port}: Address already in use; choose another "
        "address with --ui HOST:PORT (or [ui] listen), or none with --no-ui"
    )
    assert not (data / "control.sock").exists()


async def test_without_the_web_app_peer_ui_says_so(
    nursery, tmp_path, tls_world, tls_access_point, run_cli
):
    running = await start_peer(nursery, tmp_path, tls_world, tls_access_point, listen=None)
    assert running.ui_url is None
    assert not (tmp_path / "alice" / "ui.url").exists()
    code, out, err = await run_cli("ui", "--data-dir", str(tmp_path / "alice"))
    assert (code, out) == (2, "")
    assert err.startswith("peer: the daemon runs without its web app (it was started with --no-ui")
