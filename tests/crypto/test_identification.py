"""The identification state machines, without sockets: happy paths and every attack."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

import wire
from crypto import (
    MESSAGE_TYPES,
    REJECTION_CODES,
    Accepted,
    AuthFailure,
    Challenge,
    Confirm,
    Identified,
    IdentifierIssued,
    Identify,
    LocalProtocolError,
    MemoryRegistry,
    PeerAuthenticated,
    PeerRecord,
    PrivateIdentifier,
    Prover,
    ProverState,
    Refused,
    Register,
    Registered,
    Rejected,
    RemoteProtocolError,
    Send,
    Verifier,
    VerifierState,
    fingerprint,
    hash_private_identifier,
    public_identifier,
    public_key_der,
    sign_transcript,
    transcript,
    verify_transcript,
)
from crypto.keys import generate_private_key

HOME = "10.0.0.1:4000"
AWAY = "192.0.2.7:5555"


@pytest.fixture(scope="module")
def server_key():
    return generate_private_key(2048)


@pytest.fixture(scope="module")
def rogue_server_key():
    return generate_private_key(2048)


@pytest.fixture
def registry():
    return MemoryRegistry()


class Network:
    """One access point (``sp-a``) and its registry; ``connect`` opens a connection."""

    def __init__(self, server_key, registry, seed=0):
        self.fingerprint = fingerprint(server_key)
        self.registry = registry
        self.random = random.Random(seed)

    def verifier(self, address=HOME, **options):
        options.setdefault("random", self.random.randbytes)
        return Verifier(
            node_id="sp-a",
            fingerprint=self.fingerprint,
            registry=self.registry,
            address=address,
            **options,
        )

    def prover(self, key, private_identifier=None, **options):
        """A peer that reached ``sp-a`` through a CA-verified TLS channel."""
        options.setdefault("verifier_fingerprint", self.fingerprint)
        options.setdefault("verifier_node_id", "sp-a")
        if private_identifier is not None:
            options.setdefault("issued_by", "sp-a")
        return Prover(key, private_identifier=private_identifier, **options)


@pytest.fixture
def network(server_key, registry):
    return Network(server_key, registry)


def sent(outputs):
    """The message of the one ``Send`` among ``outputs``."""
    [message] = [o.message for o in outputs if isinstance(o, Send)]
    return message


def events(outputs):
    return [o for o in outputs if not isinstance(o, Send)]


def register(network, key, address=HOME, now=0.0):
    """A complete registration; returns the private identifier and both sides' final outputs."""
    verifier, prover = network.verifier(address), network.prover(key)
    answer = sent(prover.receive(verifier.challenge(now)))
    [issued] = prover.receive(sent(verifier.receive(answer, now + 0.1)))
    assert isinstance(issued, IdentifierIssued)
    final = verifier.receive(prover.confirm(), now + 0.2)
    [identified] = prover.receive(sent(final))
    return issued.private_identifier, events(final), identified


def reject(outputs, code):
    """Asserts the outputs are a rejection with ``code``; returns the ``AuthFailure``."""
    rejected, failure = outputs
    assert isinstance(rejected, Send)
    assert isinstance(rejected.message, Rejected)
    assert rejected.message.code == code
    assert isinstance(failure, AuthFailure)
    assert failure.code == code
    assert failure.reason == rejected.message.reason
    return failure


# -- happy paths ----------------------------------------------------------------------------------


def test_registration_issues_a_private_identifier_and_stores_only_its_hash(
    network, registry, peer_key
):
    private_identifier, [authenticated], identified = register(network, peer_key)
    public_id = public_identifier(peer_key)
    assert isinstance(authenticated, PeerAuthenticated)
    assert authenticated.registered
    assert authenticated.previous_address is None
    assert authenticated.record == PeerRecord(
        public_id=public_id,
        public_key=public_key_der(peer_key),
        private_id_hash=hash_private_identifier(private_identifier, public_id),
        address=HOME,
    )
    assert registry.get(public_id) == authenticated.record
    assert identified == Identified(public_id=public_id, verifier_id="sp-a", registered=True)


