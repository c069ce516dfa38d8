"""The web app in a real browser: Debian's chromium driven by Playwright, against real daemons
(two TLS super-peers, Bob's peer daemon behind sp0 with its web app, Alice's behind sp1, driven
by the ``peer`` command as a second person would). A person builds a subscription with the form,
Alice publishes, the notification appears without a reload, the file is fetched directly and,
with Alice offline, by rendezvous when she is back; a retraction shows as withdrawn; Bob shares
a file with its description and withdraws it. Then what a hostile page tries: no token, a
foreign ``Host`` (DNS rebinding, with the browser's resolver pointed at 127.0.0.1), a form of
another origin, a forged ``Origin``.

With ``PEER_UI_SCREENSHOTS=docs`` the screenshots of each page are kept there (the README's);
otherwise in the test's temporary directory.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from deploy.cluster import Cluster
from peer.control import ControlClient

pytestmark = [pytest.mark.process, pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = os.environ.get("PEER_UI_SCREENSHOTS")
ROOT = Path(__file__).resolve().parents[2]
REBINDING = "rebind.test"
DC = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
PAPERS = {
    "pubsub04": '<http://www.l3s.de/publications/pubsub04.pdf> a dc:article ; dc:title "Designing '
    'Semantic Publish/Subscribe Networks Using Super-Peers" ; dc:creator "P. Chirita", '
    '"S. Idreos", "M. Koubarakis", "W. Nejdl" ; dc:date 2004 ; dc:subject "p2p", "rdf" .',
    "esws04": "<http://www.intelligence.tuc.gr/publications/esws04.pdf> a dc:article ; dc:title "
    '"Publish/subscribe with RDF data over large structured overlay networks" ; dc:creator '
    '"M. Koubarakis" ; dc:date 2004 .',
}
EXPECTED_QEL = (
    "X : t(X, dc:creator, V1), t(X, dc:date, V2), t(X, rdf:type, dc:article), "
    '(V1 contains "Koubarakis", V2 = 2004 ; V1 contains "Nejdl", V2 = 2004)'
)


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    """Two super-peers; Bob (peer0, with the web app) at sp0, Alice (peer1) at sp1."""
    with Cluster(2, directory=tmp_path_factory.mktemp("ui"), peers=0) as cluster:
        cluster.peer_directories.extend([cluster.root / "bob", cluster.root / "alice"])
        cluster.start_peer(0, 0)
        cluster.start_peer(1, 1)
        yield cluster


def peer(directory: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "peer.cli", *argv, "--data-dir", str(directory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if check:
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done


def publish(owner: Path, directory: Path, name: str, *, copies: int) -> bytes:
    """``peer publish`` of the paper ``name`` with its file (made here); the file's bytes."""
    data = f"%PDF-1.4\n% {name}\n".encode() * copies
    (directory / f"{name}.pdf").write_bytes(data)
    (directory / f"{name}.ttl").write_text(DC + PAPERS[name])
    peer(owner, "publish", str(directory / f"{name}.ttl"), "--id", name, "--file",
         str(directory / f"{name}.pdf"))  # fmt: skip
    return data


def ui_url(directory: Path) -> str:
    return (directory / "ui.url").read_text().strip()


def next_record(directory: Path, after: int) -> dict:
    """The daemon's next inbox record after ``after`` (its blocking inbox call: no polling)."""
    with ControlClient(directory / "control.sock", timeout=60) as control:
        ok, body = control.call("inbox", after=str(after), wait="true")
    assert ok, body
    return body["records"][0]


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("Debian's chromium package is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                f"--host-resolver-rules=MAP {REBINDING} 127.0.0.1",
            ],
        )
        try:
            yield launched
        finally:
            launched.close()


def shot(page, tmp_path: Path, name: str) -> None:
    target = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")  # the header is sticky: it would show mid-page
    page.screenshot(path=str(target / f"peer-ui-{name}.png"), full_page=True)


