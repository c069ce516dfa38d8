"""Every ``peer`` command answers in sentences by default and in JSON with ``--json`` (a failure
too: ``{"error", "message"}`` on stdout, its line on stderr). In one process, against the fake
access point, as ``test_daemon.py``."""

from __future__ import annotations

import json

from tests.peer.test_daemon import ARTICLE, records, start

QUERY = 'X : t(X, dc:title, T), T contains "RDF"'


def is_json(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


async def test_every_command_answers_in_sentences_or_in_json(
    tmp_path, access_point, nursery, run_cli
):
    alice = await start(nursery, tmp_path, "alice", access_point.port)
    await start(nursery, tmp_path, "bob", access_point.port)
    await access_point.wait_until(lambda: {"alice", "bob"} <= set(access_point.peers))
    a = ("--data-dir", str(tmp_path / "alice"))
    b = ("--data-dir", str(tmp_path / "bob"))
    ad = tmp_path / "ad.json"
    ad.write_text('{"schemas": ["dc"]}')
    schema = tmp_path / "schema.ttl"
    schema.write_text(
        "@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .\n"
        "<http://purl.org/dc/elements/1.1/article> rdfs:subClassOf <http://e/Document> .\n"
    )
    document = tmp_path / "article.ttl"
    document.write_text(ARTICLE)
    keys = tmp_path / "keys"
    commands = [
        (("keygen", "--bits", "2048", "--data-dir", str(keys)), "public_id"),
        (("advertise", str(ad), *b), "advertisement"),
        (("publish-schema", str(schema), *b), "axioms"),
        (("subscribe", QUERY, "--id", "s1", *a), "query"),
        (("publish", str(document), "--id", "n1", *b), "results"),
        (("status", *a), "peer_id"),
        (("locate", "bob", *a), "online"),
        (("ui", "--no-browser", *a), "url"),
    ]
    for argv, key in commands:
        code, out, err = await run_cli(*argv)
        assert (code, err) == (0, ""), argv
        assert not is_json(out), argv
        again = (
            ("keygen", "--bits", "2048", "--data-dir", str(keys) + "2")
            if key == "public_id"
            else argv
        )
        code, out, err = await run_cli(*again, "--json")
        assert (code, err) == (0, ""), again
        assert key in json.loads(out), again
    for argv, answer in (
        (("retract", "n1", *b), "retracted n1\n"),
        (("unsubscribe", "s1", *a), "unsubscribed s1\n"),
    ):
        assert await run_cli(*argv) == (0, answer, "")
    assert (await run_cli("subscribe", QUERY, "--id", "s2", *a))[0] == 0
    code, out, _ = await run_cli("unsubscribe", "s2", "--json", *a)
    assert (code, json.loads(out)) == (0, {"id": "s2"})
    await records(alice, 1)
    code, out, _ = await run_cli("inbox", "--json", *a)
    assert [json.loads(line)["publication"] for line in out.splitlines()] == ["n1"]
    code, out, _ = await run_cli("inbox", *a)
    assert "  n1  <http://example.org/a>  from bob at " in out
    code, out, err = await run_cli("fetch", "n1", "--json", *a)
    assert code == 2
    assert json.loads(out) == {"error": "invalid", "message": "publication 'n1' offers no file"}
    assert err == "peer: publication 'n1' offers no file\n"
    code, out, _ = await run_cli("subscribe", "--json", *a)
    assert (code, json.loads(out)["error"]) == (2, "invalid")
    code, out, _ = await run_cli("ui", "--no-browser", "--json", *a)
    url = json.loads(out)["url"]
    assert url == (tmp_path / "alice" / "ui.url").read_text().strip()
    assert url.startswith("http://127.0.0.1:")
    code, out, _ = await run_cli("stop", "--json", *a)
    assert (code, json.loads(out)["stopped"]) == (0, True)
    code, out, _ = await run_cli("leave", "--json", *b)
    assert (code, json.loads(out)) == (0, {"peer_id": "bob", "left": True})


async def test_a_publication_held_alone_is_said_so_and_counted_in_the_status(
    tmp_path, access_point, nursery, run_cli
):
    """``peer.kept``: the access point acknowledged it with its own copy alone."""
    await start(nursery, tmp_path, "bob", access_point.port)
    await access_point.wait_until(lambda: "bob" in access_point.peers)
    b = ("--data-dir", str(tmp_path / "bob"))
    ad = tmp_path / "ad.json"
    ad.write_text('{"schemas": ["dc"]}')
    document = tmp_path / "article.ttl"
    document.write_text(ARTICLE)
    assert (await run_cli("advertise", str(ad), *b))[0] == 0
    access_point.alone = True
    code, out, _ = await run_cli("publish", str(document), "--id", "n1", *b)
    assert code == 0 and "published n1" in out and "held by its access point alone" in out
    code, out, _ = await run_cli("status", *b)
    assert "held by one super-peer alone: 1 publication, sent again until copied" in out
    code, out, _ = await run_cli("status", "--json", *b)
    assert json.loads(out)["kept"] == {"publications": 1, "forgotten": 0}
    assert len(list((tmp_path / "bob" / "kept").glob("*.json"))) == 1
