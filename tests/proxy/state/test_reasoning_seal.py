"""Sealed reasoning (proxy/state/reasoning_seal.py) and its replay by the request mapping.

The contract under test, from the module's docstring:
  - token = ``cf1.`` + urlsafe-base64(12-byte nonce + AES-256-GCM ciphertext and tag);
  - the key is SHA-256 of the configured secret, so replicas with one secret read each other's
    tokens; without a secret every instance makes its own random key;
  - ``reveal`` gives the text back, or ``None`` for anything that is not a token sealed with the
    same key (altered, truncated, foreign, not a string). It never raises.
And from translators/forward/request.py: a reasoning input item whose only text is its
``encrypted_content`` is replayed, once revealed, as ``options.reasoning_field`` on the assistant
message of its turn; a token that does not reveal is skipped and listed in ``ignored``.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.proxy.state import reasoning_seal
from crossfeed.proxy.state.reasoning_seal import ReasoningSeal
from crossfeed.translators.forward.body import chat_completion_to_response
from crossfeed.translators.forward.request import responses_request_to_chat
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile

SECRET = "correct horse battery staple"
PREFIX = "cf1."
NONCE, TAG = 12, 16
# Part of the token format: tokens already in clients' histories (and those of replicas still on
# the previous release) must stay readable, so a change here has to be deliberate.
AAD = b"crossfeed-reasoning-v1"
B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_="

TEXTS = {
    "ascii": "I should list the files first.",
    "empty": "",
    "unicode": "思考中… ∑ x² — naïve café 🙂👩‍💻 \u200d\u0301 \U0001f9e0",
    "control": 'line one\nline two\ttab "quoted" \\ back\x00nul',
    "long": "".join(f"step {i}: consider option {i % 7} ✓\n" for i in range(20_000)),
}


def blob_of(token: str) -> bytes:
    assert token.startswith(PREFIX)
    return base64.urlsafe_b64decode(token[len(PREFIX) :])


def token_of(blob: bytes, prefix: str = PREFIX) -> str:
    return prefix + base64.urlsafe_b64encode(blob).decode("ascii")


def independent_token(secret: str, plaintext: bytes) -> str:
    """A token built from the documented format alone, not with ReasoningSeal."""
    nonce = os.urandom(NONCE)
    return token_of(nonce + AESGCM(hashlib.sha256(secret.encode()).digest()).encrypt(nonce, plaintext, AAD))


def flip(token: str, at: int) -> str:
    """The token with one bit of its blob flipped (negative ``at`` counts from the end)."""
    blob = bytearray(blob_of(token))
    blob[at] ^= 0x01
    return token_of(bytes(blob))


@pytest.fixture
def seal() -> ReasoningSeal:
    return ReasoningSeal(SECRET)


# -- sealing and revealing ------------------------------------------------------------------------


@pytest.mark.parametrize("text", list(TEXTS.values()), ids=list(TEXTS))
def test_round_trip(seal: ReasoningSeal, text: str) -> None:
    token = seal.seal(text)
    assert isinstance(token, str)
    assert seal.reveal(token) == text


@pytest.mark.parametrize("text", list(TEXTS.values()), ids=list(TEXTS))
def test_token_format(seal: ReasoningSeal, text: str) -> None:
    token = seal.seal(text)
    assert token.startswith(PREFIX)
    assert set(token[len(PREFIX) :]) <= set(B64_ALPHABET)  # urlsafe: safe in JSON, headers, URLs
    assert len(blob_of(token)) == NONCE + len(text.encode("utf-8")) + TAG


def test_key_is_sha256_of_the_secret(seal: ReasoningSeal) -> None:
    # A token made from the documented format by other code is readable...
    assert seal.reveal(independent_token(SECRET, b"made elsewhere")) == "made elsewhere"
    # ...and a sealed token opens with the documented key and nonce layout.
    blob = blob_of(seal.seal("opened elsewhere"))
    key = hashlib.sha256(SECRET.encode()).digest()
    assert AESGCM(key).decrypt(blob[:NONCE], blob[NONCE:], AAD) == b"opened elsewhere"


def test_each_seal_uses_a_fresh_nonce(seal: ReasoningSeal) -> None:
    tokens = {seal.seal("same text") for _ in range(20)}
    assert len(tokens) == 20
    assert len({blob_of(t)[:NONCE] for t in tokens}) == 20
    assert {seal.reveal(t) for t in tokens} == {"same text"}


@pytest.mark.parametrize("text", ["the password is hunter2", TEXTS["unicode"], "a" * 300])
def test_token_does_not_contain_the_plaintext(seal: ReasoningSeal, text: str) -> None:
    token = seal.seal(text)
    raw = text.encode("utf-8")
    assert text not in token
    assert raw not in blob_of(token)
    # The nonce is 12 bytes (a multiple of 3), so base64 of an unencrypted plaintext would appear
    # aligned in the token: rule that out too.
    assert base64.urlsafe_b64encode(raw).decode().rstrip("=")[:-4] not in token


# -- keys -----------------------------------------------------------------------------------------


def test_replicas_with_the_same_secret_read_each_other() -> None:
    a, b = ReasoningSeal(SECRET), ReasoningSeal(SECRET)
    assert a.from_env and b.from_env
    assert b.reveal(a.seal("from replica a")) == "from replica a"
    assert a.reveal(b.seal("from replica b")) == "from replica b"


@pytest.mark.parametrize("other", [SECRET + " ", SECRET.upper(), "x", None])
def test_another_key_cannot_reveal(seal: ReasoningSeal, other: str | None) -> None:
    foreign = ReasoningSeal(other)
    assert foreign.reveal(seal.seal("private")) is None
    assert seal.reveal(foreign.seal("private")) is None


@pytest.mark.parametrize("secret", [None, ""], ids=["unset", "empty"])
def test_without_a_secret_each_instance_has_its_own_random_key(secret: str | None) -> None:
    one, two = ReasoningSeal(secret), ReasoningSeal(secret)
    assert not one.from_env and not two.from_env
    token = one.seal("only mine")
    assert one.reveal(token) == "only mine"
    assert two.reveal(token) is None
    assert one.reveal(two.seal("only theirs")) is None
    assert ReasoningSeal(SECRET).reveal(token) is None
    # The random key is not the key of the empty secret either.
    assert one.reveal(independent_token("", b"guess")) is None


# -- rejected tokens ------------------------------------------------------------------------------

TAMPER: dict[str, Callable[[str], str]] = {
    "flip nonce": lambda t: flip(t, 0),
    "flip ciphertext": lambda t: flip(t, NONCE + 1),
    "flip tag": lambda t: flip(t, -1),
    "drop last 4 chars": lambda t: t[:-4],
    "drop last char": lambda t: t[:-1],
    "only the nonce": lambda t: token_of(blob_of(t)[:NONCE]),
    "27 bytes": lambda t: token_of(blob_of(t)[: NONCE + TAG - 1]),
    "extra byte": lambda t: token_of(blob_of(t) + b"\x00"),
    "blob swapped for zeros": lambda t: token_of(bytes(len(blob_of(t)))),
    "nonce of another token": lambda t: token_of(os.urandom(NONCE) + blob_of(t)[NONCE:]),
    "prefix cf2": lambda t: "cf2." + t[len(PREFIX) :],
    "prefix upper case": lambda t: "CF1." + t[len(PREFIX) :],
    "no prefix": lambda t: t[len(PREFIX) :],
    "prefix doubled": lambda t: PREFIX + t,
    "leading space": lambda t: " " + t,
    "standard base64 of another blob": lambda t: PREFIX + base64.b64encode(b"\xfb\xff" * 20).decode(),
    "not base64": lambda t: PREFIX + "!!!!not*base64$$$$",
    "bad padding": lambda t: PREFIX + "A",
    "non-ascii": lambda t: PREFIX + "é" * 40,
    "prefix alone": lambda t: PREFIX,
    "empty": lambda t: "",
    "plaintext": lambda t: "secret reasoning",
}


@pytest.mark.parametrize("tamper", list(TAMPER.values()), ids=list(TAMPER))
def test_altered_tokens_do_not_reveal(seal: ReasoningSeal, tamper: Callable[[str], str]) -> None:
    token = seal.seal("secret reasoning")
    bad = tamper(token)
    assert bad != token
    assert seal.reveal(bad) is None


@pytest.mark.parametrize(
    "value",
    [None, 0, 12.5, True, b"cf1.AAAA", ["cf1."], {"token": "cf1."}],
    ids=["None", "int", "float", "bool", "bytes", "list", "dict"],
)
def test_non_strings_do_not_reveal(seal: ReasoningSeal, value: Any) -> None:
    assert seal.reveal(value) is None


def test_bytes_of_a_real_token_do_not_reveal(seal: ReasoningSeal) -> None:
    assert seal.reveal(seal.seal("x").encode("ascii")) is None  # type: ignore[arg-type]


def test_authentic_but_not_utf8_does_not_reveal(seal: ReasoningSeal) -> None:
    # Only reachable with the key, but reveal promises None, never an exception.
    assert seal.reveal(independent_token(SECRET, b"\xff\xfe not utf-8 \xc3")) is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_reveal_never_raises_on_any_text(text: str) -> None:
    assert ReasoningSeal(SECRET).reveal(text) is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=B64_ALPHABET + "+/ \n."))
def test_reveal_never_raises_on_prefixed_text(body: str) -> None:
    assert ReasoningSeal(SECRET).reveal(PREFIX + body) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_reveal_never_raises_on_forged_blobs(blob: bytes) -> None:
    assert ReasoningSeal(SECRET).reveal(token_of(blob)) is None


# -- replay through the request mapping (translators/forward/request.py) ------------------------

USER = {"role": "user", "content": "list the files"}
NEXT = {"role": "user", "content": "and now?"}


def assistant_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def sealed_item(token: str) -> dict[str, Any]:
    """A reasoning item as Codex replays it when the reasoning had no visible text."""
    return {"type": "reasoning", "id": "rs_1", "summary": [], "content": None, "encrypted_content": token}


def replay(
    items: list[dict[str, Any]],
    reveal: Callable[[str], tuple[str, list] | None] | None,
    options: BackendProfile | None = None,
) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    mapped = responses_request_to_chat(
        {"model": "m", "input": items}, options or BackendProfile(), reveal_reasoning=reveal
    )
    return mapped.chat["messages"], mapped.ignored


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_revealed_reasoning_goes_on_the_assistant_message(field: str) -> None:
    token = ReasoningSeal(SECRET).seal("I should list files.")
    messages, ignored = replay(
        [USER, sealed_item(token), assistant_item("Done."), NEXT],
        ReasoningSeal(SECRET).open,
        BackendProfile(reasoning_field=field),
    )
    assert messages == [USER, {"role": "assistant", "content": "Done.", field: "I should list files."}, NEXT]
    assert ignored == ()


def test_revealed_reasoning_goes_on_the_tool_call_turn() -> None:
    # DeepSeek thinking mode rejects a tool-call turn whose reasoning was not sent back (docs/wire-facts.md, Reasoning fields).
    token = ReasoningSeal(SECRET).seal("Run ls.")
    items = [
        USER,
        sealed_item(token),
        {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
    ]
    messages, ignored = replay(items, ReasoningSeal(SECRET).open)
    assert messages == [
        USER,
        {
            "role": "assistant",
            "reasoning_content": "Run ls.",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
    ]
    assert ignored == ()


UNREADABLE: dict[str, Callable[[], str]] = {
    "other key": lambda: ReasoningSeal("another secret").seal("theirs"),
    "keyless process": lambda: ReasoningSeal(None).seal("theirs"),
    "tampered": lambda: flip(ReasoningSeal(SECRET).seal("ours"), -1),
    "openai's own": lambda: "gAAAAABo" + "x" * 60,
}


@pytest.mark.parametrize("make", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_unreadable_token_is_skipped_and_reported(make: Callable[[], str]) -> None:
    messages, ignored = replay([USER, sealed_item(make()), assistant_item("Done."), NEXT], ReasoningSeal(SECRET).open)
    assert messages == [USER, {"role": "assistant", "content": "Done."}, NEXT]
    assert ignored == ("input[1].encrypted_content",)


def test_visible_reasoning_text_is_used_before_the_token_text() -> None:
    item = {
        **sealed_item(ReasoningSeal(SECRET).seal("from the token")),
        "content": [{"type": "reasoning_text", "text": "visible"}],
    }
    messages, ignored = replay([USER, item, assistant_item("Done.")], ReasoningSeal(SECRET).open)
    assert messages[1]["reasoning_content"] == "visible" and "reasoning_details" not in messages[1]
    assert ignored == ()


def test_reasoning_sealed_on_one_replica_is_replayed_by_another() -> None:
    """The whole trip: a non-streaming answer sealed by replica A, the client keeps only the opaque
    token, replica B turns it back into the backend's reasoning field."""
    replica_a, replica_b = ReasoningSeal(SECRET), ReasoningSeal(SECRET)
    completion = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "There are two files.",
                    "reasoning_content": "Count the files.",
                },
            }
        ]
    }
    response = chat_completion_to_response(
        completion, {"model": "m"}, ids=SequentialIds(), now=lambda: 1, seal_reasoning=replica_a.seal
    )
    reasoning, message = response["output"]
    assert reasoning["type"] == "reasoning" and message["type"] == "message"
    token = reasoning["encrypted_content"]
    assert isinstance(token, str) and "Count the files." not in token

    replayed = {**reasoning, "content": None}  # only the token carries the text now
    messages, ignored = replay([USER, replayed, message, NEXT], replica_b.open)
    assert messages == [
        USER,
        {"role": "assistant", "content": "There are two files.", "reasoning_content": "Count the files."},
        NEXT,
    ]
    assert ignored == ()


