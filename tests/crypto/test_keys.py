"""Key generation, the 0600 atomic save, and every way a key file can be unusable."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.utils import CryptographyDeprecationWarning

from crypto import (
    InsecurePermissionsWarning,
    KeyFileError,
    KeyPolicyError,
    _files,
    check_key_policy,
    generate_private_key,
    load_private_key,
    load_public_key_der,
    public_key_der,
    save_private_key,
)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def pem(key: object, encryption: serialization.KeySerializationEncryption | None = None) -> bytes:
    return key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        encryption or serialization.NoEncryption(),
    )


# -- generation and policy ------------------------------------------------------------------------


def test_the_default_key_is_rsa_3072_with_exponent_65537():
    key = generate_private_key()
    assert isinstance(key, rsa.RSAPrivateKey)
    assert key.key_size == 3072
    assert key.public_key().public_numbers().e == 65537


@pytest.mark.parametrize("bits", [1024, 2047, 16385])
def test_generation_refuses_sizes_outside_2048_to_16384(bits):
    with pytest.raises(KeyPolicyError, match=r"2048\.\.16384"):
        generate_private_key(bits)


def test_the_policy_refuses_other_key_types_small_keys_and_odd_exponents():
    with pytest.raises(KeyPolicyError, match="RSA key is required, not an elliptic-curve key"):
        check_key_policy(ec.generate_private_key(ec.SECP256R1()))
    with pytest.raises(KeyPolicyError, match="RSA key is required, not an Ed25519 key"):
        check_key_policy(ed25519.Ed25519PrivateKey.generate())
    with pytest.raises(KeyPolicyError, match="RSA-1024 is too small: at least 2048"):
        check_key_policy(rsa.generate_private_key(public_exponent=65537, key_size=1024))
    with pytest.raises(KeyPolicyError, match="exponent must be 65537"):
        check_key_policy(rsa.generate_private_key(public_exponent=3, key_size=2048))


def test_a_dsa_key_is_refused_by_name_without_the_deprecation_warning_failing_the_check():
    """cryptography 51 deprecates DSA: making a DSA key warns (allowed here), but refusing one
    must not, or a user's DSA key would end in a warning instead of the policy's message (the
    suite turns warnings into errors)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        from cryptography.hazmat.primitives.asymmetric import dsa

        key = dsa.generate_private_key(key_size=2048)
    with pytest.raises(KeyPolicyError, match="RSA key is required, not a DSA key"):
        check_key_policy(key)


def test_the_minimum_can_be_raised_but_not_lowered(peer_key):
    with pytest.raises(KeyPolicyError, match="RSA-2048 is too small: at least 3072"):
        check_key_policy(peer_key, min_bits=3072)
    with pytest.raises(ValueError, match="below 2048"):
        check_key_policy(peer_key, min_bits=1024)


# -- saving ---------------------------------------------------------------------------------------


def test_a_saved_key_is_pkcs8_pem_with_mode_0600_and_loads_back(tmp_path, peer_key):
    path = save_private_key(peer_key, tmp_path / "peer.key")
    assert mode_of(path) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_key_der(load_private_key(path)) == public_key_der(peer_key)


def test_the_file_is_0600_even_with_a_permissive_umask(tmp_path, peer_key):
    previous = os.umask(0)
    try:
        path = save_private_key(peer_key, tmp_path / "peer.key")
    finally:
        os.umask(previous)
    assert mode_of(path) == 0o600


def test_the_secret_never_sits_in_a_readable_file(tmp_path, peer_key, monkeypatch):
    """Every file the writer opens is created 0600 with O_EXCL (no chmod afterwards, no window)."""
    opened = []
    real_open = os.open

    def spy(path, flags, mode=0o777, *args, **kwargs):
        opened.append((Path(path), flags, mode))
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(_files.os, "open", spy)
    save_private_key(peer_key, tmp_path / "peer.key")
    created = [(path, flags, mode) for path, flags, mode in opened if flags & os.O_CREAT]
    assert created
    for path, flags, mode in created:
        assert path.parent == tmp_path
        assert flags & os.O_EXCL
        assert mode == 0o600


