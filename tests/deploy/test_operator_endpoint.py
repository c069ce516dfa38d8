"""The operator's HTTP endpoint on a real cluster of 8 super-peer processes (one cluster for the
module): health and readiness, the endpoint's limits, ``/metrics`` scraped during a replay against
the trace log of the same run, and the status page in headless Chromium."""

import json
import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from deploy.cluster import Cluster
from deploy.driver import wait_quiet
from deploy.replay import Replay
from superpeer.sim.generate import generate

pytestmark = [pytest.mark.process, pytest.mark.slow]

TIMING = {"sp.heartbeat", "link.clock"}
"""Kinds whose counts depend on timing (sent whenever a link is idle; a clock sample every
``clock_sample_seconds``), compared as bounds: one may fall between a scrape and the trace it
is compared with."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(8, directory=tmp_path_factory.mktemp("ops"), http=True, trace=True) as nodes:
        yield nodes


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_every_super_peer_is_alive_ready_and_bound_to_loopback(cluster):
    assert len(cluster.http_addresses) == 8
    for address in cluster.http_addresses:
        assert address.startswith("http://127.0.0.1:")
        assert get(address + "/healthz") == (200, b"ok\n")
        status, body = get(address + "/readyz")
        assert (status, body) == (200, b"member, 3 neighbours connected\n")
        status, page = get(address + "/")
        assert status == 200
        assert b'<svg id="cube"' in page
        assert b"http://" not in page.replace(b"http://www.w3.org/2000/svg", b"")  # offline
    assert get(cluster.http_addresses[0] + "/nowhere")[0] == 404


def test_the_endpoint_refuses_other_methods_and_oversized_requests(cluster):
    address = cluster.http_addresses[0]
    request = urllib.request.Request(address + "/metrics", method="POST", data=b"x")
    assert get_request(request)[0] == 405
    host, port = address.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # a request head that goes on past max_header_bytes (16384) is refused before it ends
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 4"), answer[:100]


def get_request(request: urllib.request.Request) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


async def scrape(cluster: Cluster) -> tuple[float, float, list[dict]]:
    """Every super-peer's metrics, and the wall-clock times just before and just after."""
    before = time.time()
    scraped = []
    for address in cluster.http_addresses:
        status, body = await trio.to_thread.run_sync(get, address + "/metrics")
        assert status == 200
        scraped.append(samples(body.decode()))
    return before, time.time(), scraped


async def wait_flushed_past(directory: Path, moment: float) -> None:
    """Until the trace log holds a record written after ``moment``: files are written in order,
    so everything before it is on disk (heartbeats keep coming while the cube is idle)."""
    with trio.fail_after(30):
        while True:
            current = directory / "traces" / f"{directory.name}.jsonl"
            lines = current.read_text().splitlines()
            complete = [line for line in lines if line.endswith("}")]
            if complete and json.loads(complete[-1])["ts"] > moment:
                return
            await trio.sleep(0.05)


def samples(text: str) -> dict:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return values


def trace_counts(directory: Path, until: float) -> tuple[Counter, Counter]:
    """Messages per (direction, kind) and events, from a super-peer's trace files, up to ``until``."""
    messages, events = Counter(), Counter()
    for path in sorted((directory / "traces").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["ts"] > until:
                continue
            if record["event"] in ("send", "receive"):
                direction = "sent" if record["event"] == "send" else "received"
                messages[direction, record["kind"]] += 1
            else:
                events[record["event"]] += 1
    return messages, events


def scraped_messages(values: dict) -> Counter:
    return Counter(
        {
            (dict(labels)["direction"], dict(labels)["kind"]): int(value)
            for (name, labels), value in values.items()
            if name == "superpeer_messages_total"
        }
    )


async def test_metrics_scraped_during_a_replay_equal_the_trace_log(cluster, tmp_path):
    operations = list(
        generate(
            superpeers=8, peers=8, subscriptions=16, publications=16,
            churn=0.2, unsubscribe=0.1, seed=3,
        )
    )  # fmt: skip
    player = Replay(cluster, tmp_path / "peers")
    scrapes = []
    async with trio.open_nursery() as nursery:
        half = len(operations) // 2
        await player.run(operations[:half], nursery)
        scrapes.append(await scrape(cluster))
        await player.run(operations[half:], nursery)
        await wait_quiet(cluster, player.everyone)
        scrapes.append(await scrape(cluster))
        for peer in player.everyone:
            await peer.disconnect()
        nursery.cancel_scope.cancel()
    delivered_in_all = 0
    for before, after, scraped in scrapes:
        for k, values in enumerate(scraped):
            await wait_flushed_past(cluster.directories[k], after)
            exact, events = trace_counts(cluster.directories[k], after)
            at_least, _ = trace_counts(cluster.directories[k], before)
            counted = scraped_messages(values)
            assert {key: n for key, n in counted.items() if key[1] not in TIMING} == {
                key: n for key, n in exact.items() if key[1] not in TIMING
            }, f"sp{k}"
            for key in set(counted) | set(exact):
                if key[1] in TIMING:
                    assert at_least[key] <= counted[key] <= exact[key], (f"sp{k}", key)
            for name, event in (
                ("superpeer_notifications_delivered_total", "deliver"),
                ("superpeer_notifications_kept_total", "offline"),
                ("superpeer_notifications_flushed_total", "flush"),
                ("superpeer_publications_total", "publish"),
            ):
                assert values[name, ()] == events[event], (f"sp{k}", name)
            latency = values[
                "superpeer_notification_latency_seconds_count", (("delivery", "online"),)
            ]
            assert latency == events["deliver"]
        delivered_in_all = sum(v["superpeer_notifications_delivered_total", ()] for v in scraped)
    assert delivered_in_all > 0
    assert sum(v["superpeer_notifications_kept_total", ()] for v in scrapes[-1][2]) > 0


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = os.environ.get("STATUS_PAGE_SCREENSHOT")
"""Where to keep the screenshot (the README's is made with docs/status-page.png)."""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium package is not installed")
def test_the_status_page_draws_the_cube_in_headless_chromium(cluster, tmp_path):
    from playwright.sync_api import sync_playwright

    target = Path(SCREENSHOT) if SCREENSHOT else tmp_path / "status-page.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(cluster.http_addresses[0] + "/")
            page.wait_for_selector('#cube[data-vertices="8"]', timeout=20000)
            page.wait_for_function(
                "document.querySelectorAll('#cube g[data-state=up]').length === 3"
                " && document.querySelectorAll('#neighbours tr').length === 3"
                " && document.querySelector('#traffic td.n').textContent !== '–'",  # rates, 2nd read
                timeout=20000,
            )
            vertices = page.eval_on_selector_all("#cube g", "gs => gs.map(g => g.dataset.state)")
            title = page.title()
            page.screenshot(path=str(target), full_page=True)
        finally:
            browser.close()
    assert sorted(vertices) == ["other"] * 4 + ["self"] + ["up"] * 3
    assert title == "super-peer sp0"
    assert target.read_bytes().startswith(b"\x89PNG")