def test_a_person_follows_a_topic_and_fetches_what_arrives(browser, network, tmp_path):
    from playwright.sync_api import expect

    bob, alice = network.peer_directories
    (tmp_path / "ad.json").write_text('{"schemas": ["dc"]}')
    peer(alice, "advertise", str(tmp_path / "ad.json"))
    context = browser.new_context(viewport={"width": 1200, "height": 900}, accept_downloads=True)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(ui_url(bob))
    assert page.url.endswith("/"), "the token left the address"

    # -- Follow: the form --------------------------------------------------------------------
    page.fill("#q-class", "dc:article")
    first = page.locator("#conditions .condition").first
    first.locator(".c-property").fill("dc:creator")
    first.locator(".c-value").first.fill("Nejdl")
    first.locator(".c-or").click()
    first.locator(".c-value").nth(1).fill("Koubarakis")
    page.click("#add-condition")
    second = page.locator("#conditions .condition").nth(1)
    second.locator(".c-property").fill("dc:date")
    second.locator(".c-operator").select_option("=")
    second.locator(".c-value").first.fill("2004")
    expect(page.locator("#q-qel")).to_have_text(EXPECTED_QEL)
    expect(page.locator("#q-sparql")).to_contain_text('CONTAINS(?V1, "Nejdl") && ?V2 = 2004')
    page.fill("#q-id", "nejdl-or-koubarakis-2004")
    shot(page, tmp_path, "follow")
    page.click("#subscribe")
    expect(page.locator("#subscribe-result")).to_contain_text(
        "Following “nejdl-or-koubarakis-2004”"
    )
    expect(
        page.locator('#subscriptions tr[data-subscription="nejdl-or-koubarakis-2004"]')
    ).to_be_visible()
    # typed, with the error where the parser stopped
    page.click('[data-mode="text"]')
    page.fill("#q-text", "X : t(X, dc:title, T),\n T contains ")
    expect(page.locator("#q-error-where")).to_contain_text("^ line 2, column 13")
    page.fill("#q-text", 'X : t(X, dc:title, T),\n T contains "RDF"')
    expect(page.locator("#q-qel")).to_have_text('X : t(X, dc:title, T), T contains "RDF"')
    expect(page.locator("#q-error")).to_be_hidden()

    # -- Inbox: a publication arrives without a reload -----------------------------------------
    page.click('nav a[data-page="inbox"]')
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    paper = publish(alice, tmp_path, "pubsub04", copies=2000)
    card = page.locator('#records .record[data-publication="pubsub04"]')
    expect(card).to_be_visible(timeout=30000)
    expect(card).to_have_attribute("data-kind", "added")
    expect(card.locator("h3")).to_have_text(
        "Designing Semantic Publish/Subscribe Networks Using Super-Peers"
    )
    expect(card.locator("dl")).to_contain_text("W. Nejdl")
    expect(page.locator(".toast")).to_contain_text("New: Designing Semantic")
    expect(card.locator(".presence")).to_have_text("online now", timeout=20000)
    assert [url for url in navigations if "#" not in url] == [], "no reload"
    alice_id = card.get_attribute("data-owner")
    assert alice_id is not None and alice_id.startswith("pk1-")
    shot(page, tmp_path, "inbox")

    # -- Fetch, directly: open and save, hash verified ----------------------------------------
    card.locator("button.fetch").click()
    item = page.locator('.fetch-item[data-publication="pubsub04"]')
    expect(item).to_have_attribute("data-state", "done", timeout=30000)
    expect(item.locator(".verified")).to_contain_text("verified")
    with page.expect_download() as saving:
        item.get_by_text("Save").click()
    assert Path(saving.value.path()).read_bytes() == paper
    assert saving.value.suggested_filename == "pubsub04.pdf"
    base = ui_url(bob).partition("/?")[0]
    opened = context.request.get(base + str(item.get_by_text("Open").get_attribute("href")))
    assert (opened.status, opened.headers["content-type"]) == (200, "application/pdf")
    assert opened.body() == paper

    # -- Fetch by rendezvous: the owner is offline ---------------------------------------------
    page.click('nav a[data-page="inbox"]')
    thesis = publish(alice, tmp_path, "esws04", copies=3000)
    second_card = page.locator('#records .record[data-publication="esws04"]')
    expect(second_card).to_be_visible(timeout=30000)
    stopped = peer(alice, "stop")
    assert "stays registered" in stopped.stdout
    assert network.peer_processes[1].wait(timeout=30) == 0, "peer run ends by itself"
    second_card.locator("button.fetch").click()
    waiting = page.locator('.fetch-item[data-publication="esws04"]')
    expect(waiting).to_have_attribute("data-state", "waiting", timeout=30000)
    expect(waiting.locator(".rendezvous")).to_contain_text("The owner is offline")
    shot(page, tmp_path, "fetch-rendezvous")
    network.start_peer(1, 1)  # Alice is back: she uploads to Bob's access point
    expect(waiting).to_have_attribute("data-state", "done", timeout=60000)
    saved = str(waiting.get_by_text("Save").get_attribute("href"))
    assert context.request.get(base + saved).body() == thesis
    shot(page, tmp_path, "fetch")

    # -- a retraction shows as withdrawn ------------------------------------------------------
    page.click('nav a[data-page="inbox"]')
    peer(alice, "retract", "pubsub04")
    expect(card).to_have_attribute("data-kind", "removed", timeout=30000)
    expect(card.locator(".kind")).to_have_text("removed")
    expect(card.locator("button.fetch")).to_have_count(0)

    # -- Share: advertise, a file with its description, then withdraw it ----------------------
    peer(alice, "subscribe", 'X : t(X, dc:creator, C), C contains "Bob"', "--id", "bobs")
    after = int(json.loads(peer(alice, "status", "--json").stdout)["inbox"]["records"])
    page.click('nav a[data-page="share"]')
    page.check('#ad-schemas input[value="dc"]')
    page.click("#advertise")
    expect(page.locator("#advertise-result")).to_contain_text('Advertised {"schemas": ["dc"]}')
    report = b"A report on what Bob read in 2004.\n" * 100
    (tmp_path / "report.txt").write_bytes(report)
    page.set_input_files("#s-file", str(tmp_path / "report.txt"))
    page.fill("#s-identifier", "http://example.org/bob/report.txt")
    page.fill("#s-title", "What I read in 2004")
    page.fill("#s-creators", "Bob")
    page.fill("#s-date", "2004-12-31")
    page.fill("#s-subjects", "p2p; reading")
    page.fill("#s-id", "report")
    page.click("#publish")
    expect(page.locator("#publish-result")).to_contain_text("published report")
    published = page.locator('#published .published[data-id="report"]')
    expect(published).to_contain_text("What I read in 2004")
    shot(page, tmp_path, "share")
    heard = next_record(alice, after)
    assert (heard["publication"], heard["kind"]) == ("report", "added")
    page.once("dialog", lambda dialog: dialog.accept())
    published.locator("button.retract").click()
    expect(published.locator(".kind")).to_have_text("withdrawn")
    assert next_record(alice, heard["sequence"])["kind"] == "removed"

    # -- Status --------------------------------------------------------------------------------
    page.click('nav a[data-page="status"]')
    bob_id = json.loads(peer(bob, "status", "--json").stdout)["peer_id"]
    expect(page.locator('[data-fact="Public identifier"] td')).to_have_text(bob_id)
    expect(page.locator('[data-fact="Key fingerprint"] td')).to_contain_text("SHA256:")
    expect(page.locator('[data-fact="Connection"] td')).to_contain_text("connected since")
    expect(page.locator('[data-fact="Access point"] td')).to_contain_text("super-peer sp0")
    offset = page.locator('[data-fact="Clock offset from the access point"] td')
    expect(offset).to_have_text(re.compile(r"not measured|[+-]\d+\.\d{3} s"))
    shot(page, tmp_path, "status")
    assert problems == []
    context.close()


