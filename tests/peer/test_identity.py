"""The peer's identity: its key and ``peer keygen``, its registration files, what stops ``peer
run`` from starting, and the client and daemon over real TLS on 127.0.0.1 against the fake access
point identifying peers as the super-peer does (registration stored before it is confirmed,
re-identification, a registration the access point lost, refusals, and servers the peer must not
trust, which receive nothing)."""

import json
import os
import stat
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

import crypto
import qel
from peer import cli
from peer.client import PeerClient, PeerRequest, TlsSettings
from peer.config import load_config
from peer.daemon import DaemonError, serve_peer
from peer.files import hold_data_dir
from peer.identity import (
    PASSPHRASE_VARIABLE,
    IdentityError,
    PeerIdentity,
    RegistrationFiles,
    forget_registration,
    load_key,
    passphrase_from,
)
from peer.session import Registration
from tests.peer.fake_access_point import NODE_ID, FakeAccessPoint, FakeTls
from tests.peer.helpers import TITLE_QUERY, attached, make_client
from tests.peer.tls import TlsWorld
from wire import messages as m

QUERY = qel.parse_subscription(TITLE_QUERY)


def ca_trust(world: TlsWorld) -> TlsSettings:
    return TlsSettings(crypto.peer_client_context(ca=world.network.ca))


def pin_trust(fingerprint: str) -> TlsSettings:
    return TlsSettings(crypto.peer_client_context(pinned_fingerprint=fingerprint), pin=fingerprint)


def tls_client(
    directory: Path, port: int, key: rsa.RSAPrivateKey, trust: TlsSettings
) -> PeerClient:
    return make_client(directory, port, timeout=10.0, tls=trust, key=key)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the client over TLS ---------------------------------------------------------------------


@pytest.mark.parametrize("trust", ["ca", "pin"])
async def test_the_peer_registers_stores_before_confirming_then_identifies(
    tmp_path, tls_world, tls_access_point, nursery, trust
):
    key = tls_world.peer_keys[0]
    public_id = crypto.public_identifier(key)
    files = RegistrationFiles(tmp_path / "identity", public_id)
    confirmed = []

    def before_confirm(who: str, issued: crypto.PrivateIdentifier) -> None:
        assert who == public_id
        assert files.load() == Registration(issued, NODE_ID), "stored before the confirmation"
        assert mode(files.private_id_path) == 0o600
        confirmed.append(who)

    tls_access_point.before_confirm = before_confirm
    settings = ca_trust(tls_world) if trust == "ca" else pin_trust(tls_world.network.fingerprint)
    client = tls_client(tmp_path, tls_access_point.port, key, settings)
    client.store.add_subscription("s1", TITLE_QUERY)
    assert client.peer_id == public_id
    nursery.start_soon(client.serve)
    await attached(tls_access_point, public_id)
    assert confirmed == [public_id]
    statistics = client.statistics()
    assert (statistics.connected, statistics.superpeer_id) == (True, NODE_ID)
    assert statistics.registered_with == NODE_ID

    await tls_access_point.drop(public_id)
    await attached(tls_access_point, public_id, times=2)
    await client.request(PeerRequest(message=m.Unsubscribe(id="barrier")))  # after the re-send
    assert tls_access_point.identified == [(public_id, True), (public_id, False)]
    assert tls_access_point.auth_failures == []
    assert tls_access_point.peers[public_id].subscriptions == {"s1": QUERY}
    assert json.loads(files.registration_path.read_text()) == {
        "format": 1,
        "public_id": public_id,
        "issued_by": NODE_ID,
    }


async def test_a_registration_the_access_point_lost_is_forgotten_and_made_again(
    tmp_path, tls_world, tls_access_point, nursery
):
    key = tls_world.peer_keys[0]
    public_id = crypto.public_identifier(key)
    client = tls_client(tmp_path, tls_access_point.port, key, ca_trust(tls_world))
    nursery.start_soon(client.serve)
    await attached(tls_access_point, public_id)
    files = RegistrationFiles(tmp_path / "identity", public_id)
    first = files.load()
    assert first is not None

    tls_access_point.registry = crypto.MemoryRegistry()  # the super-peer lost its registry
    await tls_access_point.drop(public_id)
    await attached(tls_access_point, public_id, times=2)
    assert tls_access_point.auth_failures == ["unknown_identifier"]
    assert tls_access_point.identified == [(public_id, True), (public_id, True)]
    again = files.load()
    assert again is not None
    assert again.issued_by == NODE_ID
    assert again.private_identifier != first.private_identifier


