"""Chat Completions chunks -> Responses API events: the forward stream machine.

Theory of operation
-------------------
The relay calls ``start()`` once the upstream has answered 200, then ``feed(chunk)`` for every
parsed ``chat.completion.chunk`` (a dict), then exactly one of ``finish()`` (the upstream sent
``[DONE]``), ``finish(clean=False)`` (the upstream closed without ``[DONE]``) or
``fail(code, message)`` (transport or protocol failure). Each call returns the Responses events it
produced, in order, as dicts. Nothing is buffered: every delta becomes an event at once.
In wire mode (``wire=True``, what the proxy uses) the delta events of text, reasoning text and
function-call arguments, the events of nearly every chunk, come out instead as their finished
SSE frames (``bytes``), made from a template of the item's fixed fields: no dict to build and
serialize per token. ``translators.sse.render_responses`` passes them through; the golden and
unit tests check that the bytes equal the frames rendered from the dicts.
``feed_frame(data)`` is ``feed`` for a chunk still in its JSON bytes, decoded into typed structs
(chunk_frames.py); the pump uses it for every frame, and it gives the same events as ``feed``.

The machine is four layers, one class extending the other so that the per-token path makes no
call more than one class would: the Response assembler (assembler.py: numbering, the lifecycle,
items opened and closed with their done events, the terminal event, usage), the content writer
(content_writer.py: what a delta turns into, the item transitions), the frame runs
(frame_runs.py: frames alike but for their text, read without a decode) and, here, the chunk
reader.

Legs: one upstream call is a leg. ``finish()`` is ``end_leg()`` (close the leg's items; ``leg``
says what the model asked for: finish reason, usage, calls) then ``end_response()`` (the
terminal event). Between the two the exchange may add items of its own and open another leg
(``next_leg``; assembler.py).

Each chunk's delta is read in one place (``_delta``) in this order: reasoning, content (string or
Mistral's part array), refusal, annotations, tool calls. Reasoning comes from the first present of
``reasoning_content``, ``reasoning`` (string) and ``reasoning_details`` (OpenRouter), so backends that
send the same text in two spellings are not doubled. A tool-call fragment with the index of an
open call but a different non-empty ``id`` starts a new call (Ollama numbers each chunk's calls
from 0); ``id`` and ``name`` repeated on later fragments are ignored (set once).

``finish_reason`` is recorded, not acted on: the usage chunk usually follows it. ``finish()``
closes everything and emits one terminal event: ``stop``/``tool_calls``/none -> completed;
``length`` and ``model_length`` -> incomplete (``max_output_tokens``); ``content_filter`` ->
incomplete (``content_filter``); ``insufficient_system_resource``, ``error`` and ``abort`` ->
failed; any other reason -> completed, counted in ``diagnostics``. ``fail()`` closes open items as
``incomplete`` and emits ``error`` then ``response.failed``. ``steer()`` (a WebSocket client's
steering input, while ``steerable``: no call open) ends the response at once as a length stop
does, ``response.incomplete`` with reason ``steered``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from crossfeed.translators import ids as idp
from crossfeed.translators.errors import StreamStateError, UpstreamProtocolError
from crossfeed.translators.forward.args_frames import ArgsFrame
from crossfeed.translators.forward.assembler import CALL_TYPES, INCOMPLETE_REASONS, MESSAGE, REASONING, LegEnd, Phase
from crossfeed.translators.forward.chat_fields import details_text, mistral_parts
from crossfeed.translators.forward.chunk_frames import FRAME_ERRORS, LEARN_TRIES, TextFrame, as_dict, decode_chunk
from crossfeed.translators.forward.content_split import ContentSplitter, Split, function_schemas
from crossfeed.translators.forward.frame_runs import FrameRuns
from crossfeed.translators.ids import IdFactory
from crossfeed.translators.options import (
    DEFAULT_PROFILE,
    NO_TOOLS,
    OPENAI_EVENTS,
    BackendProfile,
    EventNames,
    ToolContext,
)
from crossfeed.translators.plain_json import PLAIN_TABLE as _PLAIN
from crossfeed.translators.sse import Framing, Out

# Reasons that say the generation failed: finish_reason -> (error code, message).
_FAILED_REASONS = {
    "insufficient_system_resource": (
        "insufficient_system_resource",
        "the upstream stopped generating for lack of resources",
    ),  # DeepSeek
    "error": ("upstream_error", "the upstream stopped generating because of an error"),  # Mistral, OpenRouter
    "abort": ("upstream_aborted", "the upstream aborted the generation"),  # vLLM, SGLang
}
_KNOWN_FINISH = {"stop", "tool_calls", "function_call", *INCOMPLETE_REASONS, *_FAILED_REASONS}

# What a chunk of valid JSON but of the wrong shape raises inside the machine.
_SHAPE_ERRORS = (UpstreamProtocolError, TypeError, AttributeError, KeyError, ValueError)
_NOT_TEXT_REASON = "a finish_reason that is not text"


class ChatToResponsesStream(FrameRuns):
    # The SSE head of the most frequent frame, up to its JSON (Pump: a read of one such frame
    # goes straight to feed_frame).
    hot_head = b"data: {"

    def __init__(
        self,
        request: dict[str, Any],
        *,
        ids: IdFactory,
        now: Callable[[], int],
        tools: ToolContext = NO_TOOLS,
        seal_reasoning: Callable[[str, list[dict[str, Any]] | None], str] | None = None,
        profile: BackendProfile = DEFAULT_PROFILE,
        wire: bool | Framing = False,
        events: EventNames = OPENAI_EVENTS,
    ) -> None:
        """Args:
        request: the client's Responses request (echoed on the Response object).
        ids, now: injected id factory and clock.
        tools: custom-tool and namespace names from the request mapping.
        seal_reasoning: when the client asked for ``reasoning.encrypted_content``, turns the
            reasoning text and the backend's ``reasoning_details`` (Gemini's thought signatures,
            Claude's signed thinking, encrypted reasoning: what the backend wants back on the
            next turn) into the opaque ``encrypted_content`` put on reasoning items.
        profile: the backend's dialect; the machine reads what hides in its content from it:
            inline ``<think>`` reasoning and tool-call markup (content_split.py).
        wire: the delta events of text, reasoning text and call arguments come out as finished
            SSE frames (``bytes``, rendered from a per-item template) instead of dicts; every
            other event stays a dict. ``translators.sse.render_responses`` writes both kinds,
            and the bytes are exactly what it would make of the dict. True frames them for SSE;
            a ``Framing`` (``JSON_FRAMING``: WebSocket text frames) is the sink's own choice.
        events: the client's dialect of event names (options.py): OpenAI's, or the Open
            Responses names of the raw reasoning events (``response.reasoning.delta``/``.done``).
        """
        super().__init__(
            request, ids=ids, now=now, tools=tools, seal_reasoning=seal_reasoning, wire=wire, events=events
        )
        self._think = (
            ContentSplitter(
                think_tags=profile.think_tags, tool_markup=profile.tool_markup, schemas=function_schemas(request)
            )
            if profile.think_tags or profile.tool_markup
            else None
        )
        self._text_frame: TextFrame | None = None  # feed_frame's template of a text frame
        self._args_frame: ArgsFrame | None = None  # and of a call's argument fragment (args_frames.py)
        self._args_left = LEARN_TRIES  # argument templates the stream may still learn in a row
        self._args_served = 0  # fragments the current one has read

    # -- reading chunks ----------------------------------------------------------------------

    def feed(self, chunk: dict[str, Any]) -> list[Out]:
        if not self._live:
            raise StreamStateError(f"feed() in phase {self.phase.value}")
        out = self._out = []
        try:
            usage = chunk.get("usage")
            if usage:
                if usage.__class__ is not dict:
                    raise UpstreamProtocolError("a usage that is not an object")
                self._usage = usage
            error = chunk.get("error")
            if error:  # after the usage: a failing chunk may still say what was spent (OpenRouter)
                return self._fail_upstream(error)
            choices = chunk.get("choices")
            if choices:
                if choices.__class__ is not list:
                    raise UpstreamProtocolError("choices that are not a list")
                for choice in choices:
                    if choice.__class__ is not dict:
                        raise UpstreamProtocolError("a choice that is not an object")
                    if choice.get("index", 0):
                        self._note("extra_choice_ignored")
                        continue
                    delta = choice.get("delta")
                    if delta:
                        if delta.__class__ is not dict:
                            raise UpstreamProtocolError("a delta that is not an object")
                        text = delta.get("content") if len(delta) == 1 else None
                        if text.__class__ is str and self._think is None:  # the hot case: text alone
                            if text:
                                self._more_text(text, choice.get("logprobs"))
                        else:
                            self._delta(delta, choice)
                    reason = choice.get("finish_reason")
                    if reason:
                        if reason.__class__ is not str:
                            raise UpstreamProtocolError(_NOT_TEXT_REASON)
                        self._finish_reason = reason
            if usage is None and "x_groq" in chunk:  # Groq reports usage only here
                x_groq = chunk["x_groq"]
                if isinstance(x_groq, dict) and x_groq.get("usage"):
                    self._usage = x_groq["usage"]
            return out
        except _SHAPE_ERRORS as exc:
            return out + self._bad_shape(exc)

    def feed_frame(self, data: bytes) -> list[Out] | None:
        """``feed`` for a chunk in its JSON bytes (the pump's call for every frame): read with the
        stream's text template (frame_runs.py), or decoded into typed structs (chunk_frames.py)
        whose usual shapes go to ``feed``'s helpers, others to ``feed`` as dicts; None when the
        bytes do not decode (then plain JSON into ``feed`` reports the problem)."""
        known = self._text_frame
        if known is not None and self._live:  # the frame before it but for the text: no decode
            head, start, tail, end, reasoning, _, _, _, _ = known
            if data[:start] == head and data[end:] == tail:  # (slices compare faster than startswith)
                raw = data[start:end]  # (empty when the two overlap)
                if raw and raw.translate(_PLAIN) == raw:  # nothing JSON escapes (plain_json.py)
                    try:
                        text = raw.decode()
                    except UnicodeDecodeError:
                        return None  # (the decode fails it too: the caller's plain parse reports it)
                    out = self._out = []
                    self._reasoning(text) if reasoning else self._more_text(text, None)
                    return out
        if self._args_frame is not None and self._live and self._think is None:
            found = self._args_fragment(data)  # a call's next argument fragment: no decode either
            if found is not None:
                return found
        return self._decoded(data)

    def _decoded(self, data: bytes) -> list[Out] | None:
        """``feed_frame`` for a frame no template reads: decoded into typed structs. A method of
        its own: inlined, its locals made ``feed_frame``'s frame larger, and a text delta read
        from the template paid 60-100 instructions more to set it up and clear it
        (bench/per_delta.py)."""
        try:
            chunk = decode_chunk(data)
        except FRAME_ERRORS:
            return None
        choices = chunk.choices
        usage = chunk.usage
        if (
            usage.__class__ is dict
            and usage
            and not choices
            and chunk.error is None
            and chunk.x_groq is None
            and self._live
        ):  # the usage chunk that ends most streams (include_usage): what ``feed`` does with it
            self._usage = usage
            return []
        if (
            usage is not None
            or chunk.error is not None
            or chunk.x_groq is not None
            or choices is None
            or len(choices) != 1
            or choices[0].index
            or self._think is not None
            or not self._live
        ):
            return self.feed(as_dict(chunk))
        choice = choices[0]
        delta = choice.delta
        if delta is not None and (delta.reasoning_details or delta.refusal or delta.annotations or delta.function_call):
            return self.feed(as_dict(chunk))
        out = self._out = []
        try:
            if delta is not None:
                text = delta.content
                reasoning = delta.reasoning_content or delta.reasoning
                tool_calls = delta.tool_calls
                if text.__class__ is str and not reasoning and not tool_calls:
                    if text:
                        self._learn(data, choice, "content", text)
                        self._more_text(text, choice.logprobs)
                elif not text and not tool_calls and reasoning.__class__ is str:
                    if reasoning:  # (an empty one, as empty text, opens nothing)
                        self._learn(
                            data, choice, "reasoning_content" if delta.reasoning_content else "reasoning", reasoning
                        )
                        self._reasoning(reasoning)
                elif not text and not reasoning and tool_calls.__class__ is list:
                    for tc in tool_calls:
                        self._tool_fragment(tc)
                    if self._args_left and len(tool_calls) == 1 and choice.finish_reason is None:
                        self._learn_args(data, choice)
                elif text or reasoning or tool_calls:
                    return self.feed(as_dict(chunk))
            reason = choice.finish_reason
            if reason:
                if reason.__class__ is not str:
                    raise UpstreamProtocolError(_NOT_TEXT_REASON)
                self._finish_reason = reason
        except _SHAPE_ERRORS as exc:
            return out + self._bad_shape(exc)
        return out

    def _bad_shape(self, exc: Exception) -> list[Out]:
        """Valid JSON of the wrong shape. Values are checked before they are stored, so the
        state is consistent: the caller keeps what the chunk already produced, then this fails."""
        what = exc.message if isinstance(exc, UpstreamProtocolError) else "a chunk of an unexpected shape"
        return self.fail("upstream_protocol_error", f"the upstream sent {what}")

    def finish(self, *, clean: bool = True) -> list[Out]:
        """The upstream ended. ``clean``: it sent ``[DONE]``; without it, no finish_reason = cut.
        The end of the leg, then (unless the leg failed) the end of the response."""
        out = self.end_leg(clean=clean)
        if not self.done:
            out += self.end_response()
        return out

    def end_leg(self, *, clean: bool = True, stopped: bool = False) -> list[Out]:
        """End of one upstream call: close its items and record what the model asked for
        (``leg``: finish reason, usage, the calls it made). The Response stays open, so the
        exchange may run a hosted tool and feed another leg (``next_leg``) or end it
        (``end_response``). A leg that failed (cut, or a failing finish_reason) ends the
        response with ``fail`` here. ``stopped``: crossfeed ended the leg itself (``steer``):
        its items close ``incomplete``, as a length stop closes them."""
        if self.phase is not Phase.STREAMING:
            raise StreamStateError(f"end_leg() in phase {self.phase.value}")
        reason = self._finish_reason
        if not stopped:
            if not clean and reason is None:
                return self.fail("upstream_truncated", "the upstream closed the stream before it finished")
            failed = _FAILED_REASONS.get(reason or "")
            if failed is not None:
                return self.fail(*failed)
            if reason is None and self._open is None and not self._open_calls and len(self._output) == self._leg_start:
                # [DONE] with nothing before it, not even a finish_reason: a request the server cut
                # short (llama-cpp-python interrupts one for the next), never a successful empty answer.
                return self.fail("upstream_truncated", "the upstream ended the stream without an answer")
            if reason is not None and reason not in _KNOWN_FINISH:
                self._note("unknown_finish_reason")
            if self._usage is None:  # e.g. llama-cpp-python ignores include_usage: usage counts 0
                self._note("usage_not_reported")
        out = self._out = []
        self._flush()
        first = self._leg_start
        self._close_all("incomplete" if stopped or INCOMPLETE_REASONS.get(reason or "") else "completed")
        self._seal_details_left()
        self._live = False
        self.leg = LegEnd(
            reason, self._usage, [item for item in self._output[first:] if item.get("type") in CALL_TYPES], self._hosted
        )
        self._hosted = []
        return out

    @property
    def steerable(self) -> bool:
        """The stream is at a safe boundary for steering input: between two deltas of a message's
        text or reasoning (or before any), no call open (nor its markup held back), the model's
        finish_reason not yet read."""
        return (
            self._live
            and not self._open_calls
            and self._finish_reason is None
            and (self._think is None or not self._think.in_call)
        )

    def steer(self) -> list[Out]:
        """Steering input ends the response here (``steerable``; the caller closes the upstream
        request): the open item closes ``incomplete``, then ``response.incomplete`` with reason
        ``steered`` and the usage known so far."""
        if not self.steerable:
            raise StreamStateError("steer() needs a streaming response at a safe boundary")
        out = self.end_leg(stopped=True)
        return out + self.end_response(incomplete="steered")

    def next_leg(self) -> None:
        """Open the response to another upstream call (after ``end_leg``): numbering goes on,
        the new leg's finish reason and usage are its own (usage adds up at the end)."""
        if self.phase is not Phase.STREAMING or self._live:
            raise StreamStateError("next_leg() needs a leg that has ended")
        if self._usage:
            self._spent.append(self._usage)
        self._usage = None
        self._finish_reason = None
        self._leg_start = len(self._output)
        self._live = True
        self.leg = None

    def partial(self) -> tuple[str, str] | None:
        """What a continuation of this leg on another upstream takes as its prefill
        (proxy/turns/continuation.py): ``("text", the text of the message being written)`` (""
        when the leg has written nothing yet), or ``("reasoning", its text)`` when the leg broke
        in its reasoning, the only item it opened. None when the leg may not be continued: it
        ended or read its finish_reason; a call is open or this leg made one; the open item is
        a refusal, or reasoning after another item or with the backend's signed
        ``reasoning_details`` kept; or the backend writes reasoning or calls inline (think
        tags, markup)."""
        if (
            not self._live
            or self._finish_reason is not None
            or self._open_calls
            or self._hosted
            or self._think is not None
        ):
            return None
        item = self._open
        first = len(self._output) == self._leg_start
        if item is None:
            return ("text", "") if first else None
        if item.kind == REASONING:
            return ("reasoning", "".join(item.parts[0][1])) if first and item.parts and not self._details else None
        if item.kind != MESSAGE or any(part[0] != "output_text" for part in item.parts):
            return None
        if any(done.get("type") in CALL_TYPES for done in self._output[self._leg_start :]):
            return None
        return ("text", "".join("".join(part[1]) for part in item.parts))

    def resume(self) -> None:
        """Take the next upstream stream as the continuation of this leg, whose stream broke
        (``partial`` is not None; nothing was called since): its deltas go on into the open
        item (the message's text, or the reasoning's: its reasoning deltas), and its role chunk
        or empty deltas open nothing. A usage the broken stream sent still counts."""
        if self.phase is not Phase.STREAMING or self.partial() is None:
            raise StreamStateError("resume() needs a leg that may be continued")
        if self._usage:
            self._spent.append(self._usage)
            self._usage = None

    # -- delta classification ---------------------------------------------------------------

    def _delta(self, delta: dict[str, Any], choice: dict[str, Any]) -> None:
        details = delta.get("reasoning_details")
        if details and self._seal is not None:
            self._keep_details(details)
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            if isinstance(reasoning, str):
                self._reasoning(reasoning)
        elif details:
            text = details_text(details)
            if text:
                self._reasoning(text)
            elif self._details and self._open is None and not self._open_calls:
                self._open_item(
                    REASONING, idp.REASONING, {"status": "in_progress", "summary": [], "content": []}
                )  # details alone
        content = delta.get("content")
        if content:
            if isinstance(content, str) and self._think is not None:
                self._split_think(self._think.feed(content))
            elif isinstance(content, str):
                self._text("output_text", content, _logprobs(choice))
            elif isinstance(content, list):
                self._content_parts(content)
            else:
                raise UpstreamProtocolError("content that is neither text nor a list of parts")
        refusal = delta.get("refusal")
        if refusal:
            if not isinstance(refusal, str):
                raise UpstreamProtocolError("a refusal that is not text")
            self._text("refusal", refusal, None)
        annotations = delta.get("annotations")
        if annotations and isinstance(annotations, list):
            for ann in annotations:
                self._annotation(ann)
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            if not isinstance(tool_calls, list):
                raise UpstreamProtocolError("tool_calls that are not a list")
            for tc in tool_calls:
                self._tool_fragment(tc)
        function_call = delta.get("function_call")
        if function_call:
            # Legacy single-function streaming. A server that sends it beside ``tool_calls`` in the
            # same delta (llama-cpp-python) repeats the same fragment there: one call, not two.
            if tool_calls:
                self._note("legacy_function_call_dropped")
            else:
                self._tool_fragment({"index": "legacy", "id": None, "function": function_call})

    def _split_think(self, pieces: list[Split]) -> None:
        for piece in pieces:
            if piece[0] == "reasoning":
                item = self._open
                if item is None or item.kind != REASONING:  # a <think> block opens: counted once
                    self._note("think_tags_split")
                self._reasoning(piece[1])
            elif piece[0] == "text":
                self._text("output_text", piece[1], None)
            elif len(piece) == 3:  # a call the backend wrote as markup in its content: a call like any other
                self._note("tool_markup_parsed")
                splitter = self._think
                assert splitter is not None  # (the pieces are its own)
                splitter.calls += 1
                self._tool_fragment(
                    {
                        "index": f"markup-{splitter.calls}",
                        "id": None,
                        "function": {"name": piece[1], "arguments": piece[2]},
                    }
                )

    def _flush(self) -> None:
        """What the think-tag splitter holds back, written out before the items close."""
        if self._think is not None:
            self._split_think(self._think.finish())

    def _content_parts(self, parts: list[Any]) -> None:
        for kind, text in mistral_parts(parts):
            if kind == "reasoning":
                self._reasoning(text)
            elif kind == "text":
                self._text("output_text", text, None)
            else:
                self._note("unknown_content_part")

    # -- tool calls --------------------------------------------------------------------------

    def _tool_fragment(self, tc: dict[str, Any]) -> None:
        if not isinstance(tc, dict):
            raise UpstreamProtocolError("a tool call that is not an object")
        key = tc.get("index")
        fn = tc.get("function") or {}
        call_id = tc.get("id")
        name = fn.get("name") if isinstance(fn, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if (
            not isinstance(fn, dict)
            or not isinstance(name, (str, type(None)))
            or not isinstance(call_id, (str, type(None)))
            or not isinstance(key, (int, str, type(None)))
        ):
            raise UpstreamProtocolError("a tool call of an unexpected shape")
        if key is None:  # Mistral omits the index: a fragment with a new id is a new call
            key = self._calls_key_for_id(call_id)
        call = self._calls.get(key)
        if call is not None and call_id and call_id != call.call_id and call.args:
            call = None  # the index was reused for a different call
        if call is None:
            call = self._open_call(key, call_id, name or "")
        if args:
            if not isinstance(args, str):  # a few servers send the arguments as an object
                args = json.dumps(args, ensure_ascii=False)
            self._append_args(call, args)

    def _calls_key_for_id(self, call_id: str | None) -> Any:
        for key, call in self._calls.items():
            if call_id is None or call.call_id == call_id:
                return key
        return ("noindex", len(self._open_calls), call_id)

    # -- helpers -----------------------------------------------------------------------------

    def _keep_details(self, details: Any) -> None:
        """Keep the backend's ``reasoning_details`` entries for sealing, streamed fragments merged:
        an entry of the same ``index`` and ``type`` as the last one continues it (its ``text`` and
        ``summary`` appended, other fields set when not empty, as a signature arrives last)."""
        if not isinstance(details, list):
            return
        kept = self._details
        for entry in details:
            if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
                continue
            last = kept[-1] if kept else None
            if last is None or last.get("index") != entry.get("index") or last["type"] != entry["type"]:
                kept.append(dict(entry))
                continue
            for key, value in entry.items():
                if key in ("text", "summary") and isinstance(value, str) and isinstance(last.get(key), str):
                    last[key] += value
                elif value is not None and value != "":
                    last[key] = value

    def _fail_upstream(self, error: Any) -> list[Out]:
        if isinstance(error, dict):
            message = str(error.get("message") or "upstream error")
            code = error.get("code")
            code = code if isinstance(code, str) and code else "upstream_error"
        else:
            message, code = str(error), "upstream_error"
        return self.fail(code, message)


def _logprobs(choice: dict[str, Any]) -> dict[str, Any] | None:
    lp = choice.get("logprobs")
    return lp if lp.__class__ is dict else None


class LegDriver:
    """Base of the machines that drive a leg of a ``ChatToResponsesStream`` their own way (a
    compaction's summary, a searching leg): the Response, its end and its diagnostics are the
    machine's."""

    def __init__(self, main: ChatToResponsesStream) -> None:
        self.main = main
        self.diagnostics = main.diagnostics

    @property
    def done(self) -> bool:
        return self.main.done

    @property
    def final_response(self) -> dict[str, Any] | None:
        return self.main.final_response

    def cancel(self, message: str) -> list[Any]:
        return self.main.cancel(message)