GEMINI_DETAILS = [
    {
        "type": "reasoning.encrypted",
        "data": "EjQKMgEMOdbH",
        "format": "google-gemini-v1",
        "id": "tool_add_1",
        "index": 0,
    }
]


def test_details_are_sealed_with_the_text_and_opened_back() -> None:
    seal = ReasoningSeal(SECRET)
    token = seal.seal("Use both tools.", GEMINI_DETAILS)
    assert token.startswith("cf2.") and "EjQKMgEMOdbH" not in token
    assert ReasoningSeal(SECRET).open(token) == ("Use both tools.", GEMINI_DETAILS)
    assert ReasoningSeal(SECRET).reveal(token) == "Use both tools."
    assert ReasoningSeal("another secret").open(token) is None
    tampered = bytearray(base64.urlsafe_b64decode(token[4:]))
    tampered[-1] ^= 0x01
    assert seal.open("cf2." + base64.urlsafe_b64encode(bytes(tampered)).decode()) is None
    # Text alone keeps the first format, so tokens already in clients' histories still open.
    assert seal.seal("plain", None).startswith(PREFIX) and seal.open(seal.seal("plain")) == ("plain", [])
    # Neither kind passes for the other: each has its own associated data.
    assert seal.open("cf1." + token[4:]) is None
    assert seal.open("cf2." + seal.seal("plain")[4:]) is None


