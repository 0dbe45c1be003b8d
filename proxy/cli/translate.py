"""``crossfeed translate``: translate a captured SSE stream offline, for debugging a backend.

The bytes go through the same pure code the server runs: ``translators.pump.Pump`` (SSE decoding,
one JSON parse per event, protocol errors) driving ``ChatToResponsesStream`` (``--from chat --to
responses``) or ``ResponsesToChatStream`` (``--from responses --to chat``), and the relay's frame
renderers. Input is read incrementally, so a live stream can be piped in
(``curl -N ... | crossfeed translate --from chat --to responses``) and events appear as they arrive.

Ids are sequential (``resp_0001``...) and ``created_at`` is taken from the capture when it has one,
so translating the same file twice prints the same bytes: outputs can be diffed.

``--request`` (optional) is the client's request body:
  chat -> responses: a Responses request is echoed on the Response and mapped (as the server does)
    for the tool context (custom and namespaced tools); a Chat request is accepted too (its model,
    tools and sampling fields are echoed). Without it, the model is taken from the first chunk.
  responses -> chat: ``stream_options.include_usage`` of a Chat request decides the usage chunk
    (without one, usage is included); its ``model`` is the fallback model.

Exit status: 0 when the stream was translated, even into a failure (that is data, and it is printed);
2 when a file cannot be read or the request is not JSON.
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from crossfeed.proxy.cli.replay_case import CaseError, differences, events_of, load_case, normalized
from crossfeed.translators.errors import TranslationError
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import NO_TOOLS, BackendProfile, ToolContext
from crossfeed.translators.pump import Out, Pump
from crossfeed.translators.sse import DONE_FRAME, SSEDecoder, render_chat, render_responses

READ_SIZE = 64 * 1024
PEEK_LIMIT = 1024 * 1024  # give up looking for the first chunk's model after this many bytes
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class UsageError(Exception):
    """A problem with the command's inputs (exit 2)."""


# -- chat -> responses --------------------------------------------------------------------------


def _responses_request_from_chat(chat: dict[str, Any]) -> dict[str, Any]:
    """Just enough of a Responses request to echo, from a Chat request."""
    req: dict[str, Any] = {"model": chat.get("model"), "stream": True}
    tools = []
    for t in chat.get("tools") or ():
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            tools.append(
                {
                    "type": "function",
                    "name": fn["name"],
                    "description": fn.get("description"),
                    "parameters": fn.get("parameters"),
                    "strict": fn.get("strict"),
                }
            )
    if tools:
        req["tools"] = tools
    for key in ("temperature", "top_p", "parallel_tool_calls"):
        if key in chat:
            req[key] = chat[key]
    limit = chat.get("max_completion_tokens", chat.get("max_tokens"))
    if limit is not None:
        req["max_output_tokens"] = limit
    return req


class ForwardTranslator:
    """Chat chunks -> Responses events. The machine is built once the first chunk shows the model
    and creation time (or at once, when the request names the model)."""

    def __init__(self, request: dict[str, Any] | None, options: BackendProfile) -> None:
        self.notes: list[str] = []
        self._tools: ToolContext = NO_TOOLS
        self._request: dict[str, Any] | None = None
        if request is not None:
            if "messages" in request and "input" not in request:
                self._request = _responses_request_from_chat(request)
            else:
                self._request = dict(request)
                try:
                    from crossfeed.translators.forward.request import responses_request_to_chat

                    self._tools = responses_request_to_chat(request, options).tools
                except TranslationError as exc:
                    self.notes.append(f"the request does not map to chat ({exc.message}); no tool context")
        self._buf = b""
        self.pump: Pump | None = None
        self.machine: ChatToResponsesStream | None = None

    def _peek(self) -> tuple[bool, str | None, int | None]:
        """(found, model, created) from the first JSON event in the buffer."""
        decoder = SSEDecoder()
        try:
            events = decoder.feed(self._buf)
        except TranslationError:
            return True, None, None
        for _, data in events:
            if data == b"[DONE]":
                return True, None, None
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                return True, None, None
            if isinstance(obj, dict):
                created = obj.get("created")
                return True, obj.get("model"), created if isinstance(created, int) else None
            return True, None, None
        return False, None, None

    def _build(self, model: str | None, created: int | None) -> list[Out]:
        request = self._request or {"model": model or "unknown", "stream": True}
        if not request.get("model"):
            request["model"] = model or "unknown"
        clock = created if created is not None else int(time.time())
        self.machine = ChatToResponsesStream(request, ids=SequentialIds(), now=lambda: clock, tools=self._tools)
        self.pump = Pump(self.machine)
        return self.machine.start()

    def feed(self, data: bytes) -> list[Out]:
        if self.pump is not None:
            return self.pump.feed(data)
        self._buf += data
        found, model, created = self._peek()
        if not found and len(self._buf) < PEEK_LIMIT:
            return []
        out = self._build(model, created)
        assert self.pump is not None
        buf, self._buf = self._buf, b""
        return out + self.pump.feed(buf)

    def finish(self) -> list[Out]:
        out: list[Out] = []
        if self.pump is None:
            _, model, created = self._peek()
            out = self._build(model, created)
            assert self.pump is not None
            buf, self._buf = self._buf, b""
            out += self.pump.feed(buf)
        assert self.pump is not None
        return out + self.pump.finish()

    @property
    def diagnostics(self) -> dict[str, int]:
        return dict(self.machine.diagnostics) if self.machine else {}

    @property
    def events_in(self) -> int:
        return self.pump.events_in if self.pump else 0

    @staticmethod
    def ending(outputs: list[Out]) -> str:
        last = outputs[-1] if outputs else None
        kind = last.get("type") if isinstance(last, dict) else None  # no wire mode here: all dicts
        return str(kind).removeprefix("response.") if kind in _TERMINAL else "no terminal event"


