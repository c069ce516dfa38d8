"""Errors of the ``crypto`` package, named by whose fault they are (h11's convention).

* ``KeyFileError``: a key or certificate file on this machine cannot be used (missing, unreadable,
  not PEM, wrong passphrase, wrong type, too small, readable by others). The operator fixes it; the
  message names the file and, where there is one, the command that fixes it.
* ``KeyPolicyError``: a key object (generated, loaded or received) that our policy refuses: not
  RSA, fewer bits than the minimum, more than the maximum, an unusual public exponent.
* ``IdentifierError``: text that is not a well-formed public or private identifier.
* ``CertificateError``: the network CA or a certificate is unusable (CA already initialised,
  missing files, a pinned fingerprint that does not match, a certificate without a node id).
* ``LocalProtocolError``: the local caller misused a state machine (asked for a second challenge,
  fed a message after the identification ended). Nothing was changed.
* ``RemoteProtocolError``: the other side broke the identification protocol (on the prover's side:
  a challenge for another server, an out-of-order reply). The state machine refuses further use.

The verifier never raises for what a remote peer sends: it answers ``Rejected`` and reports an
``AuthFailure`` event instead, because a remote peer must not be able to make the daemon raise.
"""

from __future__ import annotations


class CryptoError(Exception):
    """Base class of the errors of this package."""


class KeyFileError(CryptoError):
    """A key file that cannot be used; the message names the file, the problem and the fix."""


class KeyPolicyError(CryptoError, ValueError):
    """A key that our policy refuses (type, size, public exponent)."""


class IdentifierError(CryptoError, ValueError):
    """Text that is not a well-formed identifier."""


class CertificateError(CryptoError):
    """The network CA or a certificate cannot be used as asked."""


class LocalProtocolError(CryptoError):
    """The local caller asked a state machine for something it cannot do in its current state."""


class RemoteProtocolError(CryptoError):
    """The other side broke the identification protocol; the state machine is now unusable."""


class InsecurePermissionsWarning(UserWarning):
    """A secret file is accessible by group or others and was accepted only because the caller
    passed ``allow_insecure_permissions=True``."""
