"""A leg continued on another upstream (``partial`` / ``resume``; proxy/turns/continuation.py):
the broken stream's text is the prefill, the next stream's deltas go on into the same message,
one Response numbered throughout; and the prefill request (translators/forward/prefill.py)."""

from __future__ import annotations

import pytest

from crossfeed.translators.errors import StreamStateError
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.prefill import HOLD, PrefillEcho, ThinkResume, prefill_body
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from tests.support.chat_chunks import chat_chunk
from tests.support.validators import validate_responses_events


def machine(**kw: object) -> ChatToResponsesStream:
    return ChatToResponsesStream({"model": "m", "stream": True}, ids=SequentialIds(), now=lambda: 1, **kw)  # type: ignore[arg-type]


CALL = chat_chunk(
    {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"q"'}}]}
)


def test_a_continued_leg_is_one_message_numbered_throughout() -> None:
    m = machine()
    out = m.start()
    out += m.feed(chat_chunk({"role": "assistant", "content": ""}))
    out += m.feed(chat_chunk({"content": "Hello, "}))
    out += m.feed(chat_chunk({"content": "wor"}))
    assert m.partial() == ("text", "Hello, wor")
    m.resume()  # the broken stream is left: its failure never reaches the machine
    out += m.feed(chat_chunk({"role": "assistant", "content": ""}))  # the new stream's role chunk
    out += m.feed(chat_chunk({"content": "ld!"}))
    out += m.feed(chat_chunk({}, "stop", usage=(30, 3)))
    out += m.finish()
    validate_responses_events(out)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert [e["type"] for e in out].count("response.output_item.added") == 1
    final = out[-1]
    assert final["type"] == "response.completed"
    assert [i["type"] for i in final["response"]["output"]] == ["message"]
    assert final["response"]["output"][0]["content"][0]["text"] == "Hello, world!"


def test_nothing_written_yet_is_an_empty_prefill() -> None:
    m = machine()
    m.start()
    m.feed(chat_chunk({"role": "assistant", "content": ""}))
    assert m.partial() == ("text", "")


def test_reasoning_before_the_text_is_not_in_the_text_prefill() -> None:
    m = machine()
    m.start()
    m.feed(chat_chunk({"reasoning_content": "think"}))
    assert m.partial() == ("reasoning", "think")  # in reasoning: continued as reasoning
    m.feed(chat_chunk({"content": "An"}))
    assert m.partial() == ("text", "An")


@pytest.mark.parametrize(
    "chunks",
    [
        [CALL],  # arguments streaming
        [chat_chunk({"content": "x"}, "stop")],  # the finish_reason was read
        [chat_chunk({"refusal": "no"})],
    ],
)
def test_not_continued_in_a_call_after_the_finish_reason_or_in_a_refusal(chunks: list[dict]) -> None:
    m = machine()
    m.start()
    for c in chunks:
        m.feed(c)
    assert m.partial() is None
    with pytest.raises(StreamStateError):
        m.resume()


def test_text_after_a_call_is_not_continued() -> None:
    m = machine()
    m.start()
    m.feed(CALL)
    m.feed(chat_chunk({"content": "and"}))
    assert m.partial() is None


def test_inline_think_tags_are_not_continued() -> None:
    m = machine(profile=BackendProfile(think_tags=True))
    m.start()
    m.feed(chat_chunk({"content": "text"}))
    assert m.partial() is None


def test_an_ended_response_is_not_continued() -> None:
    m = machine()
    m.start()
    m.feed(chat_chunk({"content": "x"}))
    m.fail("upstream_disconnected", "gone")
    assert m.partial() is None


CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def test_prefill_trailing_assistant() -> None:
    body = prefill_body(CHAT, "Hello, wor", "trailing_assistant")
    assert body["messages"][-1] == {"role": "assistant", "content": "Hello, wor"}
    assert "continue_final_message" not in body and len(CHAT["messages"]) == 1


def test_prefill_continue_final_message() -> None:
    body = prefill_body(CHAT, "Hello", "continue_final_message")
    assert body["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False


def test_prefill_extends_the_clients_own_prefill_and_empty_text_is_the_request() -> None:
    chat = {**CHAT, "messages": [*CHAT["messages"], {"role": "assistant", "content": "Sure: "}]}
    assert prefill_body(chat, "one", "trailing_assistant")["messages"][-1]["content"] == "Sure: one"
    assert prefill_body(CHAT, "", "continue_final_message") is CHAT


def _texts(chunks: list[dict]) -> list[str]:
    return [c["choices"][0]["delta"].get("content") or "" for c in chunks]


def test_a_repeated_prefill_is_dropped() -> None:
    echo = PrefillEcho("Hello, wor")
    out = []
    for c in [
        chat_chunk({"role": "assistant", "content": None}),
        chat_chunk({"content": "Hello"}),
        chat_chunk({"content": ", wor"}),
        chat_chunk({"content": "ld!"}, "stop"),
    ]:
        out += echo.feed(c)
    assert "".join(_texts(out)) == "ld!" and out[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_repeated_prefill_and_new_text_in_one_delta() -> None:
    echo = PrefillEcho("Hello from a")
    assert _texts(echo.feed(chat_chunk({"content": "Hello from aHello"}))) == ["Hello"]
    assert _texts(echo.feed(chat_chunk({"content": "Hello"}))) == ["Hello"]  # settled: not matched again


def test_text_that_differs_goes_through_with_what_was_held() -> None:
    echo = PrefillEcho("Hello, wor")
    out = echo.feed(chat_chunk({"content": "Hel"})) + echo.feed(chat_chunk({"content": "p me"}))
    assert "".join(_texts(out)) == "Help me"
    echo = PrefillEcho("Hello")
    out = echo.feed(chat_chunk({"content": "He"})) + echo.feed(chat_chunk({"reasoning_content": "hm"}))
    assert _texts(out) == ["", "He", ""] and out[-1]["choices"][0]["delta"]["reasoning_content"] == "hm"
    echo = PrefillEcho("Hello")
    assert _texts(echo.feed(chat_chunk({"content": "He"}, "stop"))) == ["He"]  # the end: what came is the answer


# -- reasoning ---------------------------------------------------------------------------------


def _reasoning_texts(final: dict) -> list[str]:
    return [i["content"][0]["text"] for i in final["response"]["output"] if i["type"] == "reasoning"]


def test_a_leg_broken_in_its_reasoning_goes_on_in_the_same_reasoning_item() -> None:
    m = machine()
    out = m.start()
    out += m.feed(chat_chunk({"role": "assistant", "content": ""}))
    out += m.feed(chat_chunk({"reasoning_content": "Let me th"}))
    assert m.partial() == ("reasoning", "Let me th")
    m.resume()
    out += m.feed(chat_chunk({"role": "assistant", "content": None}))
    out += m.feed(chat_chunk({"reasoning_content": "ink."}))
    out += m.feed(chat_chunk({"content": "Answer"}, "stop"))
    out += m.finish()
    validate_responses_events(out)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    final = out[-1]
    assert [i["type"] for i in final["response"]["output"]] == ["reasoning", "message"]
    assert _reasoning_texts(final) == ["Let me think."]
    assert final["response"]["output"][1]["content"][0]["text"] == "Answer"


def test_reasoning_after_another_item_or_signed_is_not_continued() -> None:
    m = machine()
    m.start()
    m.feed(chat_chunk({"content": "text"}))
    m.feed(chat_chunk({"reasoning_content": "then thinking"}))
    assert m.partial() is None
    sealed = machine(seal_reasoning=lambda text, details: "sealed")
    sealed.start()
    sealed.feed(
        chat_chunk({"reasoning_content": "why", "reasoning_details": [{"type": "reasoning.text", "text": "why"}]})
    )
    assert sealed.partial() is None  # a signature cannot be continued by another replica


CHAT_KWARGS = {**CHAT, "chat_template_kwargs": {"reasoning_effort": "high"}}


def test_reasoning_prefill_trailing_assistant_turns_thinking_off() -> None:
    body = prefill_body(CHAT_KWARGS, "Let me th", "trailing_assistant", reasoning=True)
    assert body["messages"][-1] == {"role": "assistant", "content": "<think>\nLet me th"}
    assert body["chat_template_kwargs"] == {"reasoning_effort": "high", "enable_thinking": False}
    assert CHAT_KWARGS["chat_template_kwargs"] == {"reasoning_effort": "high"}  # not changed
    assert "chat_template_kwargs" not in prefill_body(CHAT, "Hello", "trailing_assistant")


def test_reasoning_prefill_continue_final_message() -> None:
    body = prefill_body(CHAT, "Let me th", "continue_final_message", reasoning=True)
    assert body["messages"][-1] == {"role": "assistant", "content": "<think>\nLet me th"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert "chat_template_kwargs" not in body


@pytest.mark.parametrize("style", ["trailing_assistant", "continue_final_message"])
def test_reasoning_prefill_in_the_reasoning_field(style: str) -> None:
    """The thought in the message's reasoning field, content empty: no <think>, and thinking left
    on (llama-server continues the thought from it)."""
    body = prefill_body(CHAT_KWARGS, "Let me th", style, reasoning=True, form="reasoning_field")
    assert body["messages"][:-1] == CHAT["messages"]
    assert body["messages"][-1] == {"role": "assistant", "content": "", "reasoning_content": "Let me th"}
    assert body["chat_template_kwargs"] == {"reasoning_effort": "high"}  # no enable_thinking
    if style == "continue_final_message":
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    else:
        assert "continue_final_message" not in body and "add_generation_prompt" not in body
    vllm = prefill_body(CHAT, "Let me th", style, reasoning=True, form="reasoning_field", field="reasoning")
    assert vllm["messages"][-1] == {"role": "assistant", "content": "", "reasoning": "Let me th"}
    assert "chat_template_kwargs" not in vllm


def test_reasoning_field_prefill_extends_the_clients_own_message_and_leaves_text_alone() -> None:
    own = {**CHAT, "messages": [*CHAT["messages"], {"role": "assistant", "content": "", "reasoning_content": "So, "}]}
    body = prefill_body(own, "Let me th", "trailing_assistant", reasoning=True, form="reasoning_field")
    assert body["messages"][1:] == [{"role": "assistant", "content": "", "reasoning_content": "So, Let me th"}]
    bare = {**CHAT, "messages": [*CHAT["messages"], {"role": "assistant", "content": ""}]}
    body = prefill_body(bare, "Let me th", "trailing_assistant", reasoning=True, form="reasoning_field")
    assert body["messages"][1:] == [{"role": "assistant", "content": "", "reasoning_content": "Let me th"}]
    assert own["messages"][-1]["reasoning_content"] == "So, "  # not changed
    # an answer's text is its text in either form; nothing to continue: the request as it was
    text = prefill_body(CHAT, "Hello", "trailing_assistant", form="reasoning_field")
    assert text["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert prefill_body(CHAT, "", "trailing_assistant", reasoning=True, form="reasoning_field") is CHAT


def _field(chunks: list[dict], key: str) -> str:
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks)


def test_a_repeated_reasoning_prefill_is_dropped_in_either_field() -> None:
    echo = PrefillEcho("<think>\nLet me th", "Let me th")
    out = []
    for c in [
        chat_chunk({"content": "<think>\n"}),
        chat_chunk({"content": "Let me th"}),
        chat_chunk({"content": "ink"}),
    ]:
        out += echo.feed(c)
    assert _field(out, "content") == "ink"
    echo = PrefillEcho("<think>\nLet me th", "Let me th")
    out = []
    for c in [
        chat_chunk({"role": "assistant"}),
        chat_chunk({"reasoning_content": "Let me"}),
        chat_chunk({"reasoning_content": " think"}),
    ]:
        out += echo.feed(c)
    assert _field(out, "reasoning_content") == "ink"
    echo = PrefillEcho("<think>\nLet me th", "Let me th")
    out = echo.feed(chat_chunk({"reasoning": "ink."}))  # not repeated: through
    assert _field(out, "reasoning") == "ink." and not echo.left


def test_think_resume_reads_raw_content_as_reasoning_until_the_close_tag() -> None:
    resume = ThinkResume()
    out = []
    for c in [
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"content": "ink.</thi"}),
        chat_chunk({"content": "nk>\n"}),
        chat_chunk({"content": "\nAns"}),
    ]:
        out += resume.feed(c)
    assert not resume.left
    later = chat_chunk({"content": "wer"}, "stop")
    assert resume.feed(later) == [later]  # settled: through as it is
    assert _field(out, "reasoning_content") == "ink." and _field(out, "content") == "Ans"


def test_think_resume_passes_a_parsed_reasoning_through() -> None:
    resume = ThinkResume()
    parsed = chat_chunk({"reasoning_content": "ink."})
    assert resume.feed(parsed) == [parsed] and not resume.left
    assert resume.feed(chat_chunk({"content": "Answer"}))[0]["choices"][0]["delta"] == {"content": "Answer"}


def test_think_resume_takes_a_continuation_that_never_closes_the_block_for_the_answer() -> None:
    """A backend whose parser took the block's end as its first token writes only the answer:
    held until the stream shows no </think>, then the answer's text, none of it reasoning."""
    resume = ThinkResume()
    out = resume.feed(chat_chunk({"content": "The answer"}))
    assert _field(out, "content") == "" and _field(out, "reasoning_content") == ""  # held
    out += resume.feed(chat_chunk({"content": " is 4."}, "stop"))
    assert _field(out, "content") == "The answer is 4." and _field(out, "reasoning_content") == ""
    assert not resume.left


def test_think_resume_streams_a_long_reasoning_before_its_close_tag() -> None:
    resume = ThinkResume()
    out = []
    for _ in range(HOLD // 100 + 2):
        out += resume.feed(chat_chunk({"content": "x" * 100}))
    assert len(_field(out, "reasoning_content")) > HOLD  # past the hold it goes out as reasoning
    out += resume.feed(chat_chunk({"content": "</think>Answer"}, "stop"))
    assert _field(out, "content") == "Answer" and set(_field(out, "reasoning_content")) == {"x"}
