"""Sealed reasoning: ``encrypted_content`` that only crossfeed replicas holding the key can open.

A stateless client (Codex sends ``store: false`` and ``include: ["reasoning.encrypted_content"]``)
gets the reasoning text back on its next turn only as the opaque ``encrypted_content`` of the
reasoning item. crossfeed seals the text with AES-256-GCM (authenticated: a forged or altered
token fails to open and is ignored), so any replica configured with the same key can replay it
to the backend. The key comes from the environment variable named in ``[reasoning] key_env``
(any string; SHA-256 makes it 32 bytes). Without one, a random key is made per process: replay
then works only against the process that produced the token.

Token: ``cf1.`` + urlsafe-base64(12-byte nonce + ciphertext+tag), the plaintext the reasoning
text. When the backend also sent ``reasoning_details`` (OpenRouter and others: Gemini's thought
signatures, Claude's signed thinking, o3's and Grok's encrypted reasoning), which the backend wants
back on the next turn of a tool-calling conversation, the token is ``cf2.`` and the plaintext
the JSON object ``{"text": ..., "details": [...]}`` (its own associated data, so neither kind
can pass for the other).

Codex resends its whole history every turn, so the same tokens come back turn after turn: what a
token opened to is kept (``OPENED_BYTES`` at most, oldest first out), and a token this process
sealed is known from the start. A token is only ever one text (the nonce makes each one unique,
and the tag proves it unaltered), so the kept answer is the answer; what is kept is what the
process sealed or opened anyway, beside the key that opens it.

A compaction item's ``encrypted_content`` (translators/forward/compaction.py) is sealed the same way:
``cfc1.`` + the sealed summary text, with associated data of its own, so a reasoning token cannot
pass for a summary nor a summary for reasoning.
"""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_PREFIX = "cf1."
_AAD = b"crossfeed-reasoning-v1"
_PREFIX_DETAILS = "cf2."
_AAD_DETAILS = b"crossfeed-reasoning-v2"
_PREFIX_COMPACTION = "cfc1."
_AAD_COMPACTION = b"crossfeed-compaction-v1"


OPENED_BYTES = 16 * 1024 * 1024  # the most token and text characters kept of opened reasoning tokens

Opened = tuple[str, list[dict[str, Any]]]


class ReasoningSeal:
    __slots__ = ("_aead", "from_env", "_opened", "_opened_size")

    def __init__(self, secret: str | None) -> None:
        self.from_env = bool(secret)
        key = hashlib.sha256(secret.encode()).digest() if secret else AESGCM.generate_key(bit_length=256)
        self._aead = AESGCM(key)
        self._opened: dict[str, Opened] = {}  # token -> what it opens to (insertion order: oldest first)
        self._opened_size = 0

    def seal(self, text: str, details: list[dict[str, Any]] | None = None) -> str:
        """The opaque token of the reasoning ``text`` and the backend's ``details`` (if any)."""
        if details:
            token = self._seal(_PREFIX_DETAILS, orjson.dumps({"text": text, "details": details}), _AAD_DETAILS)
        else:
            token = self._seal(_PREFIX, text.encode("utf-8"), _AAD)
        self._keep(token, (text, [dict(d) for d in details] if details else []))
        return token

    def _keep(self, token: str, opened: Opened) -> None:
        size = len(token) + len(opened[0])
        if size > OPENED_BYTES // 4:
            return
        kept = self._opened
        while kept and self._opened_size + size > OPENED_BYTES:
            old_token = next(iter(kept))
            old = kept.pop(old_token)
            self._opened_size -= len(old_token) + len(old[0])
        kept[token] = opened
        self._opened_size += size

    def _seal(self, prefix: str, plain: bytes, aad: bytes) -> str:
        nonce = os.urandom(12)
        blob = nonce + self._aead.encrypt(nonce, plain, aad)
        return prefix + base64.urlsafe_b64encode(blob).decode("ascii")

    def open(self, token: str) -> Opened | None:
        """(reasoning text, backend details), or None when the token is not ours, altered, or
        sealed with another key. The details are the caller's own copies."""
        if not isinstance(token, str):
            return None
        kept = self._opened.get(token)
        if kept is None:
            opened = self._open_token(token)
            if opened is None:
                return None
            self._keep(token, opened)
            kept = opened
        text, details = kept
        return text, [dict(d) for d in details] if details else []

    def _open_token(self, token: str) -> Opened | None:
        if token.startswith(_PREFIX):
            plain = self._open(token[len(_PREFIX) :], _AAD)
            try:
                return None if plain is None else (plain.decode("utf-8"), [])
            except UnicodeError:
                return None
        if token.startswith(_PREFIX_DETAILS):
            plain = self._open(token[len(_PREFIX_DETAILS) :], _AAD_DETAILS)
            if plain is None:
                return None
            try:
                payload = orjson.loads(plain)
            except orjson.JSONDecodeError:
                return None
            if not isinstance(payload, dict):
                return None
            text, details = payload.get("text"), payload.get("details")
            if not isinstance(text, str) or not isinstance(details, list):
                return None
            return text, [d for d in details if isinstance(d, dict)]
        return None

    def seal_summary(self, summary: str, owner: str = "") -> str:
        """The ``encrypted_content`` of a compaction item holding ``summary``, bound to the
        inbound key's name ``owner`` (its associated data): no other key's requests open it."""
        return self._seal(_PREFIX_COMPACTION, summary.encode("utf-8"), _AAD_COMPACTION + owner.encode())

    def open_summary(self, token: str, owner: str = "") -> str | None:
        """The summary a compaction token holds, or None when it is not crossfeed's, altered,
        sealed with another key, or made for another inbound key's requests."""
        if not isinstance(token, str) or not token.startswith(_PREFIX_COMPACTION):
            return None
        plain = self._open(token[len(_PREFIX_COMPACTION) :], _AAD_COMPACTION + owner.encode())
        try:
            return None if plain is None else plain.decode("utf-8")
        except UnicodeError:
            return None

    def reveal(self, token: str) -> str | None:
        """The reasoning text, or None when the token is not ours, altered, or sealed with another key."""
        opened = self.open(token)
        return None if opened is None else opened[0]

    def _open(self, body: str, aad: bytes) -> bytes | None:
        try:
            blob = base64.urlsafe_b64decode(body.encode("ascii"))
            if len(blob) < 28:
                return None
            return self._aead.decrypt(blob[:12], blob[12:], aad)
        except (InvalidTag, ValueError):
            return None