def test_a_passphrase_encrypts_the_key(tmp_path, peer_key):
    path = save_private_key(peer_key, tmp_path / "peer.key", b"correct horse")
    assert path.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    loaded = load_private_key(path, b"correct horse")
    assert public_key_der(loaded) == public_key_der(peer_key)


def test_an_empty_passphrase_is_refused(tmp_path, peer_key):
    with pytest.raises(ValueError, match="empty passphrase"):
        save_private_key(peer_key, tmp_path / "peer.key", b"")


def test_saving_never_replaces_a_key_unless_asked(tmp_path, peer_key, other_peer_key):
    path = save_private_key(peer_key, tmp_path / "peer.key")
    with pytest.raises(KeyFileError, match=r"already exists; refusing to replace it"):
        save_private_key(other_peer_key, path)
    assert public_key_der(load_private_key(path)) == public_key_der(peer_key)
    save_private_key(other_peer_key, path, overwrite=True)
    assert public_key_der(load_private_key(path)) == public_key_der(other_peer_key)
    assert mode_of(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["peer.key"]  # no temporary left


def test_saving_into_a_missing_directory_is_a_clear_error(tmp_path, peer_key):
    with pytest.raises(KeyFileError, match=r"cannot write key file .*No such file or directory"):
        save_private_key(peer_key, tmp_path / "missing" / "peer.key")


def test_saving_refuses_a_key_the_policy_refuses(tmp_path):
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(KeyPolicyError):
        save_private_key(small, tmp_path / "small.key")
    assert not (tmp_path / "small.key").exists()


# -- loading: every failure has its message -------------------------------------------------------


def test_a_missing_key_file_says_how_to_create_one(tmp_path):
    with pytest.raises(KeyFileError, match=r"does not exist \(generate one with `peer keygen`"):
        load_private_key(tmp_path / "absent.key")


def test_an_unreadable_key_file_says_permission_denied(tmp_path, peer_key, monkeypatch):
    path = save_private_key(peer_key, tmp_path / "peer.key")
    path.chmod(0o000)
    if os.geteuid() == 0:  # root reads anything: make the file system say no, as it would
        real_open = os.open

        def deny(target, flags, *args, **kwargs):
            if Path(target) == path:
                raise PermissionError(13, "Permission denied")
            return real_open(target, flags, *args, **kwargs)

        monkeypatch.setattr(_files.os, "open", deny)
    with pytest.raises(KeyFileError, match="cannot be read: permission denied"):
        load_private_key(path)


def test_a_directory_is_not_a_key_file(tmp_path):
    with pytest.raises(KeyFileError, match="is not a regular file"):
        load_private_key(tmp_path)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o620])
def test_a_key_file_others_can_access_is_refused_with_the_chmod_fix(tmp_path, peer_key, mode):
    path = save_private_key(peer_key, tmp_path / "peer.key")
    path.chmod(mode)
    with pytest.raises(KeyFileError) as caught:
        load_private_key(path)
    message = str(caught.value)
    assert f"accessible by group or others (mode {mode:04o})" in message
    assert f"run `chmod 600 {path}`" in message
    assert "allow_insecure_permissions=True" in message


def test_insecure_permissions_can_be_accepted_explicitly_with_a_warning(tmp_path, peer_key):
    path = save_private_key(peer_key, tmp_path / "peer.key")
    path.chmod(0o644)
    with pytest.warns(InsecurePermissionsWarning, match="chmod 600"):
        key = load_private_key(path, allow_insecure_permissions=True)
    assert public_key_der(key) == public_key_der(peer_key)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello, I am not a key\n", "is not a PEM file, not a PEM private key"),
        (b"", "is not a PEM file"),
        (b"\x00\xff" * 100, "is not a PEM file"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "is damaged"),
        (b"-----BEGIN FOO-----\nAAAA\n-----END FOO-----\n", "a PEM file of another kind"),
        (
            b"-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
            "OpenSSH format; convert it to PKCS#8 PEM",
        ),
    ],
)
def test_garbage_is_named_as_what_it_is(tmp_path, content, message):
    with pytest.raises(KeyFileError, match=message):
        load_private_key(write(tmp_path / "x.key", content))