class _EvilPage(http.server.BaseHTTPRequestHandler):
    """Another site on this machine (another port of 127.0.0.1: the same site, not the same
    origin), whose page posts a subscription to the peer's app."""

    target = ""

    def do_GET(self) -> None:
        form = (
            f'<form method="post" action="{self.target}/api/subscribe" enctype="text/plain">'
            '<input name=\'{"query": "X : t(X, dc:title, T)", "x": "\' value=\'"}\'>'
            '<button id="go">win a prize</button></form>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(form)))
        self.end_headers()
        self.wfile.write(form)

    def log_message(self, *args: object) -> None:
        pass


def test_a_missing_token_a_foreign_host_and_another_sites_requests_are_refused(browser, network):
    bob = network.peer_directories[0]
    url = ui_url(bob)
    base, _, token = url.partition("/?token=")
    port = base.rpartition(":")[2]
    subscriptions = json.loads(peer(bob, "status", "--json").stdout)["subscriptions"]

    stranger = browser.new_context()
    page = stranger.new_page()
    answer = page.goto(base + "/")
    assert answer is not None and answer.status == 401
    assert "needs the peer's access token" in page.content()
    assert page.goto(base + "/api/status").status == 401

    # DNS rebinding: a name the attacker controls resolves to 127.0.0.1
    answer = page.goto(f"http://{REBINDING}:{port}/?token={token}")
    assert answer is not None and answer.status == 403
    assert f"does not answer to the host name {REBINDING}:{port}" in page.content()
    stranger.close()

    # signed in, then a page of another origin posts to the app
    _EvilPage.target = base
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EvilPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        person = browser.new_context()
        page = person.new_page()
        page.goto(url)
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        with page.expect_navigation():
            page.click("#go")
        assert "cross-site request refused" in page.content()
        forged = person.request.post(
            base + "/api/subscribe",
            data=json.dumps({"query": "X : t(X, dc:title, T)"}),
            headers={"Origin": "http://evil.example", "Content-Type": "application/json"},
        )
        assert forged.status == 403
        assert "cross-site request refused" in forged.text()
        same = person.request.get(base + "/api/status")
        assert same.status == 200, "the cookie is good: only the origin was wrong"
        person.close()
    finally:
        server.shutdown()
        server.server_close()
    after = json.loads(peer(bob, "status", "--json").stdout)["subscriptions"]
    assert after == subscriptions, "nothing was subscribed"