def test_a_registered_peer_identifies_from_a_new_address(network, registry, peer_key):
    private_identifier, _, _ = register(network, peer_key, address=HOME)
    verifier = network.verifier(address=AWAY)
    prover = network.prover(peer_key, private_identifier)
    answer = sent(prover.receive(verifier.challenge(100.0)))
    assert isinstance(answer, Identify)
    outputs = verifier.receive(answer, 100.5)
    assert sent(outputs) == Accepted(public_id=prover.public_id)
    [authenticated] = events(outputs)
    assert authenticated.registered is False
    assert authenticated.previous_address == HOME
    assert authenticated.record.address == AWAY
    assert registry.get(prover.public_id).address == AWAY
    assert prover.receive(sent(outputs)) == [
        Identified(public_id=prover.public_id, verifier_id="sp-a", registered=False)
    ]
    assert verifier.state is VerifierState.ACCEPTED
    assert prover.state is ProverState.DONE


def test_identifying_from_the_same_address_changes_nothing(network, registry, peer_key):
    private_identifier, [first], _ = register(network, peer_key)
    verifier = network.verifier()
    prover = network.prover(peer_key, private_identifier)
    outputs = verifier.receive(sent(prover.receive(verifier.challenge(0.0))), 0.0)
    [authenticated] = events(outputs)
    assert authenticated.record == first.record
    assert authenticated.previous_address == HOME


def test_the_challenge_comes_from_the_injected_random_source(server_key, registry):
    nonces = [Network(server_key, registry, seed=7).verifier().challenge(0.0).nonce for _ in "ab"]
    assert nonces[0] == nonces[1] == random.Random(7).randbytes(32)
    challenge = Network(server_key, registry).verifier().challenge(0.0)
    assert challenge.verifier_id == "sp-a"
    assert challenge.verifier_fingerprint == fingerprint(server_key)


# -- attacks: identity theft ----------------------------------------------------------------------


def test_presenting_another_peers_identifier_without_its_key_fails(
    network, peer_key, other_peer_key
):
    """Even with the victim's private identifier (stolen), the signature needs the victim's key."""
    stolen, _, _ = register(network, peer_key)
    victim = public_identifier(peer_key)
    verifier = network.verifier(address=AWAY)
    challenge = verifier.challenge(0.0)
    attacker = network.prover(other_peer_key, stolen)
    forged = replace(sent(attacker.receive(challenge)), public_id=victim)
    failure = reject(verifier.receive(forged, 0.1), "bad_signature")
    assert failure.public_id == victim
    assert failure.address == AWAY
    assert network.registry.get(victim).address == HOME


def test_registering_under_another_peers_identifier_fails(network, peer_key, other_peer_key):
    victim = public_identifier(peer_key)
    verifier = network.verifier()
    answer = sent(network.prover(other_peer_key).receive(verifier.challenge(0.0)))
    reject(verifier.receive(replace(answer, public_id=victim), 0.1), "identifier_mismatch")
    verifier = network.verifier()
    answer = sent(network.prover(other_peer_key).receive(verifier.challenge(0.0)))
    forged = replace(answer, public_id=victim, public_key=public_key_der(peer_key))
    reject(verifier.receive(forged, 0.1), "bad_signature")


def test_a_wrong_private_identifier_fails(network, peer_key):
    register(network, peer_key)
    verifier = network.verifier()
    prover = network.prover(peer_key, PrivateIdentifier.generate())
    reject(
        verifier.receive(sent(prover.receive(verifier.challenge(0.0))), 0.1),
        "bad_private_identifier",
    )


def test_a_register_for_a_known_identifier_is_rejected(network, registry, peer_key):
    """Key possession alone must not reset the private identifier (see the module docstring)."""
    _, [first], _ = register(network, peer_key)
    verifier = network.verifier(address=AWAY)
    answer = sent(network.prover(peer_key).receive(verifier.challenge(0.0)))
    failure = reject(verifier.receive(answer, 0.1), "already_registered")
    assert "identify with its private identifier" in failure.reason
    assert registry.get(first.record.public_id) == first.record


