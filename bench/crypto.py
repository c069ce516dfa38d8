"""Rates of the identity primitives, secure identification and TLS 1.3 handshakes.

    python -m bench.crypto [--seconds 2] [--json]

Measured in one process, on in-memory buffers (no sockets), so the figures are the CPU cost a
super-peer pays per operation:

* RSA-PSS sign and verify of a 200-byte transcript, 2048 and 3072-bit keys;
* a whole secure identification (challenge, signed response, verification, registry look-up,
  answer) with the pure ``Prover``/``Verifier``, beside the bare sign + verify it is built on
  (the baseline: the ratio is what the protocol adds to the cryptography);
* TLS 1.3 handshakes between two ``ssl`` objects over memory BIOs: mutual (a super-peer link), a
  peer verifying the network CA, a peer pinning the server's key; RSA-2048 and RSA-3072 certificates.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import ssl
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from crypto import (
    MemoryRegistry,
    PeerRecord,
    PrivateIdentifier,
    Prover,
    Verifier,
    client_context,
    fingerprint,
    generate_private_key,
    hash_private_identifier,
    init_ca,
    issue_certificate,
    peer_client_context,
    public_identifier,
    public_key_der,
    save_certificate,
    save_private_key,
    server_context,
    sign_transcript,
    verify_transcript,
)

TRANSCRIPT = b"t" * 200


def rate(function: Callable[[], object], seconds: float) -> float:
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        function()
        count += 1
    return count / elapsed


def sign_and_verify(key, public) -> None:
    verify_transcript(public, sign_transcript(key, TRANSCRIPT), TRANSCRIPT)


def identification_round_trip(
    peer_key, server_fingerprint: str, registry: MemoryRegistry, private_id: PrivateIdentifier
) -> None:
    verifier = Verifier(
        node_id="sp-a", fingerprint=server_fingerprint, registry=registry, address="x:1"
    )
    prover = Prover(
        peer_key,
        verifier_fingerprint=server_fingerprint,
        verifier_node_id="sp-a",
        private_identifier=private_id,
        issued_by="sp-a",
    )
    [send] = prover.receive(verifier.challenge(0.0))
    accepted, _event = verifier.receive(send.message, 0.0)
    prover.receive(accepted.message)


def tls_handshake(client_context_: ssl.SSLContext, server_context_: ssl.SSLContext) -> None:
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context_.wrap_bio(client_in, client_out, server_hostname="127.0.0.1")
    server = server_context_.wrap_bio(server_in, server_out, server_side=True)
    while client.version() is None or server.version() is None:
        for side in (client, server):
            if side.version() is None:
                with contextlib.suppress(ssl.SSLWantReadError):
                    side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    client.write(b"x")  # the server verifies a client certificate only when data flows
    server_in.write(client_out.read())
    if server.read(1) != b"x":
        raise RuntimeError("the handshake did not complete")


def measure(seconds: float) -> dict[str, float]:
    figures: dict[str, float] = {}
    for bits in (2048, 3072):
        key = generate_private_key(bits)
        public = key.public_key()
        signature = sign_transcript(key, TRANSCRIPT)
        figures[f"rsa{bits}_sign_per_s"] = rate(partial(sign_transcript, key, TRANSCRIPT), seconds)
        figures[f"rsa{bits}_verify_per_s"] = rate(
            partial(verify_transcript, public, signature, TRANSCRIPT), seconds
        )
        figures[f"rsa{bits}_sign_and_verify_per_s"] = rate(
            partial(sign_and_verify, key, public), seconds
        )

    server_fingerprint = fingerprint(generate_private_key(3072))
    for bits in (2048, 3072):
        peer_key = generate_private_key(bits)
        registry, private_id = MemoryRegistry(), PrivateIdentifier.generate()
        public_id = public_identifier(peer_key)
        registry.add(
            PeerRecord(
                public_id=public_id,
                public_key=public_key_der(peer_key),
                private_id_hash=hash_private_identifier(private_id, public_id),
                address="x:1",
            )
        )
        figures[f"identification_rsa{bits}_per_s"] = rate(
            partial(identification_round_trip, peer_key, server_fingerprint, registry, private_id),
            seconds,
        )

    for bits in (2048, 3072):
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            init_ca(root / "ca", name="bench", key=generate_private_key(bits))
            files = {}
            for node in ("sp-a", "sp-b"):
                key = generate_private_key(bits)
                save_private_key(key, root / f"{node}.key")
                certificate = issue_certificate(root / "ca", node_key=key, node_id=node)
                save_certificate(certificate, root / f"{node}.pem")
                files[node] = {
                    "certificate": root / f"{node}.pem",
                    "key": root / f"{node}.key",
                    "ca": root / "ca" / "ca-cert.pem",
                }
            server = server_context(**files["sp-a"])
            clients = {
                "mutual": client_context(**files["sp-b"]),
                "peer_ca": peer_client_context(ca=root / "ca" / "ca-cert.pem"),
                # the pin itself is checked after the handshake, by the caller: not included
                "peer_pinned": peer_client_context(pinned_fingerprint="pk1-" + "a" * 52),
            }
            for name, context in clients.items():
                figures[f"tls_{name}_rsa{bits}_per_s"] = rate(
                    partial(tls_handshake, context, server), seconds
                )
    for bits in (2048, 3072):
        figures[f"identification_rsa{bits}_vs_sign_and_verify"] = (
            figures[f"identification_rsa{bits}_per_s"] / figures[f"rsa{bits}_sign_and_verify_per_s"]
        )
    return {name: round(value, 2) for name, value in figures.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per figure")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    figures = measure(args.seconds)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{'operation':<48}{'RSA-2048':>12}{'RSA-3072':>12}")
    rows = [
        ("sign (RSA-PSS, 200 B)/s", "rsa{}_sign_per_s"),
        ("verify/s", "rsa{}_verify_per_s"),
        ("sign + verify/s (baseline)", "rsa{}_sign_and_verify_per_s"),
        ("secure identification round trips/s", "identification_rsa{}_per_s"),
        ("  ratio to the baseline", "identification_rsa{}_vs_sign_and_verify"),
        ("TLS 1.3 handshakes/s, mutual (backbone)", "tls_mutual_rsa{}_per_s"),
        ("TLS 1.3 handshakes/s, peer verifying the CA", "tls_peer_ca_rsa{}_per_s"),
        ("TLS 1.3 handshakes/s, peer pinning the key", "tls_peer_pinned_rsa{}_per_s"),
    ]
    for label, key in rows:
        print(f"{label:<48}{figures[key.format(2048)]:>12,.2f}{figures[key.format(3072)]:>12,.2f}")


if __name__ == "__main__":
    main()
