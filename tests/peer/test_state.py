"""The peer's durable state: name chosen once, every change on disk when the call returns,
damaged files reported clearly."""

import json
import stat

import pytest

import qel
from peer.session import plan_resend
from peer.state import (
    MAX_WITHDRAWALS,
    WITHDRAWALS_KEPT_SECONDS,
    PeerState,
    StateError,
    StateStore,
    parse_state,
    subscription_id,
)
from tests.peer.helpers import DC_ADVERTISEMENT, TITLE_QUERY
from wire import messages as m


def test_the_name_is_generated_once_and_kept(tmp_path):
    store = StateStore.open(tmp_path, name=None, token_hex=lambda n: "1a2b3c4d")
    assert store.current == PeerState("peer-1a2b3c4d")
    again = StateStore.open(tmp_path, name=None, token_hex=lambda n: "ffffffff")
    assert again.current.name == "peer-1a2b3c4d"
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600


def test_a_name_given_is_kept_and_another_name_is_refused(tmp_path):
    assert StateStore.open(tmp_path, name="alice").current.name == "alice"
    assert StateStore.open(tmp_path, name=None).current.name == "alice"
    with pytest.raises(StateError, match="belongs to peer 'alice', not 'bob'"):
        StateStore.open(tmp_path, name="bob")


def test_every_change_is_on_disk_when_the_call_returns(tmp_path):
    store = StateStore.open(tmp_path, name="alice")
    store.set_advertisement(DC_ADVERTISEMENT)
    store.add_subscription("s1", TITLE_QUERY)
    store.add_subscription("s2", "X : t(X, dc:creator, C)")
    store.mark_in_doubt("s3")
    store.mark_in_doubt("s2")
    store.add_subscription("s2", "X : t(X, dc:creator, C)")  # acknowledged after all
    store.remove_subscription("s1")
    reopened = StateStore.open(tmp_path, name=None).current
    assert reopened == PeerState(
        "alice", DC_ADVERTISEMENT, {"s2": "X : t(X, dc:creator, C)"}, frozenset({"s3"})
    )
    store.resolve_in_doubt("s3")
    store.resolve_in_doubt("never")
    assert StateStore.open(tmp_path, name=None).current.in_doubt == frozenset()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"], "no temporary files left"


def test_leaving_keeps_only_the_name(tmp_path):
    store = StateStore.open(tmp_path, name="alice")
    store.set_advertisement(DC_ADVERTISEMENT)
    store.add_subscription("s1", TITLE_QUERY)
    store.clear_network_state()
    assert StateStore.open(tmp_path, name=None).current == PeerState("alice")


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"format": 2, "peer_id": "a", "advertisement": null, "subscriptions": {}, "in_doubt": []}',
        b'{"format": 1, "peer_id": "", "advertisement": null, "subscriptions": {}, "in_doubt": []}',
        b'{"format": 1, "peer_id": "a", "advertisement": null, "subscriptions": [], "in_doubt": []}',
    ],
)
def test_a_damaged_state_file_is_reported_with_what_to_do(tmp_path, content):
    (tmp_path / "state.json").write_bytes(content)
    with pytest.raises(StateError, match=r"is damaged .*move it away"):
        StateStore.open(tmp_path, name=None)


def test_a_state_file_of_the_plaintext_era_opens_unchanged(tmp_path):
    """Before TLS the file's ``peer_id`` was the peer's network id; it is now read as the name
    (the network id with --no-tls), and written back under the same key and format."""
    (tmp_path / "state.json").write_text(
        '{"format": 1, "peer_id": "alice", "advertisement": null,'
        ' "subscriptions": {"s1": "X : t(X, dc:title, T)"}, "in_doubt": []}'
    )
    store = StateStore.open(tmp_path, name="alice")
    assert store.current == PeerState("alice", None, {"s1": "X : t(X, dc:title, T)"})
    store.mark_in_doubt("s2")
    document = json.loads((tmp_path / "state.json").read_text())
    assert (document["format"], document["peer_id"]) == (1, "alice")


def test_the_file_keeps_texts_as_given(tmp_path):
    store = StateStore.open(tmp_path, name="alice")
    store.add_subscription("s1", "  X:t(X,dc:title,T)  ")
    document = json.loads((tmp_path / "state.json").read_text())
    assert document["subscriptions"] == {"s1": "  X:t(X,dc:title,T)  "}


def test_default_subscription_ids_are_stable_hashes_of_the_canonical_query():
    compact = qel.parse_subscription('X :t(X,dc:title,T),T contains "RDF"')
    spaced = qel.parse_subscription(TITLE_QUERY)
    other = qel.parse_subscription('X : t(X, dc:title, T), T contains "P2P"')
    assert subscription_id(compact) == subscription_id(spaced)
    assert subscription_id(compact) != subscription_id(other)
    assert subscription_id(compact).startswith("q-")
    assert len(subscription_id(compact)) == 12


def test_parsing_the_state_reports_texts_that_no_longer_parse():
    state = PeerState(
        "alice", DC_ADVERTISEMENT, {"good": TITLE_QUERY, "bad": "SELECT ?x WHERE { ?x ?p ?o }"}
    )
    parsed = parse_state(state)
    assert parsed.advertisement == qel.parse_advertisement(DC_ADVERTISEMENT)
    assert list(parsed.subscriptions) == ["good"]
    [problem] = parsed.problems
    assert problem.startswith("the stored subscription 'bad' no longer parses")
    assert parse_state(PeerState("alice")).advertisement == qel.parse_advertisement({})