def test_an_unconfirmed_registration_stores_nothing_and_can_be_repeated(
    network, registry, peer_key
):
    verifier, prover = network.verifier(), network.prover(peer_key)
    [issued] = prover.receive(
        sent(verifier.receive(sent(prover.receive(verifier.challenge(0))), 0))
    )
    # The connection breaks before auth.confirm: the access point has stored nothing.
    assert len(registry) == 0
    verifier = network.verifier()
    again = network.prover(peer_key, issued.private_identifier)
    reject(verifier.receive(sent(again.receive(verifier.challenge(1))), 1), "unknown_identifier")
    register(network, peer_key)
    assert len(registry) == 1


def test_of_two_concurrent_registrations_only_the_first_confirmed_wins(network, registry, peer_key):
    sessions = []
    for _ in range(2):
        verifier, prover = network.verifier(), network.prover(peer_key)
        prover.receive(sent(verifier.receive(sent(prover.receive(verifier.challenge(0))), 0)))
        sessions.append((verifier, prover))
    (first_verifier, first_prover), (second_verifier, second_prover) = sessions
    assert isinstance(sent(first_verifier.receive(first_prover.confirm(), 1)), Accepted)
    reject(second_verifier.receive(second_prover.confirm(), 1), "already_registered")


# -- attacks: replay and relay --------------------------------------------------------------------


def test_a_response_captured_on_another_connection_fails(network, peer_key):
    private_identifier, _, _ = register(network, peer_key)
    first = network.verifier()
    captured = sent(network.prover(peer_key, private_identifier).receive(first.challenge(0)))
    first.receive(captured, 0.1)
    replayed_on = network.verifier(address=AWAY)
    replayed_on.challenge(5.0)
    reject(replayed_on.receive(captured, 5.1), "bad_signature")


def test_a_captured_registration_fails_on_another_connection(network, peer_key):
    first = network.verifier()
    captured = sent(network.prover(peer_key).receive(first.challenge(0)))
    second = network.verifier(address=AWAY)
    second.challenge(0)
    reject(second.receive(captured, 0.1), "bad_signature")


def test_a_challenge_answers_once(network, peer_key):
    private_identifier, _, _ = register(network, peer_key)
    verifier = network.verifier()
    prover = network.prover(peer_key, private_identifier)
    response = sent(prover.receive(verifier.challenge(0)))
    assert isinstance(sent(verifier.receive(response, 0.1)), Accepted)
    with pytest.raises(LocalProtocolError, match="over"):
        verifier.receive(response, 0.2)
    with pytest.raises(LocalProtocolError, match="one challenge"):
        verifier.challenge(0.3)


def test_a_rejected_connection_cannot_retry(network, peer_key):
    private_identifier, _, _ = register(network, peer_key)
    verifier = network.verifier()
    challenge = verifier.challenge(0)
    good = sent(network.prover(peer_key, private_identifier).receive(challenge))
    reject(verifier.receive(replace(good, private_id=b"\x00" * 32), 0.1), "bad_private_identifier")
    with pytest.raises(LocalProtocolError, match="rejected"):
        verifier.receive(good, 0.2)


def test_a_signature_for_another_verifier_id_fails(network, peer_key):
    """The challenge's verifier id is altered on the way: the prover signs for the wrong node."""
    private_identifier, _, _ = register(network, peer_key)
    verifier = network.verifier()
    challenge = replace(verifier.challenge(0), verifier_id="sp-x")
    prover = network.prover(peer_key, private_identifier, verifier_node_id=None, issued_by="sp-x")
    reject(verifier.receive(sent(prover.receive(challenge)), 0.1), "bad_signature")


def test_a_signature_for_another_channel_binding_fails(network, peer_key):
    private_identifier, _, _ = register(network, peer_key)
    verifier = network.verifier(channel_binding=b"session-1")
    prover = network.prover(peer_key, private_identifier, channel_binding=b"session-2")
    reject(verifier.receive(sent(prover.receive(verifier.challenge(0))), 0.1), "bad_signature")
    verifier = network.verifier(channel_binding=b"session-1")
    prover = network.prover(peer_key, private_identifier, channel_binding=b"session-1")
    assert isinstance(
        sent(verifier.receive(sent(prover.receive(verifier.challenge(0))), 0)), Accepted
    )