# -- responses -> chat --------------------------------------------------------------------------


class _FinishAdapter:
    """Gives a machine whose ``finish()`` takes no ``clean`` argument the Pump's interface."""

    def __init__(self, machine: Any) -> None:
        self.machine = machine
        self._takes_clean = "clean" in inspect.signature(machine.finish).parameters

    @property
    def done(self) -> bool:
        return bool(self.machine.done)

    def feed(self, item: dict[str, Any]) -> list[Out]:
        return self.machine.feed(item)

    def finish(self, *, clean: bool = True) -> list[Out]:
        return self.machine.finish(clean=clean) if self._takes_clean else self.machine.finish()

    def fail(self, code: str, message: str) -> list[Out]:
        return self.machine.fail(code, message)


class ReverseTranslator:
    """Responses events -> chat.completion.chunk objects (then ``data: [DONE]``)."""

    def __init__(self, request: dict[str, Any] | None, options: BackendProfile) -> None:
        from crossfeed.translators.reverse.machine import ResponsesToChatStream

        self.notes: list[str] = []
        include_usage = True
        model = None
        if request is not None:
            model = request.get("model") if isinstance(request.get("model"), str) else None
            if "messages" in request:
                stream_options = request.get("stream_options")
                include_usage = bool(isinstance(stream_options, dict) and stream_options.get("include_usage"))
        kwargs: dict[str, Any] = {
            "include_usage": include_usage,
            "options": options,
            "ids": SequentialIds(),
            "now": lambda: int(time.time()),
        }
        if model and "model" in inspect.signature(ResponsesToChatStream).parameters:
            kwargs["model"] = model
        self.machine = ResponsesToChatStream(**kwargs)
        self.pump = Pump(_FinishAdapter(self.machine))

    def feed(self, data: bytes) -> list[Out]:
        return self.pump.feed(data)

    def finish(self) -> list[Out]:
        return self.pump.finish()

    @property
    def diagnostics(self) -> dict[str, int]:
        return dict(getattr(self.machine, "diagnostics", {}) or {})

    @property
    def events_in(self) -> int:
        return self.pump.events_in

    @staticmethod
    def ending(outputs: list[Out]) -> str:
        chunks = [o for o in outputs if isinstance(o, dict)]  # no wire mode here: all of them
        if not chunks:
            return "no output"
        last = chunks[-1]
        if last.get("error"):
            err = last["error"]
            return f"error ({err.get('code') if isinstance(err, dict) else err})"
        for chunk in reversed(chunks):
            for choice in chunk.get("choices") or ():
                if choice.get("finish_reason"):
                    return f"finish_reason {choice['finish_reason']}"
        return "no finish_reason"


# -- driver -------------------------------------------------------------------------------------


