"""Public identifiers (hash of the key, text form) and private identifiers (secret, hidden)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crypto import (
    IdentifierError,
    InsecurePermissionsWarning,
    KeyFileError,
    PrivateIdentifier,
    check_private_identifier,
    hash_private_identifier,
    load_private_identifier,
    matches,
    parse_public_identifier,
    public_identifier,
    public_key_der,
    save_private_identifier,
)

PUBLIC_FORM = re.compile(r"pk1-[a-z2-7]{52}")


def secret_forms(private_identifier: PrivateIdentifier) -> list[str]:
    """Every way the secret could show up in a text."""
    raw = private_identifier.reveal()
    body = private_identifier.reveal_text().removeprefix("secret1-")
    return [raw.hex(), repr(raw), str(raw), body, body.upper(), base64.b64encode(raw).decode()]


# -- public identifiers ---------------------------------------------------------------------------


def test_a_public_identifier_is_the_base32_sha256_of_the_der_spki(peer_key):
    der = public_key_der(peer_key)
    expected = "pk1-" + base64.b32encode(hashlib.sha256(der).digest()).decode().rstrip("=").lower()
    assert public_identifier(peer_key) == expected
    assert public_identifier(peer_key.public_key()) == expected
    assert public_identifier(der) == expected
    assert PUBLIC_FORM.fullmatch(expected)


def test_distinct_keys_have_distinct_identifiers(peer_key, other_peer_key):
    assert public_identifier(peer_key) != public_identifier(other_peer_key)


def test_anyone_can_check_that_an_identifier_belongs_to_a_key(peer_key, other_peer_key):
    identifier = public_identifier(peer_key)
    assert matches(peer_key.public_key(), identifier)
    assert matches(public_key_der(peer_key), identifier.upper())
    assert not matches(other_peer_key.public_key(), identifier)
    assert not matches(peer_key, "pk1-not-an-identifier")


def test_parsing_normalises_case(peer_key):
    identifier = public_identifier(peer_key)
    assert parse_public_identifier(identifier.upper()) == identifier
    assert parse_public_identifier(identifier) == identifier


def test_malformed_public_identifiers_are_refused(peer_key):
    good = public_identifier(peer_key)
    last = good[-1]
    # The last character carries one bit of the digest and four unused bits, which must be zero.
    non_canonical = good[:-1] + ("b" if last == "a" else "r" if last == "q" else "z")
    for bad in (
        "",
        good[:-1],
        good + "a",
        "pk2-" + good[4:],
        "sk1-" + good[4:],
        "pk1-" + "1" * 52,
        "pk1-" + "=" * 52,
        good[:10] + "é" + good[11:],
        non_canonical,
    ):
        with pytest.raises(IdentifierError):
            parse_public_identifier(bad)
    with pytest.raises(IdentifierError):
        parse_public_identifier(42)  # type: ignore[arg-type]


@given(st.binary(min_size=32, max_size=32))
def test_every_digest_has_exactly_one_canonical_form(digest):
    text = "pk1-" + base64.b32encode(digest).decode().rstrip("=").lower()
    assert parse_public_identifier(text) == text
    assert base64.b32decode(text[4:].upper() + "====") == digest


# -- private identifiers --------------------------------------------------------------------------


def test_a_private_identifier_is_256_random_bits():
    first, second = PrivateIdentifier.generate(), PrivateIdentifier.generate()
    assert len(first.reveal()) == 32
    assert first != second


def test_an_injected_random_source_is_used():
    assert PrivateIdentifier.generate(lambda n: b"\x07" * n).reveal() == b"\x07" * 32


def test_the_secret_never_shows_in_repr_str_or_format():
    private_identifier = PrivateIdentifier.generate()
    texts = [
        repr(private_identifier),
        str(private_identifier),
        f"{private_identifier}",
        f"{private_identifier!r}",
        "%s %r" % (private_identifier, private_identifier),  # noqa: UP031 - old-style logging
        repr([private_identifier]),
        repr({"pid": private_identifier}),
    ]
    for text in texts:
        assert "hidden" in text
        for form in secret_forms(private_identifier):
            assert form not in text


def test_the_text_form_round_trips_and_is_recognisable():
    private_identifier = PrivateIdentifier.generate()
    text = private_identifier.reveal_text()
    assert re.fullmatch(r"secret1-[a-z2-7]{52}", text)
    assert PrivateIdentifier.from_text(text) == private_identifier
    assert PrivateIdentifier.from_text(text.upper()) == private_identifier


def test_errors_about_a_private_identifier_never_repeat_it():
    text = PrivateIdentifier.generate().reveal_text()
    for bad in (text[:-1], text + "a", text.replace("secret1-", "pk1-")):
        with pytest.raises(IdentifierError) as caught:
            PrivateIdentifier.from_text(bad)
        assert text[8:20] not in str(caught.value)


def test_private_identifiers_are_exactly_32_bytes_and_unhashable():
    for bad in (b"", b"x" * 31, b"x" * 33, "x" * 32):
        with pytest.raises(IdentifierError, match="exactly 32 bytes"):
            PrivateIdentifier(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hash(PrivateIdentifier.generate())
    assert PrivateIdentifier(b"x" * 32) != b"x" * 32


def test_the_stored_hash_binds_the_secret_to_its_public_identifier(peer_key, other_peer_key):
    private_identifier = PrivateIdentifier.generate()
    owner, other = public_identifier(peer_key), public_identifier(other_peer_key)
    stored = hash_private_identifier(private_identifier, owner)
    assert len(stored) == 32
    assert stored == hash_private_identifier(private_identifier.reveal(), owner)
    assert stored != hash_private_identifier(private_identifier, other)
    assert stored != hashlib.sha256(private_identifier.reveal()).digest()
    assert check_private_identifier(private_identifier.reveal(), owner, stored)
    assert not check_private_identifier(PrivateIdentifier.generate().reveal(), owner, stored)
    assert not check_private_identifier(private_identifier.reveal(), other, stored)


def test_the_peer_keeps_its_private_identifier_in_a_0600_file(tmp_path):
    private_identifier = PrivateIdentifier.generate()
    path = save_private_identifier(private_identifier, tmp_path / "private-id")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_private_identifier(path) == private_identifier
    with pytest.raises(KeyFileError, match="already exists"):
        save_private_identifier(PrivateIdentifier.generate(), path)


def test_private_identifier_file_errors_never_show_the_content(tmp_path):
    with pytest.raises(KeyFileError, match=r"does not exist .*when it registers"):
        load_private_identifier(tmp_path / "absent")
    private_identifier = PrivateIdentifier.generate()
    path = save_private_identifier(private_identifier, tmp_path / "private-id")
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_private_identifier(path)
    with pytest.warns(InsecurePermissionsWarning):
        assert load_private_identifier(path, allow_insecure_permissions=True) == private_identifier
    damaged = tmp_path / "damaged"
    damaged.write_text(private_identifier.reveal_text()[:-3] + "\n")
    damaged.chmod(0o600)
    with pytest.raises(KeyFileError, match="does not hold a private identifier") as caught:
        load_private_identifier(damaged)
    for form in secret_forms(private_identifier):
        assert form[:12] not in str(caught.value)
