"""DPoP (RFC 9449, MCP's SEP-1932): a client's proof-of-possession key, the fresh proof each request carries, nonces.

A token bound to a key (``token_type`` ``DPoP``, the key's thumbprint in its ``cnf.jkt``) is worth nothing without
the private key: every request that presents it, and every token request that obtains or refreshes it, carries a
new proof signed with that key (``typ: dpop+jwt``, the public key in ``jwk``; a fresh ``jti``, ``iat``, the method
``htm`` and the URL ``htu`` without query or fragment; ``ath``, the token's hash, on requests to the MCP server).
Signing and key formats are PyJWT's and ``cryptography``'s (ES256 on P-256): nothing of JOSE is written here.

Nonces (RFC 9449 §8, §9): the authorization server's ``400 use_dpop_nonce`` and the MCP server's ``401`` with
``error="use_dpop_nonce"`` each give one in the ``DPoP-Nonce`` header; it is kept per origin (what the server gave
last, in this process's memory) and put in the following proofs to that origin. A header that is not a nonce (RFC
9449 §8.1's characters, at most :data:`MAX_NONCE`) is refused with one error naming it. How often a request is
sent again for a nonce is its caller's bound (once), never this module's. An authorization server that takes no ES256
proof says so in its refusal (``invalid_dpop_proof``), which the token request reports.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mcp_temporal_tasks.activities.wire.auth.base import NoToken
from mcp_temporal_tasks.protocol.tasks import redact_url

#: The one signing algorithm of our keys: the one MCP's DPoP extension and the suite expect first, and the
#: smallest key and proof of RFC 9449's asymmetric algorithms.
ALG = "ES256"
#: A ``DPoP-Nonce`` longer than this is garbage (real ones are tens of characters).
MAX_NONCE = 512
#: RFC 9449 §8.1: ``nonce = 1*NQCHAR`` (visible ASCII without ``"`` and ``\``).
_NONCE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
#: Origins whose nonce is kept: an MCP server and its authorization server per token source, with room to spare.
MAX_ORIGINS = 16


def htu(url: str) -> str:
    """The proof's ``htu``: the request's URL without query and fragment (RFC 9449 §4.2), nor any user info."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", "", ""))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}".lower()


def ath(access_token: str) -> str:
    """The proof's ``ath``: the access token's SHA-256, base64url without padding (RFC 9449 §4.2)."""
    return base64.urlsafe_b64encode(hashlib.sha256(access_token.encode("ascii")).digest()).rstrip(b"=").decode()


class DpopKey:
    """One client's DPoP key pair (P-256). Its private half lives where the token bound to it lives: a service
    client's in its token source's memory, a subject's grant's in the token store's encrypted record."""

    def __init__(self, private_key: Any) -> None:
        from jwt.algorithms import ECAlgorithm

        self._key = private_key
        #: The public key as a JWK (RFC 7517): what every proof's header carries.
        self.public_jwk: dict[str, str] = {
            k: v for k, v in ECAlgorithm.to_jwk(private_key.public_key(), as_dict=True).items() if k in _PUBLIC
        }

    @classmethod
    def generate(cls) -> DpopKey:
        from cryptography.hazmat.primitives.asymmetric import ec

        return cls(ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def from_jwk(cls, jwk: Mapping[str, Any]) -> DpopKey:
        """The key a token store record keeps (:meth:`private_jwk`)."""
        from cryptography.hazmat.primitives.asymmetric import ec
        from jwt.algorithms import ECAlgorithm

        try:
            key = ECAlgorithm.from_jwk(dict(jwk))
        except Exception:  # PyJWT: InvalidKeyError, or whatever a damaged JWK makes it raise
            raise NoToken("the grant's stored DPoP key does not load") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
            raise NoToken("the grant's stored DPoP key is not a P-256 private key")
        return cls(key)

    def private_jwk(self) -> dict[str, str]:
        """The key pair as a JWK, private part included: for the token store's encrypted record only."""
        from jwt.algorithms import ECAlgorithm

        jwk = ECAlgorithm.to_jwk(self._key, as_dict=True)
        return {k: v for k, v in jwk.items() if k in (*_PUBLIC, "d")}

    def proof(self, method: str, url: str, *, access_token: str | None = None, nonce: str | None = None) -> str:
        """A new proof for one request: never sent twice (its ``jti`` is fresh, 128 random bits)."""
        import jwt

        claims: dict[str, Any] = {
            "jti": secrets.token_urlsafe(16),
            "htm": method.upper(),
            "htu": htu(url),
            "iat": int(time.time()),
        }
        if access_token is not None:
            claims["ath"] = ath(access_token)
        if nonce is not None:
            claims["nonce"] = nonce
        return jwt.encode(claims, self._key, algorithm=ALG, headers={"typ": "dpop+jwt", "jwk": self.public_jwk})


_PUBLIC = ("kty", "crv", "x", "y")


def check_nonce(value: str | None, where: str) -> str:
    """The ``DPoP-Nonce`` header's value, if it is one; else the one error that names what is wrong."""
    if value is None or not value:
        raise NoToken(f"{where} asked for a DPoP nonce (use_dpop_nonce) without sending one in a DPoP-Nonce header")
    if len(value) > MAX_NONCE:
        raise NoToken(f"{where} sent a DPoP-Nonce header of {len(value)} characters (at most {MAX_NONCE} are taken)")
    if _NONCE.fullmatch(value) is None:
        raise NoToken(f"{where} sent a DPoP-Nonce header that is not a nonce (RFC 9449 §8.1: visible ASCII, no quote)")
    return value


class Prover:
    """Proofs of one key, with the nonces its servers gave (per origin, the last one each gave; bounded)."""

    def __init__(self, key: DpopKey, nonces: OrderedDict[str, str] | None = None) -> None:
        self.key = key
        #: Shared by the provers of one token source: a new key (a new grant) keeps the servers' nonces.
        self.nonces: OrderedDict[str, str] = nonces if nonces is not None else OrderedDict()

    def proof(self, method: str, url: str, *, access_token: str | None = None) -> str:
        return self.key.proof(method, url, access_token=access_token, nonce=self.nonces.get(_origin(url)))

    def nonce_for(self, url: str) -> str | None:
        return self.nonces.get(_origin(url))

    def take_nonce(self, url: str, headers: Mapping[str, str]) -> str:
        """The nonce a ``use_dpop_nonce`` answer from ``url``'s server gave, kept for its next proofs; raises
        :class:`NoToken` when the answer carries none, or garbage."""
        nonce = check_nonce(headers.get("dpop-nonce"), f"the server at {redact_url(url)}")
        self._keep(url, nonce)
        return nonce

    def note_nonce(self, url: str, headers: Mapping[str, str]) -> None:
        """A nonce a successful answer offers for the next requests (RFC 9449 §8.2, §9): kept when it is one,
        ignored when it is not (the answer itself stands; a later challenge says what is wrong)."""
        value = headers.get("dpop-nonce")
        if value and len(value) <= MAX_NONCE and _NONCE.fullmatch(value):
            self._keep(url, value)

    def _keep(self, url: str, nonce: str) -> None:
        origin = _origin(url)
        self.nonces[origin] = nonce
        self.nonces.move_to_end(origin)
        while len(self.nonces) > MAX_ORIGINS:
            self.nonces.popitem(last=False)