async def test_a_refusal_the_next_connection_repairs_does_not_move_the_peer(
    tmp_path, tls_world, tls_access_point, nursery
):
    """The access point forgot the peer's registration and refuses it once: the peer registers
    there again, and does not move on to the next super-peer of its list (one its access point
    named, ``Welcome.alternates``), which it tries only when its access point cannot be
    reached. (It moved in the rendezvous tests once the list held others.)"""
    network = tls_world.network
    other = FakeAccessPoint(
        tls=FakeTls(network.server_context(), network.node_id, network.fingerprint)
    )
    await nursery.start(other.serve)
    key = tls_world.peer_keys[0]
    public_id = crypto.public_identifier(key)
    client = tls_client(tmp_path, tls_access_point.port, key, ca_trust(tls_world))
    client.superpeers.append(("127.0.0.1", other.port))
    nursery.start_soon(client.serve)
    await attached(tls_access_point, public_id)
    tls_access_point.registry = crypto.MemoryRegistry()  # the super-peer lost its registry
    await tls_access_point.drop(public_id)
    with trio.fail_after(30):  # (moved on, it would attach there instead, for good)
        await attached(tls_access_point, public_id, times=2)
    assert tls_access_point.auth_failures == ["unknown_identifier"]
    assert other.identified == []


async def test_a_refused_identification_is_retried_and_reported(
    tmp_path, tls_world, tls_access_point, nursery
):
    """The key is registered there, but this peer holds no private identifier for it."""
    key = tls_world.peer_keys[0]
    public_id = crypto.public_identifier(key)
    tls_access_point.registry.add(
        crypto.PeerRecord(
            public_id=public_id,
            public_key=crypto.public_key_der(key),
            private_id_hash=bytes(32),
            address="elsewhere",
        )
    )
    client = tls_client(tmp_path, tls_access_point.port, key, ca_trust(tls_world))
    nursery.start_soon(client.serve)
    await tls_access_point.wait_until(lambda: len(tls_access_point.auth_failures) >= 2)
    assert set(tls_access_point.auth_failures) == {"already_registered"}
    statistics = client.statistics()
    assert not statistics.connected
    assert statistics.last_error is not None
    assert "refused the identification (already_registered)" in statistics.last_error
    assert "operator must forget the registration" in statistics.last_error
    assert tls_access_point.peers == {}


async def test_servers_the_peer_does_not_trust_receive_nothing(
    tmp_path, tls_world, tls_access_point, nursery
):
    key = tls_world.peer_keys[0]
    port = tls_access_point.port
    pinned_elsewhere = tls_client(
        tmp_path / "pin", port, key, pin_trust(tls_world.rogue.fingerprint)
    )
    foreign_ca = tls_client(
        tmp_path / "ca",
        port,
        key,
        TlsSettings(crypto.peer_client_context(ca=tls_world.rogue.ca)),
    )
    nursery.start_soon(pinned_elsewhere.serve)
    nursery.start_soon(foreign_ca.serve)
    await tls_access_point.wait_until(
        lambda: tls_access_point.connections >= 2 and tls_access_point.tls_failures >= 2
    )
    assert tls_access_point.bytes_received == 0, "not a byte of the protocol"
    assert tls_access_point.peers == {}
    assert tls_access_point.refused_hellos == []
    pin_error = pinned_elsewhere.statistics().last_error
    assert pin_error is not None
    assert f"the server's key is {tls_world.network.fingerprint}, not the pinned" in pin_error
    ca_error = foreign_ca.statistics().last_error
    assert ca_error is not None
    assert "presented a certificate this peer does not trust" in ca_error
    assert "is --ca the certificate of its network's CA?" in ca_error
    for directory in (tmp_path / "pin", tmp_path / "ca"):
        assert not (directory / "identity" / "private-id").exists()


