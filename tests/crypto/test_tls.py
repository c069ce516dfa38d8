"""The network CA, certificates, and real TLS 1.3 handshakes in memory (no sockets)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import stat

import pytest
import trio
import trio.testing
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from crypto import (
    CertificateError,
    KeyFileError,
    KeyPolicyError,
    check_peer_node_id,
    check_pinned,
    check_pinned_connection,
    client_context,
    fingerprint,
    init_ca,
    issue_certificate,
    load_certificate,
    node_id_of,
    peer_client_context,
    peer_fingerprint,
    public_identifier,
    save_certificate,
    server_context,
    verified_peer_certificate_node_id,
)
from crypto.keys import generate_private_key
from crypto.tls import CA_CERT_FILE, CA_KEY_FILE

from .conftest import NodeFiles


class HandshakeFailed(Exception):
    def __init__(self, side: str, error: ssl.SSLError) -> None:
        super().__init__(f"{side}: {error}")
        self.side = side
        self.error = error


def handshake(client_context_, server_context_, hostname="127.0.0.1"):
    """A TLS handshake between two ``SSLObject``s over memory BIOs, then one record each way (in
    TLS 1.3 the server checks the client's certificate after the client has finished, so a
    refusal reaches the client with its first read)."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context_.wrap_bio(client_in, client_out, server_hostname=hostname)
    server = server_context_.wrap_bio(server_in, server_out, server_side=True)

    def step(side, call):
        try:
            return call()
        except ssl.SSLWantReadError:
            return None
        except ssl.SSLError as error:
            raise HandshakeFailed(side, error) from error

    def pump():
        server_in.write(client_out.read())
        client_in.write(server_out.read())

    for _ in range(10):
        for side, obj in (("client", client), ("server", server)):
            if obj.version() is None:  # None until this side's handshake is complete
                step(side, obj.do_handshake)
        pump()
        if client.version() is not None and server.version() is not None:
            break
    client.write(b"ping")
    pump()
    assert step("server", lambda: server.read(4)) == b"ping"
    server.write(b"pong")
    pump()
    assert step("client", lambda: client.read(4)) == b"pong"
    return client, server


def backbone_pair(server: NodeFiles, client: NodeFiles):
    return (
        client_context(certificate=client.cert_path, key=client.key_path, ca=client.ca_path),
        server_context(certificate=server.cert_path, key=server.key_path, ca=server.ca_path),
    )


# -- the CA and certificates ----------------------------------------------------------------------


def test_init_ca_writes_a_0600_key_and_a_ca_certificate(ca_dir):
    assert stat.S_IMODE(os.stat(ca_dir / CA_KEY_FILE).st_mode) == 0o600
    ca = load_certificate(ca_dir / CA_CERT_FILE)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value.ca
    assert constraints.value.path_length == 0
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign
    assert usage.crl_sign
    assert not usage.digital_signature
    assert ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    assert ca.subject == ca.issuer
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "test network CA"
    ca.verify_directly_issued_by(ca)


def test_init_ca_refuses_to_replace_a_ca(ca_dir):
    before = (ca_dir / CA_KEY_FILE).read_bytes()
    with pytest.raises(CertificateError, match="already initialised; refusing to replace it"):
        init_ca(ca_dir, name="again", key=generate_private_key(2048))
    assert (ca_dir / CA_KEY_FILE).read_bytes() == before


def test_a_ca_key_can_be_passphrase_protected(tmp_path, peer_key):
    init_ca(tmp_path, name="protected", passphrase=b"ca-pass", key=generate_private_key(2048))
    assert (tmp_path / CA_KEY_FILE).read_bytes().startswith(b"-----BEGIN ENCRYPTED")
    with pytest.raises(KeyFileError, match="passphrase is required"):
        issue_certificate(tmp_path, node_key=peer_key, node_id="n")
    certificate = issue_certificate(
        tmp_path, node_key=peer_key, node_id="n", ca_passphrase=b"ca-pass"
    )
    certificate.verify_directly_issued_by(load_certificate(tmp_path / CA_CERT_FILE))


def test_a_node_certificate_names_the_node_its_hosts_and_its_uses(ca_dir, node_a):
    ca = load_certificate(ca_dir / CA_CERT_FILE)
    certificate = load_certificate(node_a.cert_path)
    certificate.verify_directly_issued_by(ca)
    assert node_id_of(certificate) == "sp-a"
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "sp-a"
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == [
        "urn:semantic-pubsub:node:sp-a"
    ]
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    authority = certificate.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    subject_key = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert authority.key_identifier == subject_key.digest
    assert fingerprint(certificate) == fingerprint(node_a.key) == public_identifier(node_a.key)


def test_node_ids_are_percent_encoded_in_the_uri(ca_dir, peer_key):
    certificate = issue_certificate(ca_dir, node_key=peer_key, node_id="sp 1/é:x", hosts=[])
    assert node_id_of(certificate) == "sp 1/é:x"