def test_a_relayed_challenge_is_refused_by_the_peer(network, peer_key, rogue_server_key):
    """A rogue super-peer (the peer's TLS channel ends at its key) forwards the honest access
    point's challenge: the peer refuses it, and rewriting the fingerprint breaks the signature."""
    private_identifier, _, _ = register(network, peer_key)
    honest = network.verifier()
    challenge = honest.challenge(0)
    rogue = fingerprint(rogue_server_key)
    victim = network.prover(peer_key, private_identifier, verifier_fingerprint=rogue)
    with pytest.raises(RemoteProtocolError, match="server key other than the one the TLS"):
        victim.receive(challenge)
    assert victim.state is ProverState.FAILED
    victim = network.prover(peer_key, private_identifier, verifier_fingerprint=rogue)
    signed = sent(victim.receive(replace(challenge, verifier_fingerprint=rogue)))
    reject(honest.receive(signed, 0.1), "bad_signature")


def test_the_private_identifier_goes_only_to_the_access_point_that_issued_it(network, peer_key):
    private_identifier, _, _ = register(network, peer_key)
    # Another super-peer (its own valid certificate says sp-b) tells the truth about its id...
    honest_other = replace(network.verifier().challenge(0), verifier_id="sp-b")
    prover = network.prover(peer_key, private_identifier, verifier_node_id="sp-b")
    with pytest.raises(RemoteProtocolError, match="other than the access point that issued"):
        prover.receive(honest_other)
    # ... or claims to be our access point: its certificate contradicts it.
    lying = replace(network.verifier().challenge(0), verifier_id="sp-a")
    prover = network.prover(peer_key, private_identifier, verifier_node_id="sp-b")
    with pytest.raises(RemoteProtocolError, match="other than the one in the server's certificate"):
        prover.receive(lying)
    with pytest.raises(LocalProtocolError, match="issued_by"):
        Prover(
            peer_key,
            verifier_fingerprint=network.fingerprint,
            verifier_node_id="sp-a",
            private_identifier=private_identifier,
        )


def test_a_pinned_server_states_its_own_node_id(network, peer_key):
    """With a pinned key there is no certificate node id: the pin authenticates the server."""
    private_identifier, _, _ = register(network, peer_key)
    verifier = network.verifier()
    prover = network.prover(peer_key, private_identifier, verifier_node_id=None)
    assert isinstance(
        sent(verifier.receive(sent(prover.receive(verifier.challenge(0))), 0)), Accepted
    )


def test_the_prover_signs_a_domain_separated_transcript_not_the_nonce(network, peer_key):
    """A verifier cannot use a peer to sign chosen data: the signature is over the transcript."""
    verifier = network.verifier()
    challenge = verifier.challenge(0)
    answer = sent(network.prover(peer_key).receive(challenge))
    public = peer_key.public_key()
    assert not verify_transcript(public, answer.signature, challenge.nonce)
    expected = transcript(
        purpose="register",
        nonce=challenge.nonce,
        verifier_id="sp-a",
        verifier_fingerprint=network.fingerprint,
        public_id=answer.public_id,
        channel_binding=b"",
    )
    assert verify_transcript(public, answer.signature, expected)
    as_identify = expected.replace(b"\x08register", b"\x08identify")
    assert not verify_transcript(public, answer.signature, as_identify)


# -- the transcript -------------------------------------------------------------------------------


def test_the_transcript_format_is_length_prefixed_fields():
    data = transcript(
        purpose="identify",
        nonce=b"N" * 32,
        verifier_id="sp-é",
        verifier_fingerprint="pk1-f",
        public_id="pk1-p",
        channel_binding=b"",
    )
    assert data == (
        b"\x00\x00\x00\x26semantic-pubsub peer identification v1"
        b"\x00\x00\x00\x08identify"
        b"\x00\x00\x00\x20" + b"N" * 32 + b"\x00\x00\x00\x05sp-\xc3\xa9"
        b"\x00\x00\x00\x05pk1-f"
        b"\x00\x00\x00\x05pk1-p"
        b"\x00\x00\x00\x00"
    )
    with pytest.raises(ValueError, match="purpose"):
        transcript(
            purpose="decrypt",
            nonce=b"",
            verifier_id="",
            verifier_fingerprint="",
            public_id="",
            channel_binding=b"",
        )