def test_a_certificate_or_public_key_is_not_a_private_key(tmp_path, peer_key, node_a):
    with pytest.raises(KeyFileError, match="is a certificate, not a PEM private key"):
        load_private_key(write(tmp_path / "x.key", node_a.cert_path.read_bytes()))
    public_pem = peer_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(KeyFileError, match="is a public key, not a PEM private key"):
        load_private_key(write(tmp_path / "y.key", public_pem))


def test_an_oversized_file_is_not_read(tmp_path):
    path = write(tmp_path / "big.key", b"-" * (_files.MAX_SECRET_FILE_BYTES + 1))
    with pytest.raises(KeyFileError, match="too large to be a key"):
        load_private_key(path)


def test_passphrase_errors_say_which(tmp_path, peer_key):
    encrypted = save_private_key(peer_key, tmp_path / "enc.key", b"secret")
    plain = save_private_key(peer_key, tmp_path / "plain.key")
    with pytest.raises(KeyFileError, match="is encrypted: a passphrase is required"):
        load_private_key(encrypted)
    with pytest.raises(KeyFileError, match="cannot be decrypted: wrong passphrase"):
        load_private_key(encrypted, b"guess")
    with pytest.raises(KeyFileError, match="is not encrypted, but a passphrase was given"):
        load_private_key(plain, b"secret")


def test_a_passphrase_never_appears_in_an_error(tmp_path, peer_key):
    encrypted = save_private_key(peer_key, tmp_path / "enc.key", b"secret")
    with pytest.raises(KeyFileError) as caught:
        load_private_key(encrypted, b"my-wrong-passphrase")
    assert "my-wrong-passphrase" not in str(caught.value)


def test_a_traditional_encrypted_pem_is_recognised_as_encrypted(tmp_path, peer_key):
    data = peer_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.BestAvailableEncryption(b"pw"),
    )
    path = write(tmp_path / "trad.key", data)
    with pytest.raises(KeyFileError, match="passphrase is required"):
        load_private_key(path)
    assert public_key_der(load_private_key(path, b"pw")) == public_key_der(peer_key)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (ec.generate_private_key(ec.SECP256R1()), "an RSA key is required, not an elliptic-curve"),
        (ed25519.Ed25519PrivateKey.generate(), "an RSA key is required, not an Ed25519 key"),
        (rsa.generate_private_key(public_exponent=65537, key_size=1024), "RSA-1024 is too small"),
        (rsa.generate_private_key(public_exponent=3, key_size=2048), "exponent must be 65537"),
    ],
)
def test_keys_the_policy_refuses_are_key_file_errors_with_the_file_name(tmp_path, key, message):
    path = write(tmp_path / "wrong.key", pem(key))
    with pytest.raises(KeyFileError, match=message) as caught:
        load_private_key(path)
    assert str(path) in str(caught.value)


def test_min_bits_raises_the_bar_when_loading(tmp_path, peer_key):
    path = save_private_key(peer_key, tmp_path / "peer.key")
    with pytest.raises(KeyFileError, match="RSA-2048 is too small: at least 3072"):
        load_private_key(path, min_bits=3072)


# -- public keys from others ----------------------------------------------------------------------


def test_public_key_der_is_the_subject_public_key_info(peer_key):
    der = public_key_der(peer_key)
    assert der == public_key_der(peer_key.public_key())
    assert load_public_key_der(der).public_numbers() == peer_key.public_key().public_numbers()


def test_received_public_keys_must_parse_be_canonical_and_follow_the_policy(peer_key):
    der = public_key_der(peer_key)
    pkcs1 = peer_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.PKCS1
    )
    for bad in (b"", b"\x30\x00", der + b"\x00", pkcs1, der[:-1]):
        with pytest.raises(KeyPolicyError):
            load_public_key_der(bad)
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(KeyPolicyError, match="too small"):
        load_public_key_der(public_key_der(small))
    with pytest.raises(KeyPolicyError, match="too large"):
        load_public_key_der(der, max_bits=1024 + 1)