def test_a_certificate_never_outlives_its_ca(ca_dir, peer_key):
    ca = load_certificate(ca_dir / CA_CERT_FILE)
    certificate = issue_certificate(
        ca_dir, node_key=peer_key.public_key(), node_id="n", days=100_000
    )
    assert certificate.not_valid_after_utc == ca.not_valid_after_utc
    now = datetime.datetime(2030, 6, 1, tzinfo=datetime.UTC)
    dated = issue_certificate(ca_dir, node_key=peer_key, node_id="n", days=10, now=now)
    assert dated.not_valid_after_utc == now + datetime.timedelta(days=10)
    assert dated.not_valid_before_utc < now


@pytest.mark.parametrize("node_id", ["", " sp", "x" * 65, "a\nb", "tab\there"])
def test_a_node_id_a_certificate_cannot_carry_is_refused(ca_dir, peer_key, node_id):
    with pytest.raises(CertificateError, match="node id"):
        issue_certificate(ca_dir, node_key=peer_key, node_id=node_id)


@pytest.mark.parametrize("host", ["", "-bad", "under_score", "spaces here", "ünicode"])
def test_a_host_that_is_neither_ip_nor_dns_is_refused(ca_dir, peer_key, host):
    with pytest.raises(CertificateError, match="neither an IP address nor an ASCII DNS name"):
        issue_certificate(ca_dir, node_key=peer_key, node_id="n", hosts=[host])


def test_a_weak_node_key_gets_no_certificate(ca_dir):
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(KeyPolicyError):
        issue_certificate(ca_dir, node_key=weak, node_id="n")


def test_certificate_files(tmp_path, node_a):
    certificate = load_certificate(node_a.cert_path)
    path = save_certificate(certificate, tmp_path / "c.pem")
    assert load_certificate(path) == certificate
    with pytest.raises(CertificateError, match="already exists"):
        save_certificate(certificate, path)
    with pytest.raises(CertificateError, match="cannot read certificate"):
        load_certificate(tmp_path / "absent.pem")
    (tmp_path / "junk.pem").write_text("junk")
    with pytest.raises(CertificateError, match="not a PEM certificate"):
        load_certificate(tmp_path / "junk.pem")


# -- contexts -------------------------------------------------------------------------------------


def test_contexts_are_tls_1_3_only(node_a):
    for context in (*backbone_pair(node_a, node_a), peer_client_context(ca=node_a.ca_path)):
        assert context.minimum_version is ssl.TLSVersion.TLSv1_3
        assert context.verify_flags & ssl.VERIFY_X509_STRICT


def test_context_files_are_checked_with_clear_errors(tmp_path, node_a, node_b):
    with pytest.raises(CertificateError, match="do not go together"):
        server_context(certificate=node_a.cert_path, key=node_b.key_path, ca=node_a.ca_path)
    loose = tmp_path / "loose.key"
    loose.write_bytes(node_a.key_path.read_bytes())
    loose.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        client_context(certificate=node_a.cert_path, key=loose, ca=node_a.ca_path)
    with pytest.raises(CertificateError, match="cannot read certificate"):
        peer_client_context(ca=tmp_path / "absent.pem")
    with pytest.raises(ValueError, match="exactly one"):
        peer_client_context()
    with pytest.raises(ValueError, match="exactly one"):
        peer_client_context(ca=node_a.ca_path, pinned_fingerprint=fingerprint(node_a.key))
    with pytest.raises(CertificateError, match="pinned_fingerprint"):
        peer_client_context(pinned_fingerprint="sha256:abcd")


# -- handshakes over memory BIOs ------------------------------------------------------------------


def test_mutual_tls_between_super_peers(node_a, node_b):
    client, server = handshake(*backbone_pair(server=node_a, client=node_b))
    assert client.version() == server.version() == "TLSv1.3"
    assert verified_peer_certificate_node_id(server) == "sp-b"
    assert verified_peer_certificate_node_id(client) == "sp-a"
    check_peer_node_id(client, "sp-a")
    with pytest.raises(
        CertificateError, match="expected node 'sp-c', the other end is node 'sp-a'"
    ):
        check_peer_node_id(client, "sp-c")


def test_a_super_peer_certificate_from_another_ca_is_refused(node_a, intruder):
    """The intruder claims a member's node id, but the network CA did not sign its certificate."""
    client = client_context(
        certificate=intruder.cert_path, key=intruder.key_path, ca=node_a.ca_path
    )
    server = server_context(certificate=node_a.cert_path, key=node_a.key_path, ca=node_a.ca_path)
    with pytest.raises(HandshakeFailed) as caught:
        handshake(client, server)
    assert caught.value.side == "server"
    assert "certificate verify failed" in str(caught.value.error)


def test_a_server_certificate_from_another_ca_is_refused(node_a, intruder):
    fake_server = server_context(
        certificate=intruder.cert_path, key=intruder.key_path, ca=intruder.ca_path
    )
    for client in (
        client_context(certificate=node_a.cert_path, key=node_a.key_path, ca=node_a.ca_path),
        peer_client_context(ca=node_a.ca_path),
    ):
        with pytest.raises(HandshakeFailed) as caught:
            handshake(client, fake_server)
        assert caught.value.side == "client"
        assert isinstance(caught.value.error, ssl.SSLCertVerificationError)