def _load_request(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the request file {path}: {exc.strerror or exc}") from None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"the request file {path} is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise UsageError(f"the request file {path} must hold a JSON object")
    return body


def _read_chunks(src: BinaryIO) -> Any:
    read = getattr(src, "read1", src.read)
    while True:
        chunk = read(READ_SIZE)
        if not chunk:
            return
        yield chunk


_SSE_DATA = re.compile(rb"^data: ?(\{.*)$", re.MULTILINE)


def other_api(head: bytes, source: str) -> str | None:
    """A hint when the stream's first events are the other API's (``--from`` the wrong way)."""
    for m in _SSE_DATA.finditer(head):
        try:
            first = orjson.loads(m.group(1))
        except orjson.JSONDecodeError:
            continue
        if not isinstance(first, dict):
            return None
        responses = str(first.get("type", "")).startswith("response.")
        chat = first.get("object") == "chat.completion.chunk" or "choices" in first
        if source == "chat" and responses:
            return "this is a Responses API stream (its events are response.*): use --from responses --to chat"
        if source == "responses" and chat and not responses:
            return "this is a Chat Completions stream (chat.completion.chunk): use --from chat --to responses"
        return None
    return None


def translate_stream(
    src: BinaryIO,
    dst: BinaryIO,
    *,
    source: str,
    request: dict[str, Any] | None = None,
    jsonl: bool = False,
    reasoning_field: str = "reasoning_content",
) -> dict[str, Any]:
    """Translate ``src`` to ``dst``; returns a summary (events in/out, ending, notes, diagnostics)."""
    options = BackendProfile(reasoning_field=reasoning_field)
    translator: ForwardTranslator | ReverseTranslator = (
        ForwardTranslator(request, options) if source == "chat" else ReverseTranslator(request, options)
    )
    to_chat = source == "responses"
    render = render_chat if to_chat else render_responses
    outputs: list[Out] = []

    def emit(out: list[Out]) -> None:
        if not out:
            return
        outputs.extend(out)
        if jsonl:
            dst.write(b"".join(orjson.dumps(o) + b"\n" for o in out))
        else:
            dst.write(render(out))
        dst.flush()

    head = b""
    for chunk in _read_chunks(src):
        if len(head) < 65536:
            head += chunk
        emit(translator.feed(chunk))
    other = other_api(head, source)
    if other:
        translator.notes.append(other)
    emit(translator.finish())
    if to_chat and not jsonl:
        dst.write(DONE_FRAME)
        dst.flush()
    return {
        "events_in": translator.events_in,
        "events_out": len(outputs),
        "ending": translator.ending(outputs),
        "notes": translator.notes,
        "diagnostics": translator.diagnostics,
    }


def run(args: argparse.Namespace) -> int:
    if args.case is not None:
        return run_case(args)
    if args.check:
        print("crossfeed translate: --check needs --case", file=sys.stderr)
        return 2
    if args.source is None or args.target is None:
        print("crossfeed translate: --from and --to are required (or --case FILE)", file=sys.stderr)
        return 2
    path: Path | None = args.file
    try:
        request = _load_request(args.request)
        if path is not None and str(path) != "-":
            try:
                src: BinaryIO = path.open("rb")
            except OSError as exc:
                raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        else:
            src = sys.stdin.buffer
            if sys.stdin.isatty():
                print("crossfeed translate: reading the stream from stdin (end with Ctrl-D)", file=sys.stderr)
    except UsageError as exc:
        print(f"crossfeed translate: {exc}", file=sys.stderr)
        return 2
    try:
        with src:
            summary = translate_stream(
                src,
                sys.stdout.buffer,
                source=args.source,
                request=request,
                jsonl=args.jsonl,
                reasoning_field=args.reasoning_field,
            )
    except BrokenPipeError:  # `| head`: the reader is gone, which is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 0
    except KeyboardInterrupt:
        return 130
    for note in summary["notes"]:
        print(f"crossfeed translate: note: {note}", file=sys.stderr)
    diag = summary["diagnostics"]
    extra = f"; anomalies: {', '.join(f'{k}={v}' for k, v in sorted(diag.items()))}" if diag else ""
    print(
        f"crossfeed translate: {args.source} -> {args.target}: {summary['events_in']} events in, "
        f"{summary['events_out']} out, ended: {summary['ending']}{extra}",
        file=sys.stderr,
    )
    return 0


def run_case(args: argparse.Namespace) -> int:
    """``--case FILE``: replay a case saved from the inspector; ``--check``: compare with its events."""
    try:
        case = load_case(args.case)
    except CaseError as exc:
        print(f"crossfeed translate: {exc}", file=sys.stderr)
        return 2
    for flag, key in (("--from", "source"), ("--to", "target")):
        given = getattr(args, key)
        if given is not None and given != case["from" if key == "source" else "to"]:
            print(
                f"crossfeed translate: {flag} {given} contradicts the case ({case['from']} -> {case['to']})",
                file=sys.stderr,
            )
            return 2
    jsonl = bool(case.get("jsonl")) or args.jsonl
    out = io.BytesIO() if args.check else sys.stdout.buffer
    request = case.get("request") if isinstance(case.get("request"), dict) else None
    summary = translate_stream(
        io.BytesIO(case["upstream"].encode()),
        out,
        source=case["from"],
        request=request,
        jsonl=jsonl,
        reasoning_field=str(case.get("reasoning_field") or "reasoning_content"),
    )
    for note in case.get("notes") or ():
        print(f"crossfeed translate: case note: {note}", file=sys.stderr)
    if not args.check:
        print(
            f"crossfeed translate: {case['from']} -> {case['to']}: {summary['events_out']} events, ended: {summary['ending']}",
            file=sys.stderr,
        )
        return 0
    assert isinstance(out, io.BytesIO)
    recorded = normalized(events_of(case["events"].encode(), bool(case.get("jsonl"))))
    replayed = normalized(events_of(out.getvalue(), jsonl))
    found = differences(recorded, replayed)
    if found:
        print("crossfeed translate: the replay differs from the recorded events:", file=sys.stderr)
        for line in found:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(
        f"crossfeed translate: the replay matches the {len(recorded)} recorded events (ids and timestamps aside)",
        file=sys.stderr,
    )
    return 0
