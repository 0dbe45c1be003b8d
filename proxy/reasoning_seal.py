"""Sealed reasoning: ``encrypted_content`` that only crossfeed replicas holding the key can open.

A stateless client (Codex sends ``store: false`` and ``include: ["reasoning.encrypted_content"]``)
gets the reasoning text back on its next turn only as the opaque ``encrypted_content`` of the
reasoning item. crossfeed seals the text with AES-256-GCM (authenticated: a forged or altered
token fails to open and is ignored), so any replica configured with the same key can replay it
to the backend. The key comes from the environment variable named in ``[reasoning] key_env``
(any string; SHA-256 makes it 32 bytes). Without one, a random key is made per process: replay
then works only against the process that produced the token.

Token: ``cf1.`` + urlsafe-base64(12-byte nonce + ciphertext+tag).
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_PREFIX = "cf1."
_AAD = b"crossfeed-reasoning-v1"


class ReasoningSeal:
    __slots__ = ("_aead", "from_env")

    def __init__(self, secret: str | None) -> None:
        self.from_env = bool(secret)
        key = hashlib.sha256(secret.encode()).digest() if secret else AESGCM.generate_key(bit_length=256)
        self._aead = AESGCM(key)

    def seal(self, text: str) -> str:
        nonce = os.urandom(12)
        blob = nonce + self._aead.encrypt(nonce, text.encode("utf-8"), _AAD)
        return _PREFIX + base64.urlsafe_b64encode(blob).decode("ascii")

    def reveal(self, token: str) -> str | None:
        """The reasoning text, or None when the token is not ours, altered, or sealed with another key."""
        if not isinstance(token, str) or not token.startswith(_PREFIX):
            return None
        try:
            blob = base64.urlsafe_b64decode(token[len(_PREFIX):].encode("ascii"))
            if len(blob) < 28:
                return None
            return self._aead.decrypt(blob[:12], blob[12:], _AAD).decode("utf-8")
        except (InvalidTag, ValueError, UnicodeError):
            return None