@given(st.text(max_size=8), st.text(max_size=8), st.text(max_size=8), st.text(max_size=8))
def test_distinct_fields_give_distinct_transcripts(a, b, c, d):
    def make(verifier_id, binding):
        return transcript(
            purpose="register",
            nonce=b"n" * 32,
            verifier_id=verifier_id,
            verifier_fingerprint="pk1-x",
            public_id="pk1-y",
            channel_binding=binding.encode(),
        )

    assert (make(a, b) == make(c, d)) == ((a, b) == (c, d))


def test_signatures_are_rsa_pss_with_maximum_salt(peer_key):
    first, second = sign_transcript(peer_key, b"data"), sign_transcript(peer_key, b"data")
    assert first != second  # randomised: PSS salt
    assert len(first) == 256
    assert verify_transcript(peer_key.public_key(), first, b"data")
    assert not verify_transcript(peer_key.public_key(), first, b"Data")


# -- malformed and out-of-order messages ----------------------------------------------------------


def challenged(network):
    verifier = network.verifier()
    return verifier, verifier.challenge(0.0)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"public_id": 42}, "malformed"),
        ({"public_id": "pk1-short"}, "malformed"),
        ({"public_id": "x" * 100_000}, "malformed"),
        ({"public_key": "not bytes"}, "malformed"),
        ({"public_key": b""}, "malformed"),
        ({"public_key": b"\x00" * 5000}, "malformed"),
        ({"public_key": b"\x30\x03\x02\x01\x00"}, "key_refused"),
        ({"signature": None}, "malformed"),
        ({"signature": b""}, "malformed"),
        ({"signature": b"\x01" * 2049}, "malformed"),
        ({"signature": b"\x01" * 256}, "bad_signature"),
        ({"signature": b"\x01" * 17}, "bad_signature"),
    ],
)
def test_a_malformed_register_is_rejected_not_raised(network, peer_key, change, code):
    verifier, challenge = challenged(network)
    answer = sent(network.prover(peer_key).receive(challenge))
    reject(verifier.receive(replace(answer, **change), 0.1), code)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"public_id": None}, "malformed"),
        ({"public_id": "pk1-" + "a" * 51 + "b"}, "malformed"),
        ({"private_id": b"\x00" * 31}, "malformed"),
        ({"private_id": b"\x00" * 33}, "malformed"),
        ({"private_id": "a" * 32}, "malformed"),
        ({"signature": 5}, "malformed"),
        ({"signature": b"\x00"}, "bad_signature"),
    ],
)
def test_a_malformed_identify_is_rejected_not_raised(network, peer_key, change, code):
    private_identifier, _, _ = register(network, peer_key)
    verifier, challenge = challenged(network)
    answer = sent(network.prover(peer_key, private_identifier).receive(challenge))
    reject(verifier.receive(replace(answer, **change), 0.1), code)


def test_keys_the_policy_refuses_are_rejected(network):
    for key in (
        rsa.generate_private_key(public_exponent=65537, key_size=1024),
        ec.generate_private_key(ec.SECP256R1()),
    ):
        der = key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        verifier, _ = challenged(network)
        message = Register(
            public_id=public_identifier(der), public_key=der, signature=b"\x01" * 128
        )
        reject(verifier.receive(message, 0.1), "key_refused")


@pytest.mark.parametrize(
    "message",
    [
        None,
        b"auth.register",
        {"public_id": "x"},
        Accepted(public_id="pk1-x"),
        Confirm(public_id="pk1-x"),
        Challenge(nonce=b"\x00" * 32, verifier_id="sp-a", verifier_fingerprint="pk1-x"),
        wire.messages.Subscribe(id="s1", subscription=None),  # type: ignore[arg-type]
    ],
)
def test_anything_else_after_the_challenge_is_unexpected(network, message):
    verifier, _ = challenged(network)
    failure = reject(verifier.receive(message, 0.1), "unexpected")
    assert failure.reason.startswith("expected auth.register or auth.identify, got ")