def test_a_write_cut_short_by_a_crash_leaves_nothing_behind_at_the_next_start(tmp_path):
    StateStore.open(tmp_path, name="alice")
    leftover = tmp_path / ".state.json.0badc0de.tmp"
    leftover.write_bytes(b'{"half": ')
    store = StateStore.open(tmp_path, name="alice")
    assert not leftover.exists()
    assert store.current.name == "alice"


SCHEMA = (
    "<http://purl.org/dc/elements/1.1/article> "
    "<http://www.w3.org/2000/01/rdf-schema#subClassOf> <http://example.org/Document> .\n"
)
OTHER_SCHEMA = (
    "<http://example.org/author> "
    "<http://www.w3.org/2000/01/rdf-schema#subPropertyOf> <http://purl.org/dc/elements/1.1/creator> .\n"
)


def test_schemas_are_kept_as_given_and_parsed_into_their_union(tmp_path):
    store = StateStore.open(tmp_path, name="alice")
    store.add_schema(SCHEMA, "nt")
    store.add_schema(OTHER_SCHEMA, "nt")
    store.add_schema(SCHEMA, "nt")  # published again: kept once
    reopened = StateStore.open(tmp_path, name=None).current
    assert reopened.schemas == ((SCHEMA, "nt"), (OTHER_SCHEMA, "nt"))
    parsed = parse_state(reopened)
    assert parsed.axioms == qel.parse_schema(SCHEMA, "nt") | qel.parse_schema(OTHER_SCHEMA, "nt")
    damaged = parse_state(PeerState("alice", schemas=(("<broken", "nt"),)))
    assert damaged.axioms == frozenset()
    assert damaged.problems[0].startswith("the stored schema 1 no longer parses")
    store.clear_network_state()
    assert StateStore.open(tmp_path, name=None).current.schemas == ()


def test_on_change_is_kept_per_subscription_and_goes_with_it(tmp_path):
    store = StateStore.open(tmp_path, name="alice")
    store.add_subscription("s1", TITLE_QUERY, on_change=True)
    store.add_subscription("s2", TITLE_QUERY)
    assert StateStore.open(tmp_path, name=None).current.on_change == frozenset({"s1"})
    store.add_subscription("s1", TITLE_QUERY)  # subscribed again without it
    assert store.current.on_change == frozenset()
    store.add_subscription("s2", TITLE_QUERY, on_change=True)
    store.remove_subscription("s2")
    assert StateStore.open(tmp_path, name=None).current.on_change == frozenset()


def test_a_withdrawal_is_kept_with_its_window_and_told_again_after_a_connection(tmp_path):
    """Found by the skewed chaos plan (issue 39): a peer withdrew a subscription at an access
    point that failed before catching up what it was owed; at the next access point nobody
    knew the subscription had been active. The peer keeps its withdrawals a while, with the
    window its access points gave (``Ack.active_since``, ``Ack.withdrawn_at``), and tells them
    again after each connection, except for an id subscribed again."""
    store = StateStore.open(tmp_path, name="p")
    store.add_subscription("s1", TITLE_QUERY, active_since=100.0)
    store.add_subscription("s2", TITLE_QUERY, active_since=105.0)
    store.remove_subscription("s1", withdrawn_at=150.0, now=1000.0)
    store.remove_subscription("s2", withdrawn_at=0.0, now=1000.0)  # no window said: not kept
    again = StateStore.open(tmp_path, name="p").current
    assert set(again.withdrawn) == {"s1"}
    kept = again.withdrawn["s1"]
    assert (kept.query, kept.active_since, kept.withdrawn_at) == (TITLE_QUERY, 100.0, 150.0)
    parsed = parse_state(again)
    plan = plan_resend(parsed.advertisement, parsed.subscriptions, [], withdrawn=parsed.withdrawn)
    [told] = [r for r in plan if isinstance(r, m.Unsubscribe)]
    assert (told.id, told.active_since, told.withdrawn_at) == ("s1", 100.0, 150.0)
    assert told.subscription == qel.parse_subscription(TITLE_QUERY)
    store.add_subscription("s1", TITLE_QUERY, active_since=200.0)  # the same id, again
    parsed = parse_state(store.current)
    plan = plan_resend(parsed.advertisement, parsed.subscriptions, [], withdrawn=parsed.withdrawn)
    assert not [r for r in plan if isinstance(r, m.Unsubscribe)]


def test_withdrawals_are_kept_for_an_hour_and_at_most_a_bounded_number(tmp_path):
    store = StateStore.open(tmp_path, name="p")
    for k in range(MAX_WITHDRAWALS + 5):
        store.add_subscription(f"s{k}", TITLE_QUERY, active_since=1.0)
        store.remove_subscription(f"s{k}", withdrawn_at=2.0, now=float(k))
    kept = store.current.withdrawn
    assert len(kept) == MAX_WITHDRAWALS and "s0" not in kept and f"s{MAX_WITHDRAWALS + 4}" in kept
    store.add_subscription("late", TITLE_QUERY, active_since=1.0)
    store.remove_subscription("late", withdrawn_at=2.0, now=WITHDRAWALS_KEPT_SECONDS + 10.0)
    assert set(store.current.withdrawn) == {"late"} | {
        f"s{k}" for k in range(11, MAX_WITHDRAWALS + 5)
    }