async def test_tls_and_plaintext_mismatches_say_which_option_is_missing(
    tmp_path, tls_world, access_point, tls_access_point, nursery
):
    key = tls_world.peer_keys[0]
    secure = tls_client(tmp_path / "tls", access_point.port, key, ca_trust(tls_world))
    plain = make_client(tmp_path / "plain", tls_access_point.port, timeout=10.0)
    nursery.start_soon(secure.serve)
    nursery.start_soon(plain.serve)
    # A second attempt reaching the server means the first one's failure was recorded.
    await tls_access_point.wait_until(lambda: tls_access_point.tls_failures >= 2)
    await access_point.wait_until(lambda: access_point.connections >= 2)
    assert "a plaintext super-peer needs --no-tls" in (secure.statistics().last_error or "")
    assert "a super-peer with TLS needs --ca or --pin" in (plain.statistics().last_error or "")
    assert access_point.peers == tls_access_point.peers == {}


# -- the daemon ------------------------------------------------------------------------------


async def test_the_daemon_runs_as_its_public_identifier_and_shows_its_security(
    tmp_path, tls_world, tls_access_point, nursery, capsys
):
    data = tmp_path / "alice"
    public_id = tls_world.install_key(data)
    config = load_config(
        None,
        data_dir=str(data),
        name="alice",
        superpeer=tls_access_point.address,
        ca=str(tls_world.network.ca),
    )
    running = await nursery.start(serve_peer, config)
    assert (running.peer_id, running.name) == (public_id, "alice")
    await attached(tls_access_point, public_id)

    async def run_cli(*argv: str) -> tuple[int, str]:
        code = await trio.to_thread.run_sync(cli.main, [*argv, "--data-dir", str(data)])
        return code, capsys.readouterr().out

    code, out = await run_cli("status", "--json")
    status = json.loads(out)
    assert (code, status["peer_id"], status["name"]) == (0, public_id, "alice")
    assert status["security"] == {
        "tls": True,
        "trust": f"ca {tls_world.network.ca}",
        "key": str(data / "identity" / "key.pem"),
        "registered_with": NODE_ID,
    }
    code, out = await run_cli("status")
    assert out.startswith(f"peer {public_id} (alice)  (data {data})\n")
    assert f"  security: TLS, trusting ca {tls_world.network.ca}; registered with {NODE_ID}" in out
    assert (await run_cli("subscribe", TITLE_QUERY, "--id", "s1"))[0] == 0
    assert tls_access_point.peers[public_id].subscriptions == {"s1": QUERY}


async def test_a_data_directory_of_the_plaintext_era(tmp_path, tls_world, tls_access_point):
    """It runs as before with --no-tls (``test_daemon``); with TLS it needs a key, and then its
    saved subscriptions are sent under its new identity."""
    data = tmp_path / "alice"
    data.mkdir()
    (data / "state.json").write_text(
        json.dumps(
            {
                "format": 1,
                "peer_id": "alice",
                "advertisement": None,
                "subscriptions": {"s1": TITLE_QUERY},
                "in_doubt": [],
            }
        )
    )
    config = load_config(
        None, data_dir=str(data), superpeer=tls_access_point.address, ca=str(tls_world.network.ca)
    )
    with pytest.raises(DaemonError, match=r"the peer has no key at .*: create its identity with"):
        await serve_peer(config)
    public_id = tls_world.install_key(data)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(serve_peer, config)
        assert (running.peer_id, running.name) == (public_id, "alice")
        await attached(tls_access_point, public_id)
        await tls_access_point.wait_until(
            lambda: tls_access_point.peers[public_id].subscriptions == {"s1": QUERY}
        )
        nursery.cancel_scope.cancel()


def write_pem(
    path: Path, key: object, *, permissions: int = 0o600, passphrase: bytes = b""
) -> None:
    encryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase
        else serialization.NoEncryption()
    )
    data = key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(permissions)


def small_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=1024)