def test_while_awaiting_the_confirmation_only_confirm_is_expected(network, peer_key):
    verifier, challenge = challenged(network)
    prover = network.prover(peer_key)
    answer = sent(prover.receive(challenge))
    verifier.receive(answer, 0.1)
    failure = reject(verifier.receive(answer, 0.2), "unexpected")
    assert failure.public_id == prover.public_id
    verifier, challenge = challenged(network)
    prover = network.prover(peer_key)
    verifier.receive(sent(prover.receive(challenge)), 0.1)
    reject(verifier.receive(Confirm(public_id="pk1-other"), 0.2), "malformed")


@given(
    public_id=st.one_of(st.text(max_size=70), st.integers(), st.none(), st.binary(max_size=8)),
    blob=st.one_of(st.binary(max_size=600), st.text(max_size=8), st.none(), st.integers()),
    signature=st.one_of(st.binary(max_size=600), st.none(), st.text(max_size=4)),
    identify=st.booleans(),
)
def test_random_responses_never_raise_and_never_succeed(
    server_key, peer_key, public_id, blob, signature, identify
):
    network = Network(server_key, MemoryRegistry())
    network.registry.add(
        PeerRecord(
            public_id=public_identifier(peer_key),
            public_key=public_key_der(peer_key),
            private_id_hash=b"\x00" * 32,
            address=HOME,
        )
    )
    verifier, _ = challenged(network)
    message = (
        Identify(public_id=public_id, private_id=blob, signature=signature)
        if identify
        else Register(public_id=public_id, public_key=blob, signature=signature)
    )
    outputs = verifier.receive(message, 0.1)
    assert isinstance(sent(outputs), Rejected)
    [failure] = events(outputs)
    assert failure.code in REJECTION_CODES


# -- time -----------------------------------------------------------------------------------------


def test_a_late_response_is_rejected_as_expired(network, peer_key):
    verifier = network.verifier(lifetime=10.0)
    answer = sent(network.prover(peer_key).receive(verifier.challenge(100.0)))
    assert verifier.get_timer() == 110.0
    failure = reject(verifier.receive(answer, 110.0), "expired")
    assert failure.kind == "auth.register"


def test_the_timer_expires_a_stalled_identification(network, peer_key):
    verifier = network.verifier(lifetime=10.0)
    assert verifier.get_timer() is None
    prover = network.prover(peer_key)
    verifier.receive(sent(prover.receive(verifier.challenge(0.0))), 1.0)
    assert verifier.handle_timer(9.9) == []
    failure = reject(verifier.handle_timer(10.0), "expired")
    assert failure.public_id == prover.public_id
    assert failure.kind == "auth.challenge"
    assert verifier.get_timer() is None
    assert verifier.handle_timer(20.0) == []


# -- local misuse ---------------------------------------------------------------------------------


def test_local_misuse_raises(network, peer_key):
    verifier = network.verifier()
    with pytest.raises(LocalProtocolError, match="challenge first"):
        verifier.receive(Confirm(public_id="x"), 0)
    with pytest.raises(LocalProtocolError, match="confirm"):
        network.prover(peer_key).confirm()
    bad_random = network.verifier(random=lambda n: b"short")
    with pytest.raises(LocalProtocolError, match="random source"):
        bad_random.challenge(0)
    for options in ({"node_id": ""}, {"lifetime": 0}, {"channel_binding": b"x" * 2000}):
        with pytest.raises(ValueError):
            Verifier(
                **{
                    "node_id": "sp-a",
                    "fingerprint": network.fingerprint,
                    "registry": network.registry,
                    "address": HOME,
                    **options,
                }
            )


# -- the prover's side ----------------------------------------------------------------------------


def test_the_prover_reports_a_rejection(network, peer_key):
    prover = network.prover(peer_key, PrivateIdentifier.generate())
    verifier = network.verifier()
    outputs = verifier.receive(sent(prover.receive(verifier.challenge(0))), 0)
    [refused] = prover.receive(sent(outputs))
    assert refused == Refused(code="unknown_identifier", reason=sent(outputs).reason)
    assert prover.state is ProverState.FAILED
    with pytest.raises(LocalProtocolError):
        prover.receive(sent(outputs))