def test_the_client_checks_the_host_it_dialled(node_a, node_b):
    with pytest.raises(HandshakeFailed) as caught:
        handshake(*backbone_pair(server=node_a, client=node_b), hostname="192.0.2.1")
    assert isinstance(caught.value.error, ssl.SSLCertVerificationError)
    handshake(*backbone_pair(server=node_a, client=node_b), hostname="localhost")


def test_a_peer_without_certificate_verifies_its_access_point_through_the_ca(node_a):
    server = server_context(certificate=node_a.cert_path, key=node_a.key_path, ca=node_a.ca_path)
    client, server_side = handshake(peer_client_context(ca=node_a.ca_path), server)
    assert verified_peer_certificate_node_id(server_side) is None  # a peer: role by signature
    assert server_side.getpeercert(binary_form=True) is None
    assert verified_peer_certificate_node_id(client) == "sp-a"
    assert peer_fingerprint(client) == fingerprint(node_a.key)
    with pytest.raises(CertificateError, match="no CA-verified node certificate"):
        check_peer_node_id(server_side, "sp-b")


def test_a_peer_pinning_the_right_key_connects(node_a):
    server = server_context(certificate=node_a.cert_path, key=node_a.key_path, ca=node_a.ca_path)
    pin = fingerprint(node_a.key)
    client, _ = handshake(peer_client_context(pinned_fingerprint=pin), server, hostname="anything")
    check_pinned_connection(client, pin)
    check_pinned_connection(client, pin.upper())
    assert verified_peer_certificate_node_id(client) is None  # pinned, not CA-verified


def test_a_peer_pinning_another_key_refuses_the_server(node_a, node_b, intruder):
    pin = fingerprint(node_b.key)
    for server_files in (node_a, intruder):
        server = server_context(
            certificate=server_files.cert_path, key=server_files.key_path, ca=server_files.ca_path
        )
        client, _ = handshake(peer_client_context(pinned_fingerprint=pin), server)
        with pytest.raises(CertificateError, match="not the pinned"):
            check_pinned_connection(client, pin)


def test_check_pinned_refuses_what_is_not_a_certificate(node_a):
    pin = fingerprint(node_a.key)
    with pytest.raises(CertificateError, match="sent no certificate"):
        check_pinned(None, pin)
    with pytest.raises(CertificateError, match="does not parse"):
        check_pinned(b"\x30\x00", pin)
    with pytest.raises(CertificateError, match="pinned fingerprint"):
        check_pinned(load_certificate(node_a.cert_path).public_bytes(Encoding.DER), "pk1-x")


def test_tls_1_2_is_refused_both_ways(node_a, node_b):
    _, server = backbone_pair(server=node_a, client=node_b)
    old_client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old_client.load_verify_locations(node_b.ca_path)
    old_client.load_cert_chain(node_b.cert_path, node_b.key_path)
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(HandshakeFailed) as caught:
        handshake(old_client, server)
    assert caught.value.side == "server"
    assert caught.value.error.reason == "UNSUPPORTED_PROTOCOL"
    old_server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    old_server.load_cert_chain(node_a.cert_path, node_a.key_path)
    old_server.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(HandshakeFailed) as caught:
        handshake(peer_client_context(ca=node_a.ca_path), old_server)
    assert caught.value.error.reason == "UNSUPPORTED_PROTOCOL"  # nothing in common: no 1.2


def test_plaintext_to_a_tls_server_fails(node_a):
    server_context_ = server_context(
        certificate=node_a.cert_path, key=node_a.key_path, ca=node_a.ca_path
    )
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context_.wrap_bio(incoming, outgoing, server_side=True)
    incoming.write(b"\x00\x00\x00\x20" + b"\x94\x01\xaalink.hello" + b"\x00" * 20)
    with pytest.raises(ssl.SSLError):
        server.do_handshake()
    assert server.version() is None


# -- the same over trio streams -------------------------------------------------------------------


async def test_mutual_tls_and_pinning_over_trio_ssl_streams(node_a, node_b):
    async def exchange(client_context_, server_context_, hostname="127.0.0.1"):
        left, right = trio.testing.memory_stream_pair()
        client = trio.SSLStream(left, client_context_, server_hostname=hostname)
        server = trio.SSLStream(right, server_context_, server_side=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.do_handshake)
            nursery.start_soon(server.do_handshake)
        await client.send_all(b"link.hello")
        assert await server.receive_some(100) == b"link.hello"
        return client, server

    client, server = await exchange(*backbone_pair(server=node_a, client=node_b))
    assert verified_peer_certificate_node_id(server) == "sp-b"
    check_peer_node_id(client, "sp-a")
    server_only = server_context(
        certificate=node_a.cert_path, key=node_a.key_path, ca=node_a.ca_path
    )
    pin = fingerprint(node_a.key)
    client, server = await exchange(peer_client_context(pinned_fingerprint=pin), server_only)
    check_pinned_connection(client, pin)
    assert verified_peer_certificate_node_id(server) is None
