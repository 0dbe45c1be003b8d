"""The reverse stream for a chat request with ``stop`` sequences: ``StoppingChatStream``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

from crossfeed.translators.ids import IdFactory
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import RunTaken
from crossfeed.translators.reverse.body import chat_usage
from crossfeed.translators.reverse.machine import DONE, ResponsesToChatStream
from crossfeed.translators.reverse.stop_sequences import StopMatcher
from crossfeed.translators.reverse.stream_state import OUTPUT_TEXT, REASONING_KINDS
from crossfeed.translators.sse import Framing, Out


class TokenLogprob(NamedTuple):
    """A logprob entry held with the content: where its token starts in the content fed."""

    start: int
    entry: dict[str, Any]


class StoppingChatStream(ResponsesToChatStream):
    """``ResponsesToChatStream`` for a chat request with ``stop``, which the Responses API lacks:
    crossfeed cuts the content at the first stop sequence itself (translators/reverse/stop_sequences.py).
    A plain ``ResponsesToChatStream`` serves every request without ``stop``: this class costs
    those nothing.

    Rules (on top of the stream's):
    - Only ``delta.content`` is matched: reasoning, refusals and tool-call arguments are never cut.
      Content that may be the start of a stop sequence is held back, and sent as soon as the
      next text shows it is not one (or before the annotations / finish chunk, or an error).
    - At the cut: the content up to the stop sequence (the sequence itself is not sent), an open
      custom call's closing quote, the finish chunk with ``finish_reason: "stop"``, then with
      ``include_usage`` the usage chunk; then ``done``: the driver stops reading and closes the
      upstream request, so the backend stops generating. The upstream has reported no usage by
      then, so the usage is estimated as crossfeed estimates tokens elsewhere (4 bytes a token):
      ``prompt_tokens`` is the caller's ``prompt_tokens``, ``completion_tokens`` counts the
      content, reasoning, refusal and arguments sent (``reasoning_tokens`` the reasoning); the
      diagnostics count ``stop_sequence`` and ``usage_estimated``. ``usage`` (the driver's
      accounting) is that estimate as ``{input_tokens, output_tokens}``.
    - Logprob entries go out with the text their token starts in; those of text past the cut
      are dropped with it.
    - Chunks are dicts (no wire mode): content must be matched before it is rendered.
    """

    __slots__ = ("_matcher", "_fed", "_sent", "_sent_bytes", "_lps", "_prompt_tokens")

    frame_readers = None  # every event goes through ``feed`` (below)

    def __init__(
        self,
        *,
        stop: Sequence[str],
        prompt_tokens: int = 0,
        include_usage: bool,
        options: BackendProfile,
        ids: IdFactory,
        now: Callable[[], int],
        model: str | None = None,
        wire: bool | Framing = False,
        max_output_tokens: int | None = None,
    ) -> None:
        super().__init__(
            include_usage=include_usage,
            options=options,
            ids=ids,
            now=now,
            model=model,
            wire=False,
            max_output_tokens=max_output_tokens,
        )
        self._matcher = StopMatcher(stop)
        self._fed = 0  # characters of content given to the matcher
        self._sent = 0  # characters of content sent
        self._sent_bytes = 0
        self._lps: list[TokenLogprob] = []  # not sent yet
        self._prompt_tokens = prompt_tokens

    def feed_frame(self, data: bytes) -> list[Out] | None:
        return None  # every event goes through ``feed``, where the stop sequences are matched

    def feed_run(self, read: bytes) -> RunTaken | None:
        return None  # likewise

    def feed(self, event: dict[str, Any]) -> list[Out]:
        return self._stopping(super().feed(event))

    def finish(self, *, clean: bool = True) -> list[Out]:
        return self._stopping(super().finish(clean=clean))

    def fail(self, code: str, message: str) -> list[Out]:
        return self._stopping(super().fail(code, message))

    def _stopping(self, outputs: list[Out]) -> list[Out]:
        if not outputs:
            return outputs
        # The stream below runs without wire mode (``wire=False`` above): every output is a dict.
        outs = cast(list[dict[str, Any]], outputs)
        res: list[Out] = []
        matcher = self._matcher
        for out in outs:
            choices = out.get("choices")
            if choices:
                choice = choices[0]
                delta = choice["delta"]
                text = delta.get("content")
                if text and "role" not in delta:
                    lps = choice["logprobs"]
                    if lps is not None:  # the tokens end with the text (a separator may lead it)
                        entries = lps["content"]
                        start = self._fed + max(0, len(text) - sum(len(e["token"] or "") for e in entries))
                        for entry in entries:
                            self._lps.append(TokenLogprob(start, entry))
                            start += len(entry["token"] or "")
                    self._fed += len(text)
                    released = matcher.feed(text)
                    if released:
                        res.append(self._released(out, released))
                    if matcher.stopped:
                        res += self._stop_here()
                        return res
                    continue
                if choice["finish_reason"] is not None or "annotations" in delta:
                    res += self._flush()
            elif "error" in out:
                res += self._flush()
            res.append(out)
        return res

    def _released(self, chunk: dict[str, Any], text: str, *, last: bool = False) -> dict[str, Any]:
        """``chunk`` carrying ``text``, the content released, with the logprobs of its tokens."""
        choice = chunk["choices"][0]
        choice["delta"]["content"] = text
        self._sent += len(text)
        self._sent_bytes += len(text.encode())
        lps = self._lps
        if lps:
            upto = len(lps) if last else next((i for i, held in enumerate(lps) if held.start >= self._sent), len(lps))
            choice["logprobs"] = {"content": [held.entry for held in lps[:upto]], "refusal": None} if upto else None
            del lps[:upto]
        else:
            choice["logprobs"] = None
        return chunk

    def _flush(self) -> list[Out]:
        """The end of the content (annotations, finish chunk, an error): release what is held."""
        tail = self._matcher.finish()
        if not tail:
            self._lps.clear()
            return []
        return [self._released(self._chunk({"content": tail}), tail, last=True)]

    def _stop_here(self) -> list[Out]:
        self._lps.clear()
        out = self._close_custom_calls()
        out.append(self._chunk({}, "stop"))
        self._count("stop_sequence")
        if self.usage is None:  # cut before the terminal event: nothing reported, estimated
            self.usage = self._estimate()
            usage = None
            if self._usage_on:
                self._count("usage_estimated")
                usage = self._estimated_chat_usage()
        else:  # the terminal event's output was being replayed: its usage is the upstream's
            usage = chat_usage(self.usage, "response.usage") if self._usage_on else None
        if usage is not None:
            out.append(self._usage_chunk(usage))
        self.finish_reason = "stop"
        self._phase = DONE
        self.done = True
        return out

    def _estimate(self) -> dict[str, int]:
        other = sum(len("".join(p.pieces).encode()) for (kind, _, _), p in self._parts.items() if kind != OUTPUT_TEXT)
        args = sum(len("".join(c.pieces).encode()) for c in self._calls.values())
        return {"input_tokens": self._prompt_tokens, "output_tokens": math.ceil((self._sent_bytes + other + args) / 4)}

    def _estimated_chat_usage(self) -> dict[str, Any]:
        reasoning = sum(
            len("".join(p.pieces).encode()) for (kind, _, _), p in self._parts.items() if kind in REASONING_KINDS
        )
        assert self.usage is not None
        prompt, completion = self.usage["input_tokens"], self.usage["output_tokens"]
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": math.ceil(reasoning / 4)},
        }