@pytest.mark.parametrize(
    "message",
    [
        Accepted(public_id="pk1-x"),
        Registered(public_id="pk1-x", private_id=b"\x00" * 32),
        Challenge(nonce=b"\x00" * 31, verifier_id="sp-a", verifier_fingerprint="pk1-x"),
        Challenge(nonce=b"\x00" * 32, verifier_id="", verifier_fingerprint="pk1-x"),
        "garbage",
    ],
)
def test_the_prover_refuses_a_broken_start(network, peer_key, message):
    if isinstance(message, Challenge):
        message = replace(message, verifier_fingerprint=network.fingerprint)
    prover = network.prover(peer_key)
    with pytest.raises(RemoteProtocolError, match="access point"):
        prover.receive(message)
    assert prover.state is ProverState.FAILED


def test_the_prover_checks_what_the_access_point_answers(network, peer_key):
    prover = network.prover(peer_key)
    prover.receive(network.verifier().challenge(0))
    with pytest.raises(RemoteProtocolError, match="another identifier"):
        prover.receive(Registered(public_id="pk1-other", private_id=b"\x00" * 32))
    prover = network.prover(peer_key)
    prover.receive(network.verifier().challenge(0))
    with pytest.raises(RemoteProtocolError, match="not 32 bytes"):
        prover.receive(Registered(public_id=prover.public_id, private_id=b"\x00"))
    prover = network.prover(peer_key, PrivateIdentifier.generate())
    prover.receive(network.verifier().challenge(0))
    with pytest.raises(RemoteProtocolError, match="another identifier"):
        prover.receive(Accepted(public_id="pk1-other"))


# -- secrets stay secret --------------------------------------------------------------------------


def secret_forms(private_identifier):
    raw = private_identifier.reveal()
    return [raw.hex(), repr(raw)[2:-1], private_identifier.reveal_text()[8:]]


def test_no_secret_in_any_repr_or_rejection(network, registry, peer_key, other_peer_key):
    private_identifier, final, identified = register(network, peer_key)
    secret = private_identifier.reveal()
    texts = [repr(final), repr(identified), repr(registry.get(public_identifier(peer_key)))]
    texts.append(repr(Registered(public_id="pk1-x", private_id=secret)))
    texts.append(repr(IdentifierIssued(private_identifier=private_identifier)))

    def attempt(**change):
        verifier = network.verifier()
        prover = network.prover(peer_key, private_identifier)
        answer = sent(prover.receive(verifier.challenge(0)))
        texts.append(repr(answer))
        outputs = verifier.receive(replace(answer, **change), 0.1)
        texts.append(repr(outputs))
        return outputs

    reject(attempt(signature=b"\x00" * 256), "bad_signature")
    reject(attempt(public_id=public_identifier(other_peer_key)), "unknown_identifier")
    reject(attempt(private_id=secret[::-1]), "bad_private_identifier")
    failure = reject(attempt(public_id=private_identifier.reveal_text()), "malformed")
    assert failure.public_id is None
    reject(attempt(private_id=secret + b"x"), "malformed")
    assert isinstance(sent(attempt()), Accepted)
    for text in texts:
        for form in secret_forms(private_identifier):
            assert form not in text, text


# -- the wire -------------------------------------------------------------------------------------


def test_every_message_goes_through_the_wire_codec(network, peer_key):
    wire.register(*MESSAGE_TYPES.values())
    assert set(MESSAGE_TYPES) == {
        "auth.challenge",
        "auth.register",
        "auth.identify",
        "auth.registered",
        "auth.confirm",
        "auth.accepted",
        "auth.rejected",
    }
    private_identifier = PrivateIdentifier.generate()
    verifier = network.verifier()
    challenge = verifier.challenge(0)
    messages = [
        challenge,
        sent(network.prover(peer_key).receive(challenge)),
        sent(network.prover(peer_key, private_identifier).receive(challenge)),
        Registered(public_id="pk1-x", private_id=private_identifier.reveal()),
        Confirm(public_id="pk1-x"),
        Accepted(public_id="pk1-x"),
        Rejected(code="bad_signature", reason="no"),
    ]
    for message in messages:
        assert wire.decode(wire.encode(message))[0] == message