@pytest.mark.parametrize(
    ("setup", "options", "message"),
    [
        (None, {}, "does not know how to authenticate its access point: give --ca FILE"),
        (None, {"ca": "missing.pem"}, r"the CA certificate \(--ca\): cannot read certificate"),
        ("key", {"ca": "identity/key.pem"}, "is not a PEM certificate"),
        (None, {"pin": True}, "the peer has no key at .*: create its identity with `peer keygen`"),
        ("loose", {"pin": True}, r"mode 0644\); run `chmod 600"),
        ("small", {"pin": True}, "RSA-1024 is too small: at least 2048 bits required"),
        ("ec", {"pin": True}, "an RSA key is required, not an elliptic-curve key"),
        ("encrypted", {"pin": True}, f"a passphrase is required .*{PASSPHRASE_VARIABLE}"),
        ("encrypted wrong", {"pin": True}, "cannot be decrypted: wrong passphrase"),
        ("secret only", {"pin": True}, "registration.json .* does not: restore it"),
        ("other key", {"pin": True}, "is the registration of pk1-.*, not of this peer's key"),
    ],
)
async def test_what_stops_the_daemon_from_starting(
    tmp_path, tls_world, monkeypatch, setup, options, message
):
    data = tmp_path / "p"
    key_path = data / "identity" / "key.pem"
    passphrase = None
    if setup in ("key", "loose", "secret only", "other key"):
        tls_world.install_key(data)
        key_path.chmod(0o644 if setup == "loose" else 0o600)
    elif setup == "small":
        write_pem(key_path, small_key())
    elif setup == "ec":
        write_pem(key_path, ec.generate_private_key(ec.SECP256R1()))
    elif setup is not None:
        write_pem(key_path, tls_world.peer_keys[0], passphrase=b"right")
        passphrase = b"wrong" if setup == "encrypted wrong" else None
    registration = Registration(crypto.PrivateIdentifier.generate(), NODE_ID)
    if setup == "secret only":
        crypto.save_private_identifier(
            registration.private_identifier, data / "identity/private-id"
        )
    elif setup == "other key":
        other = crypto.public_identifier(tls_world.peer_keys[1])
        RegistrationFiles(data / "identity", other).save(registration)
    monkeypatch.chdir(data.parent if setup != "key" else data)
    config = load_config(
        None,
        data_dir=str(data),
        superpeer="127.0.0.1:9",
        ca=options.get("ca"),
        pin=tls_world.network.fingerprint if options.get("pin") else None,
    )
    with pytest.raises(DaemonError, match=message):
        await serve_peer(config, passphrase=passphrase)
    assert not (data / "control.sock").exists()


async def test_an_encrypted_key_is_unlocked_with_the_passphrase(tmp_path, tls_world):
    path = tmp_path / "key.pem"
    write_pem(path, tls_world.peer_keys[0], passphrase=b"s3cret")
    key = load_key(path, b"s3cret")
    assert crypto.public_identifier(key) == crypto.public_identifier(tls_world.peer_keys[0])
    assert passphrase_from({PASSPHRASE_VARIABLE: "s3cret"}) == b"s3cret"
    assert passphrase_from({}) is None
    with pytest.raises(IdentityError, match="set but empty"):
        passphrase_from({PASSPHRASE_VARIABLE: ""})


# -- registration files ------------------------------------------------------------------------


def test_registration_files_round_trip_and_are_private(tmp_path, tls_world):
    public_id = crypto.public_identifier(tls_world.peer_keys[0])
    files = RegistrationFiles(tmp_path / "identity", public_id)
    assert files.load() is None
    registration = Registration(crypto.PrivateIdentifier.generate(), "sp0")
    files.save(registration)
    assert files.load() == registration
    assert mode(files.private_id_path) == mode(files.registration_path) == 0o600
    secret = registration.private_identifier.reveal_text()
    assert secret not in files.registration_path.read_text()
    assert files.private_id_path.read_text() == secret + "\n"
    replacement = Registration(crypto.PrivateIdentifier.generate(), "sp1")
    files.save(replacement)
    assert files.load() == replacement
    assert files.forget()
    assert files.load() is None
    assert list(files.directory.iterdir()) == []
    assert not files.forget()