def test_sealed_details_go_back_on_the_tool_call_turn() -> None:
    """Gemini via OpenRouter: the thought signature came with the calls and no reasoning text;
    the next request carries it back as the assistant message's reasoning_details."""
    token = ReasoningSeal(SECRET).seal("", GEMINI_DETAILS)
    call = {"type": "function_call", "call_id": "tool_add_1", "name": "add", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "tool_add_1", "output": "5"}
    for items in (
        [USER, sealed_item(token), call, output],  # as crossfeed orders the items
        [USER, call, sealed_item(token), output],
    ):  # the reasoning last in its turn
        messages, ignored = replay(items, ReasoningSeal(SECRET).open)
        assert messages[1] == {
            "role": "assistant",
            "reasoning_details": GEMINI_DETAILS,
            "tool_calls": [{"id": "tool_add_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}],
        }
        assert ignored == ()


def test_summary_tokens_are_their_own_kind() -> None:
    seal = ReasoningSeal("k")
    token = seal.seal_summary("the summary")
    assert token.startswith("cfc1.") and seal.open_summary(token) == "the summary"
    assert seal.open(token) is None and seal.reveal(token) is None  # not reasoning
    assert seal.open_summary(seal.seal("reasoning")) is None
    assert seal.open_summary("cfc1." + seal.seal("reasoning")[4:]) is None  # same bytes, other kind
    assert ReasoningSeal("other").open_summary(token) is None
    assert ReasoningSeal("k").open_summary(token) == "the summary"  # another replica, same key
    assert seal.open_summary(None) is None  # type: ignore[arg-type]


# -- what a token opened to is kept --------------------------------------------------------------


def _counting(seal: ReasoningSeal, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The decryptions ``seal`` makes from now on."""
    calls: list[str] = []
    real = ReasoningSeal._open

    def counted(self: ReasoningSeal, body: str, aad: bytes) -> bytes | None:
        if self is seal:
            calls.append(body)
        return real(self, body, aad)

    monkeypatch.setattr(ReasoningSeal, "_open", counted)
    return calls


def test_a_resent_token_is_opened_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex resends every reasoning item each turn: the second time costs no decryption."""
    sealer = ReasoningSeal("k")
    token = sealer.seal("thinking about it")
    other = ReasoningSeal("k")  # another replica with the same key: it has not seen the token
    calls = _counting(other, monkeypatch)
    for _ in range(3):
        assert other.open(token) == ("thinking about it", [])
    assert len(calls) == 1


def test_a_token_this_process_sealed_needs_no_decryption(monkeypatch: pytest.MonkeyPatch) -> None:
    seal = ReasoningSeal("k")
    calls = _counting(seal, monkeypatch)
    token = seal.seal("mine", [{"type": "reasoning.encrypted", "data": "x"}])
    assert seal.open(token) == ("mine", [{"type": "reasoning.encrypted", "data": "x"}])
    assert calls == []


def test_kept_details_are_copies() -> None:
    seal = ReasoningSeal("k")
    token = seal.seal("t", [{"type": "reasoning.text", "text": "a"}])
    first = seal.open(token)
    assert first is not None
    first[1][0]["text"] = "changed"
    first[1].append({"type": "extra"})
    assert seal.open(token) == ("t", [{"type": "reasoning.text", "text": "a"}])


def test_a_token_that_does_not_open_is_never_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    seal = ReasoningSeal("k")
    token = ReasoningSeal("other key").seal("secret")
    calls = _counting(seal, monkeypatch)
    assert seal.open(token) is None
    assert seal.open(token) is None
    assert len(calls) == 2  # tried each time, never remembered as opened
    altered = seal.seal("x")[:-2] + "AA"
    assert seal.open(altered) is None


def test_what_is_kept_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reasoning_seal, "OPENED_BYTES", 4000)
    seal = ReasoningSeal("k")
    tokens = [seal.seal(f"{i:03d}" + "x" * 300) for i in range(40)]
    assert seal._opened_size <= 4000
    assert len(seal._opened) < 40
    assert tokens[-1] in seal._opened and tokens[0] not in seal._opened  # the oldest went first
    calls = _counting(seal, monkeypatch)
    assert seal.open(tokens[0]) == ("000" + "x" * 300, [])  # still opens, by decryption
    assert len(calls) == 1
    seal.seal("y" * 2000)  # more than a quarter of the bound: never kept
    assert all(len(t) < 1500 for t in seal._opened)
