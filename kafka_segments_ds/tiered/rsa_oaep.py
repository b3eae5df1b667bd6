"""RSA-OAEP with SHA3-512 (digest and MGF1), RFC 8017 §7.1, as Aiven's plugin wraps data keys
(BouncyCastle ``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding``, empty label).

The ``cryptography`` package parses the PEM keys but refuses SHA3 digests in OAEP, so the
padding is done here over the raw RSA operation (Python integers; one unwrap per segment).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

H_LEN = 64  # SHA3-512
_EMPTY_LABEL_HASH = hashlib.sha3_512(b"").digest()


class OaepError(ValueError):
    """The ciphertext does not decode under this key (another key pair, or damaged)."""


def _mgf1(seed: bytes, length: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.sha3_512(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return bytes(out[:length])


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def oaep_decrypt(private_key: Any, ciphertext: bytes) -> bytes:
    """Decrypt with a ``cryptography`` RSA private key (its numbers; CRT)."""
    numbers = private_key.private_numbers()
    n = numbers.public_numbers.n
    k = (n.bit_length() + 7) // 8
    if len(ciphertext) != k or k < 2 * H_LEN + 2:
        raise OaepError(f"wrapped key of {len(ciphertext)} bytes for a {k}-byte RSA modulus")
    c = int.from_bytes(ciphertext, "big")
    if c >= n:
        raise OaepError("wrapped key is not below the RSA modulus")
    m1 = pow(c, numbers.dmp1, numbers.p)
    m2 = pow(c, numbers.dmq1, numbers.q)
    m = m2 + numbers.q * ((numbers.iqmp * (m1 - m2)) % numbers.p)
    em = m.to_bytes(k, "big")
    masked_seed, masked_db = em[1 : 1 + H_LEN], em[1 + H_LEN :]
    seed = _xor(masked_seed, _mgf1(masked_db, H_LEN))
    db = _xor(masked_db, _mgf1(seed, k - H_LEN - 1))
    rest = db[H_LEN:].lstrip(b"\x00")
    if em[0] != 0 or not hmac.compare_digest(db[:H_LEN], _EMPTY_LABEL_HASH) or rest[:1] != b"\x01":
        raise OaepError("OAEP padding does not check out (another key pair, or damaged)")
    return rest[1:]


def oaep_encrypt(public_key: Any, message: bytes, seed: bytes) -> bytes:
    """Encrypt ``message`` with a ``cryptography`` RSA public key and a ``seed`` of 64 random
    bytes (to write test buckets)."""
    numbers = public_key.public_numbers()
    k = (numbers.n.bit_length() + 7) // 8
    if len(message) > k - 2 * H_LEN - 2 or len(seed) != H_LEN:
        raise ValueError("message too long for the key, or seed not 64 bytes")
    db = _EMPTY_LABEL_HASH + b"\x00" * (k - len(message) - 2 * H_LEN - 2) + b"\x01" + message
    masked_db = _xor(db, _mgf1(seed, k - H_LEN - 1))
    masked_seed = _xor(seed, _mgf1(masked_db, H_LEN))
    m = int.from_bytes(b"\x00" + masked_seed + masked_db, "big")
    encrypted: int = pow(m, numbers.e, numbers.n)
    return encrypted.to_bytes(k, "big")