def test_earlier_registrations_are_kept_for_a_move_back(tmp_path, tls_world):
    """A peer that moved sp0 -> sp1 and back to sp0 before sp0 handed its record over must
    identify at sp0 (registering again there meets ``already_registered``): it keeps sp0's
    registration beside sp1's, across restarts, until sp0 says it lost it; ``keygen --force``
    forgets them all."""
    key = tls_world.peer_keys[0]
    directory = tmp_path / "identity"
    identity = PeerIdentity.open(key, directory)
    first = Registration(crypto.PrivateIdentifier.generate(), "sp0")
    second = Registration(crypto.PrivateIdentifier.generate(), "sp1")
    identity.store(first)
    identity.store(second)
    reopened = PeerIdentity.open(key, directory)
    assert reopened.registration == second
    assert reopened.registration_with("sp0") == first
    assert reopened.registration_with("sp2") is None
    again = Registration(crypto.PrivateIdentifier.generate(), "sp0")
    reopened.store(again)  # registered at sp0 again: the latest, and no longer an earlier one
    assert PeerIdentity.open(key, directory).earlier == {"sp1": second}
    reopened.forget("sp1")
    assert PeerIdentity.open(key, directory).earlier == {}
    assert PeerIdentity.open(key, directory).registration == again
    reopened.store(Registration(crypto.PrivateIdentifier.generate(), "sp3"))
    assert forget_registration(directory)
    emptied = PeerIdentity.open(key, directory)
    assert emptied.registration is None and emptied.earlier == {}


def test_an_issuer_without_its_secret_is_no_registration(tmp_path, tls_world):
    """A crash between the two writes, before the confirmation: the peer registers again."""
    public_id = crypto.public_identifier(tls_world.peer_keys[0])
    files = RegistrationFiles(tmp_path, public_id)
    files.save(Registration(crypto.PrivateIdentifier.generate(), "sp0"))
    files.private_id_path.unlink()
    assert files.load() is None
    files.registration_path.write_text("{broken")
    with pytest.raises(IdentityError, match=r"is damaged: move it and .* away"):
        files.load()


# -- peer keygen -------------------------------------------------------------------------------


def keygen(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["keygen", "--bits", "2048", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_keygen_creates_the_key_once_and_prints_its_identifier(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(PASSPHRASE_VARIABLE, raising=False)
    data = tmp_path / "alice"
    code, out, err = keygen(capsys, "--data-dir", str(data))
    key_path = data / "identity" / "key.pem"
    public_id = crypto.public_identifier(load_key(key_path, None))
    assert (code, out, err) == (0, f"public identifier {public_id} (key {key_path})\n", "")
    assert mode(key_path) == 0o600
    assert mode(data) == mode(data / "identity") == 0o700

    code, out, err = keygen(capsys, "--data-dir", str(data))
    assert (code, out) == (2, "")
    assert err.startswith(f"peer: the key file {key_path} already exists")
    assert "`peer keygen --force` replaces it" in err

    RegistrationFiles(data / "identity", public_id).save(
        Registration(crypto.PrivateIdentifier.generate(), "sp0")
    )
    with hold_data_dir(data):
        code, _, err = keygen(capsys, "--data-dir", str(data), "--force")
        assert code == 2
        assert "a peer daemon is running with the data directory" in err
    code, out, _ = keygen(capsys, "--data-dir", str(data), "--force")
    assert code == 0
    assert crypto.public_identifier(load_key(key_path, None)) != public_id
    assert out.endswith(
        "the registration of the replaced key was removed: the peer registers again\n"
    )
    assert sorted(p.name for p in (data / "identity").iterdir()) == ["key.pem"]


def test_keygen_encrypts_with_the_passphrase_and_refuses_small_keys(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(PASSPHRASE_VARIABLE, "s3cret")
    code, out, _ = keygen(capsys, "--data-dir", str(tmp_path / "a"))
    assert code == 0
    assert out.endswith(", encrypted with $PEER_KEY_PASSPHRASE)\n")
    load_key(tmp_path / "a" / "identity" / "key.pem", b"s3cret")
    with pytest.raises(IdentityError, match=f"passphrase is required .*{PASSPHRASE_VARIABLE}"):
        load_key(tmp_path / "a" / "identity" / "key.pem", None)
    monkeypatch.setenv(PASSPHRASE_VARIABLE, "")
    code, _, err = keygen(capsys, "--data-dir", str(tmp_path / "b"))
    assert (code, err) == (
        2,
        f"peer: {PASSPHRASE_VARIABLE} is set but empty: unset it for a key without a passphrase\n",
    )
    monkeypatch.delenv(PASSPHRASE_VARIABLE)
    code = cli.main(["keygen", "--bits", "1024", "--data-dir", str(tmp_path / "c")])
    assert code == 2
    assert "RSA key size must be 2048..16384 bits, got 1024" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "c" / "identity" / "key.pem")
