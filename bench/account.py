"""Per-request account: where one short turn's CPU goes, phase by phase, in instructions and time.

    .venv/bin/python bench/account.py                       # both passes (~1.5 min on 2 cores)
    .venv/bin/python bench/account.py --no-callgrind        # time only (~1 min)
    .venv/bin/python bench/account.py --tree /tmp/cf-base   # another build (an exported tree)
    .venv/bin/python bench/account.py --json account.json --scenarios forward,reverse

Scenarios:

  forward   a Responses client -> crossfeed -> the fake chat upstream (bench/upstream.py), one
            20-delta text stream (24 upstream frames): the body of bench/run.py's cells
  reverse   a chat client -> crossfeed (``--upstream-api responses``) -> the fake Responses
            upstream, one 20-delta text stream (28 upstream frames)
  codex3mb  the forward turn with a 3 MiB Codex history: a recorded Codex request
            (tests/fixtures/codex/reasoning.3.request.json) whose input is grown with realistic
            turns (user messages, reasoning items with sealed ``encrypted_content``, exec_command
            calls with long outputs, apply_patch calls, assistant messages); the same process
            then runs its yardstick, ``json.loads`` + ``json.dumps`` of the same body

How it measures. crossfeed runs as ``proxy serve`` in its own process, with hooks installed
before the app is made (this file, ``--serve-hooked``): the functions that own each phase are
wrapped, and every wrapper entry and exit *cuts* the process's timeline. The cost between two
cuts belongs to the phase on top of a stack (nested phases: the mapping inside the handler, the
terminal event inside the relay); the first phase of the stack is aiohttp's own work between two
handlers (the next request's head, the end of the last response). One request at a time on a
keep-alive connection, so nothing else runs in the process: the phases add up to the request.

- time pass: each cut reads the thread's CPU clock (``time.thread_time_ns``), no valgrind;
  medians over ``--requests`` requests. Depends on the machine and its load.
- callgrind pass: the same server under ``valgrind --tool=callgrind --instr-atstart=no``; each
  cut is a callgrind client request (``CALLGRIND_DUMP_STATS_AT``, from a 20-line C extension
  built here with ``cc``), so every dump holds the instructions of one segment. Instructions do
  not depend on the machine's load: a later change shows which phase it moved.

Each request is run twice per scenario: ``full`` (every hook) and ``bare`` (only one cut per
request: the true total). A cut costs a few hundred instructions (calibrated in the same process
and subtracted per segment); the per-chunk hooks (the sink's render, the reverse pump's read)
cost a little per chunk: ``full`` minus ``bare`` is printed as the residue.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# The rows of the account, in the order a forward turn meets them.
PHASES: list[tuple[str, str]] = [
    ("http", "aiohttp: handler task, response end, keep-alive"),
    ("reqin", "request bytes in (aiohttp server protocol)"),
    ("glue", "middlewares and handler glue"),
    ("read", "request read and parse"),
    ("route", "routing (model -> upstream)"),
    ("history", "history resolution"),
    ("mapping", "mapping"),
    ("features", "feature checks (compaction, hosted tools)"),
    ("exchange", "exchange set-up and wrap-up"),
    ("upstream", "upstream request (to its headers)"),
    ("headers", "response headers"),
    ("lifecycle", "lifecycle events"),
    ("chunks", "per-chunk work (relay)"),
    ("upin", "upstream bytes in (aiohttp client protocol)"),
    ("terminal", "terminal event and Response body"),
    ("store", "store hand-off"),
    ("summary", "summary line"),
    ("logwrite", "log batch write"),
    ("metrics", "metrics"),
    ("gc", "cyclic GC passes"),
]
YARDSTICK = [
    ("json.loads", "json.loads"),
    ("json.dumps", "json.dumps"),
    ("orjson.loads", "orjson.loads"),
    ("orjson.dumps", "orjson.dumps"),
]
REASONING_KEY = "bench-account-key"  # the seal key of the server (so the grown history's tokens open)
# Seconds between two requests of the callgrind pass: the log batch (written 0.1 s after its
# first line; each request takes longer than that under callgrind) goes out between them, not in
# the middle of the next one. The time pass sends them back to back, caches warm, as under load:
# its log batches hold several requests' lines.
GAP = 0.12


# ============================================================================ the hooked server

MARKER_C = r"""
#include <Python.h>
#include <stdio.h>
#include <valgrind/callgrind.h>
/* cut(label, seq, phase): dump the counts since the last dump as "label|seq|phase" (and zero them) */
static PyObject *cut(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    char name[256];
    if (n != 3) { PyErr_SetString(PyExc_TypeError, "cut(label, seq, phase)"); return NULL; }
    const char *label = PyUnicode_AsUTF8(args[0]);
    long seq = PyLong_AsLong(args[1]);
    const char *phase = PyUnicode_AsUTF8(args[2]);
    if (!label || !phase || (seq == -1 && PyErr_Occurred())) return NULL;
    snprintf(name, sizeof name, "%s|%ld|%s", label, seq, phase);
    CALLGRIND_DUMP_STATS_AT(name);
    Py_RETURN_NONE;
}
static PyObject *start(PyObject *self, PyObject *unused) { CALLGRIND_START_INSTRUMENTATION; Py_RETURN_NONE; }
static PyObject *running(PyObject *self, PyObject *unused) { return PyLong_FromLong(RUNNING_ON_VALGRIND); }
static PyMethodDef M[] = {{"cut", (PyCFunction)(void (*)(void))cut, METH_FASTCALL, ""},
                          {"start", start, METH_NOARGS, ""}, {"running", running, METH_NOARGS, ""},
                          {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "cf_cgmark", NULL, -1, M};
PyMODINIT_FUNC PyInit_cf_cgmark(void) { return PyModule_Create(&D); }
"""


def build_marker(where: Path) -> Path:
    """Compile the callgrind client-request module into ``where`` (cc, Python's and valgrind's headers)."""
    where.mkdir(parents=True, exist_ok=True)
    src = where / "cf_cgmark.c"
    out = where / ("cf_cgmark" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    if out.exists() and src.exists() and src.read_text() == MARKER_C:
        return where
    src.write_text(MARKER_C)
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-O2", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"], str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"could not build the callgrind marker ({' '.join(cmd)}):\n{proc.stderr}")
    return where


class Ledger:
    """The process's timeline, cut into segments; each one is the cost of the phase on top of the stack."""

    def __init__(self, dump: Callable[[str, int, str], None] | None) -> None:
        self.dump = dump  # callgrind: a client request per cut (cf_cgmark.cut); None: the thread's CPU clock
        self.stack = ["http"]
        self.label = "-"  # "-": not measured
        self.seq = 0
        self.full = True
        self.acc: dict[str, list[int]] = {}  # time pass: segment name -> [ns, segments]
        self.reads: list[tuple[str, int, int]] = []  # (label, seq, upstream reads of the relay)
        self.last = time.thread_time_ns()

    def cut(self) -> None:
        dump = self.dump
        if dump is not None:
            dump(self.label, self.seq, self.stack[-1])
        else:
            self._tick()

    def _tick(self) -> None:
        now = time.thread_time_ns()
        name = f"{self.label}|{self.seq}|{self.stack[-1]}"
        slot = self.acc.get(name)
        if slot is None:
            slot = self.acc[name] = [0, 0]
        slot[0] += now - self.last
        slot[1] += 1
        self.last = time.thread_time_ns()

    def push(self, phase: str) -> None:
        dump = self.dump
        if dump is not None:
            dump(self.label, self.seq, self.stack[-1])
        else:
            self._tick()
        self.stack.append(phase)

    def pop(self) -> None:
        dump = self.dump
        if dump is not None:
            dump(self.label, self.seq, self.stack[-1])
        else:
            self._tick()
        self.stack.pop()


L = Ledger(None)


def sync_phase(f: Callable[..., Any], phase: str) -> Callable[..., Any]:
    def hooked(*a: Any, **k: Any) -> Any:
        L.push(phase)
        try:
            return f(*a, **k)
        finally:
            L.pop()

    hooked.__wrapped__ = f  # type: ignore[attr-defined]
    return hooked


def _relay_hook(f: Callable[..., Any]) -> Callable[..., Any]:
    """The relay on the per-chunk row; how many upstream reads it made, per request."""

    async def hooked(*a: Any, **k: Any) -> Any:
        L.push("chunks")
        try:
            stats = await f(*a, **k)
        finally:
            L.pop()
        L.reads.append((L.label, L.seq, getattr(stats, "chunks_in", 0)))
        return stats

    return hooked


def _sync_as(phase: str, f: Callable[..., Any]) -> Callable[..., Any]:
    return sync_phase(f, phase)


def async_phase(f: Callable[..., Any], phase: str) -> Callable[..., Any]:
    async def hooked(*a: Any, **k: Any) -> Any:
        L.push(phase)
        try:
            return await f(*a, **k)
        finally:
            L.pop()

    hooked.__wrapped__ = f  # type: ignore[attr-defined]
    return hooked


class Hooks:
    """Attributes replaced in the full mode and restored in the bare one."""

    def __init__(self) -> None:
        self.patches: list[tuple[Any, Any, Any, Any]] = []
        self.missing: list[str] = []

    def add(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name, None)
        if original is None:
            self.missing.append(f"{getattr(owner, '__name__', owner)}.{name}")
            return
        self.patches.append((owner, name, original, make(original)))

    def add_item(self, owner: dict[Any, Any], key: Any, make: Callable[[Any], Any]) -> None:
        original = owner.get(key)
        if original is None:
            self.missing.append(f"[{key!r}]")
            return
        self.patches.append((owner, key, original, make(original)))

    def apply(self, full: bool) -> None:
        for owner, name, original, hooked in self.patches:
            if isinstance(owner, dict):
                owner[name] = hooked if full else original
            else:
                setattr(owner, name, hooked if full else original)


HOOKS = Hooks()
_LIFE_TYPES = frozenset({"response.created", "response.in_progress"})
_END_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})


def _render_hook(render: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """The sink's render, with the start events and the last ones on their own rows (full mode)."""

    def hooked(events: list[Any]) -> Any:
        last = events[-1]
        if last.__class__ is bytes:
            return render(events)
        phase = None
        t = last.get("type")
        if t is not None:  # a Responses event
            phase = "lifecycle" if t in _LIFE_TYPES else "terminal" if t in _END_TYPES else None
        else:  # a chat chunk: the role chunk, or the finish / usage chunk
            choices = last.get("choices")
            if not choices or choices[0].get("finish_reason") or "error" in last:
                phase = "terminal"
            elif "role" in (choices[0].get("delta") or {}):
                phase = "lifecycle"
        if phase is None:
            return render(events)
        L.push(phase)
        try:
            return render(events)
        finally:
            L.pop()

    return hooked


_UPSTREAM_LIFE = frozenset({b"response.created", b"response.in_progress", b"response.queued"})
_UPSTREAM_END = frozenset({b"response.completed", b"response.incomplete", b"response.failed"})


def _upstream_phase(t: bytes | str) -> str | None:
    """The row of a Responses upstream event (reverse): its lifecycle, or the closing events
    (``*.done`` and the terminal one) with the Response they carry; None for the per-chunk row."""
    b = t.encode() if isinstance(t, str) else t
    if b in _UPSTREAM_LIFE:
        return "lifecycle"
    if b in _UPSTREAM_END or b.endswith(b".done"):
        return "terminal"
    return None


def _loads_hook(loads: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """The pump's JSON parse (reverse): the parse of a lifecycle or closing event on its row."""

    def hooked(data: bytes) -> Any:
        if data.startswith(b'{"type":"response.output_text.delta"') or not data.startswith(b'{"type":"'):
            return loads(data)
        phase = _upstream_phase(data[9 : data.find(b'"', 9)])
        if phase is None:
            return loads(data)
        L.push(phase)
        try:
            return loads(data)
        finally:
            L.pop()

    return hooked


class _LogProxy:
    """The summary line's logger: ``info`` on its own row (full mode)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.info = sync_phase(inner.info, "summary")

    def set_full(self, full: bool) -> None:
        self.info = sync_phase(self._inner.info, "summary") if full else self._inner.info

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _gc_hook(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        L.push("gc")
    elif L.stack[-1] == "gc":
        L.pop()


def _extra_hook(h: Hooks, spec: str) -> None:
    """``module:attr.path=phase`` (``--hook``): one more function on a row of its own."""
    import importlib
    import inspect

    target, _, phase = spec.partition("=")
    module, _, path = target.partition(":")
    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    f = getattr(owner, name, None)
    if not callable(f):
        h.missing.append(target)
        return
    wrap = async_phase if inspect.iscoroutinefunction(f) else sync_phase
    h.add(owner, name, functools.partial(lambda w, p, fn: w(fn, p), wrap, phase or name))


def install_hooks(marker: Any) -> None:
    """Wrap the functions that own the phases (before ``create_app`` runs)."""
    from aiohttp import client_proto, web_protocol

    import crossfeed.proxy.app as app_mod
    import crossfeed.proxy.runtime.logs as logs
    import crossfeed.proxy.runtime.observability as obs
    import crossfeed.proxy.streaming.lifecycle as lifecycle
    import crossfeed.proxy.turns.exchange as exchange
    import crossfeed.proxy.turns.forward as forward
    import crossfeed.proxy.turns.reverse as reverse
    from crossfeed.translators.forward.machine import ChatToResponsesStream
    from crossfeed.translators.reverse.machine import ResponsesToChatStream

    lifecycle.PROBE_INTERVAL = 3600.0  # one probe at start-up, none while measuring
    h = HOOKS
    h.add(app_mod, "read_body", lambda f: async_phase(f, "read"))
    h.add(app_mod, "route", lambda f: sync_phase(f, "route"))
    h.add(forward, "load_history", lambda f: async_phase(f, "history"))
    h.add(forward, "map_forward", lambda f: sync_phase(f, "mapping"))
    h.add(forward, "forward_streamed", lambda f: async_phase(f, "features"))
    h.add(forward, "forward_turn", lambda f: async_phase(f, "exchange"))
    h.add(app_mod, "reverse_streamed", lambda f: async_phase(f, "exchange"))
    h.add(app_mod, "reverse_now", lambda f: async_phase(f, "exchange"))
    h.add(reverse, "chat_request_to_responses", lambda f: sync_phase(f, "mapping"))
    h.add(exchange, "open_leg", lambda f: async_phase(f, "upstream"))
    h.add(exchange, "relay", _relay_hook)
    # The protocols' data_received: an event-loop callback, whatever phase is on the stack when
    # the bytes arrive; on rows of their own so that the phases do not depend on timing. (uvloop
    # binds data_received when a connection opens: each mode runs on new connections, see _begin.)
    h.add(client_proto.ResponseHandler, "data_received", lambda f: sync_phase(f, "upin"))
    h.add(web_protocol.RequestHandler, "data_received", lambda f: sync_phase(f, "reqin"))
    if os.environ.get("CF_ACCOUNT_DIRECTION") == "reverse":  # the upstream's events, sorted per event
        import crossfeed.translators.pump as pump
        import crossfeed.translators.reverse.machine as r2c
        import crossfeed.translators.reverse.text_runs as runs

        h.add(pump, "_loads", _loads_hook)
        h.add(r2c, "decode_quiet", _loads_hook)  # the typed decodes of the frames around the deltas
        h.add(runs, "closing_event", _loads_hook)
        h.add(ResponsesToChatStream, "_first", lambda f: sync_phase(f, "lifecycle"))
        for t in list(r2c._HANDLERS):
            phase = _upstream_phase(t) if isinstance(t, str) else None
            if phase is not None:
                h.add_item(r2c._HANDLERS, t, functools.partial(_sync_as, phase))

    def saver(f: Callable[..., Any]) -> Callable[..., Any]:
        def hooked(*a: Any, **k: Any) -> Any:
            return async_phase(f(*a, **k), "store")

        return hooked

    h.add(exchange, "final_saver", saver)

    def opener(f: Callable[..., Any]) -> Callable[..., Any]:
        def hooked(request: Any, render: Any, **k: Any) -> Any:
            response, open_sink = f(request, _render_hook(render), **k)
            return response, async_phase(open_sink, "headers")

        return hooked

    h.add(app_mod, "sse_opener", opener)
    for cls in (ChatToResponsesStream, ResponsesToChatStream):
        h.add(cls, "__init__", lambda f: sync_phase(f, "lifecycle"))
    h.add(ChatToResponsesStream, "start", lambda f: sync_phase(f, "lifecycle"))
    h.add(ChatToResponsesStream, "finish", lambda f: sync_phase(f, "terminal"))
    h.add(obs, "record_request", lambda f: sync_phase(f, "metrics"))
    if hasattr(obs, "summary_line"):  # the line written without structlog's wrapper (a4dd5bf on)
        h.add(obs, "summary_line", lambda f: sync_phase(f, "summary"))
    for spec in filter(None, os.environ.get("CF_ACCOUNT_HOOKS", "").split(",")):
        _extra_hook(h, spec)
    h.add(logs.BatchedLines, "flush", lambda f: sync_phase(f, "logwrite"))

    observe = obs.observe_middleware

    async def observe_hooked(request: Any, handler: Any) -> Any:
        if request.path.startswith("/_account"):
            L.label = "-"
            L.cut()
            try:
                return await observe(request, handler)
            finally:
                L.cut()
                L.label = _STATE["label"]
                L.seq = 0
        L.seq += 1
        L.cut()  # aiohttp's part: the head of this request (and the end of the one before)
        if not L.full:
            return await observe(request, handler)
        L.stack.append("glue")
        try:
            return await observe(request, handler)
        finally:
            L.pop()

    observe_hooked.__middleware_version__ = 1  # type: ignore[attr-defined]  # what @web.middleware sets
    app_mod.observe_middleware = observe_hooked
    make_app = app_mod.create_app

    def create_app(*a: Any, **k: Any) -> Any:
        from aiohttp import web

        app = make_app(*a, **k)
        if not hasattr(obs, "summary_line"):  # the line is the logger's info: on its row through a proxy
            log = _LogProxy(app[obs.SUMMARY_LOG])
            app[obs.SUMMARY_LOG] = log
            _STATE["log"] = log
        for path, fn in (
            ("/_account/begin", _begin),
            ("/_account/end", _end),
            ("/_account/calibrate", _calibrate),
            ("/_account/report", _report),
        ):
            app.router.add_get(path, fn)
        app.router.add_post("/_account/yardstick", _yardstick)
        _STATE["web"] = web
        return app

    app_mod.create_app = create_app
    _STATE["marker"] = marker
    _set_full(True)


_STATE: dict[str, Any] = {"label": "-", "started": False}


def _set_full(full: bool) -> None:
    L.full = full
    HOOKS.apply(full)
    log = _STATE.get("log")
    if log is not None:
        log.set_full(full)
    if full and _gc_hook not in gc.callbacks:
        gc.callbacks.append(_gc_hook)
    elif not full and _gc_hook in gc.callbacks:
        gc.callbacks.remove(_gc_hook)


def _json(data: Any) -> Any:
    web = _STATE["web"]
    return web.Response(body=json.dumps(data).encode(), content_type="application/json")


def _count_from_now() -> None:
    marker = _STATE["marker"]
    if marker is not None and not _STATE["started"]:
        marker.start()  # callgrind counts from here on (--instr-atstart=no)
        _STATE["started"] = True


async def _begin(request: Any) -> Any:
    mode = request.query.get("mode", "full")
    _STATE["label"] = request.query["label"]
    if mode == "profile":  # cProfile over the requests until /_account/end, no hooks
        import cProfile

        _set_full(False)
        _STATE["profile"] = (cProfile.Profile(), request.query["out"])
        _STATE["profile"][0].enable()
        return _json({"ok": True})
    _count_from_now()
    _set_full(mode == "full")
    _drop_upstream_connections(request)
    return _json({"ok": True})


def _drop_upstream_connections(request: Any) -> None:
    """Close the pooled upstream connections: the next ones bind the mode's data_received."""
    from crossfeed.proxy.keys import SESSION

    connector = request.app[SESSION].connector
    for conns in list(getattr(connector, "_conns", {}).values()):
        for proto, _ in list(conns):
            proto.close()


async def _end(request: Any) -> Any:
    profile = _STATE.pop("profile", None)
    if profile is not None:
        profile[0].disable()
        profile[0].dump_stats(profile[1])
    _STATE["label"] = "-"
    _set_full(True)
    return _json({"ok": True})


async def _calibrate(request: Any) -> Any:
    """Back-to-back cuts in this process: what a cut and its wrapper add to a segment."""
    _count_from_now()
    noop = sync_phase(lambda: None, "calib")
    L.label = "calibrate"
    for i in range(1, 41):
        L.seq = i
        noop()
    L.label = "-"
    return _json({"ok": True})


async def _yardstick(request: Any) -> Any:
    """json.loads + json.dumps (and orjson's) of the body, on their own rows, as many times as asked."""
    import orjson

    raw = await request.read()
    label = request.query["label"]
    reps = int(request.query.get("reps", "1"))
    gc.collect()
    L.label = label
    for i in range(1, reps + 1):
        L.seq = i
        L.push("json.loads")
        obj = json.loads(raw)
        L.pop()
        L.push("json.dumps")
        json.dumps(obj)
        L.pop()
        del obj
        L.push("orjson.loads")
        obj = orjson.loads(raw)
        L.pop()
        L.push("orjson.dumps")
        orjson.dumps(obj)
        L.pop()
        del obj
    L.label = "-"
    return _json({"ok": True})


async def _report(request: Any) -> Any:
    from crossfeed import proxy, translators

    return _json(
        {
            "acc": L.acc,
            "reads": L.reads,
            "missing_hooks": HOOKS.missing,
            "proxy": proxy.__file__,
            "translators": translators.__file__,
        }
    )


def serve_hooked(argv: list[str]) -> int:
    marker = None
    if os.environ.get("CF_ACCOUNT_MARKER"):
        sys.path.insert(0, os.environ["CF_ACCOUNT_MARKER"])
        import cf_cgmark  # type: ignore[import-not-found]

        if cf_cgmark.running():
            marker = cf_cgmark
            L.dump = cf_cgmark.cut
    install_hooks(marker)
    from crossfeed.proxy.cli.main import main as cli_main

    return cli_main(argv)


# ============================================================================ the request bodies


def short_body(api: str, model: str) -> bytes:
    sys.path.insert(0, str(HERE))
    import loadgen

    return loadgen.request_body(api, model)


_WORD_TEXT = (
    "value config request response stream chunk index offset buffer parser handler session client server "
    "token model payload header status result error retry timeout limit cache store record item "
    "event frame delta usage output input message reasoning summary tool call function args"
)
_WORDS = tuple(_WORD_TEXT.split())


def _code_lines(rng: random.Random, n: int) -> str:
    """Python-looking source, as ``sed -n`` or ``cat`` would print it in a tool output."""
    out = []
    indent = 0
    for i in range(n):
        w = rng.sample(_WORDS, 3)
        kind = rng.random()
        if kind < 0.12:
            indent = 0
            out.append(f"def {w[0]}_{w[1]}({w[2]}: dict[str, Any], *, limit: int = {rng.randint(1, 99)}) -> list[str]:")
            indent = 4
        elif kind < 0.2:
            out.append(" " * indent + f'"""Return the {w[0]} of the {w[1]} (see {w[2]}.py, §{i})."""')
        elif kind < 0.35:
            out.append(" " * indent + f"if {w[0]}.get({w[1]!r}) is None and len({w[2]}) > {rng.randint(0, 64)}:")
            out.append(" " * (indent + 4) + f'raise ValueError(f"{w[0]} {{ {w[1]}!r }} is not a {w[2]} \\u2192 retry")')
        elif kind < 0.5:
            out.append(" " * indent + f"for {w[0]} in {w[1]}.{w[2]}s():")
            out.append(" " * (indent + 4) + f"{w[2]}[{w[0]}] = {w[1]}.get({w[0]}, {rng.randint(0, 9)})")
        elif kind < 0.6:
            out.append("")
        else:
            out.append(" " * indent + f"{w[0]} = {w[1]}[\"{w[2]}\"] + '\\t' + str({rng.random():.6f})  # {w[2]} é")
    return "\n".join(out)


def codex_body(target: int, model: str, key: str = REASONING_KEY, seed: int = 33) -> bytes:
    """A recorded Codex request whose history is grown to ``target`` bytes with realistic turns."""
    import orjson

    sys.path.insert(0, str(REPO))
    from crossfeed.proxy.state.reasoning_seal import ReasoningSeal

    seal = ReasoningSeal(key)
    rng = random.Random(seed)
    body = orjson.loads((REPO / "tests/fixtures/codex/reasoning.3.request.json").read_bytes())
    recorded = body["input"]
    items: list[Any] = list(recorded[:-1])
    last = recorded[-1]
    body["model"] = model
    size = len(orjson.dumps(body))
    k = 0
    while size < target:
        k += 1
        f = rng.choice(["src/crossfeed/relay", "src/crossfeed/store", "tests/test_stream", "docs/design"])
        turn: list[dict[str, Any]] = [
            {
                "type": "message",
                "id": f"msg_u{k:04d}",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": f"step {k}: read {f}_{k}.py and fix the failing case in it"}
                ],
            }
        ]
        thought = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(120, 260)))
        turn.append(
            {
                "type": "reasoning",
                "id": f"rs_{k:04d}",
                "summary": [{"type": "summary_text", "text": f"**Reading {f}_{k}.py**\n\n" + thought[:300]}],
                "content": None,
                "encrypted_content": seal.seal(thought),
            }
        )
        for j in range(rng.randint(1, 3)):
            call = f"call_{k:04d}_{j}"
            cmd = rng.choice(
                [f"sed -n '1,{rng.randint(80, 400)}p' {f}_{k}.py", f"rg -n {rng.choice(_WORDS)} src", "pytest -q -x"]
            )
            turn.append(
                {
                    "type": "function_call",
                    "status": "completed",
                    "id": f"fc_{k:04d}_{j}",
                    "name": "exec_command",
                    "arguments": orjson.dumps(
                        {"cmd": cmd, "workdir": "/work/repo", "max_output_tokens": 10000}
                    ).decode(),
                    "call_id": call,
                }
            )
            listing = _code_lines(rng, rng.randint(60, 420))
            turn.append(
                {
                    "type": "function_call_output",
                    "id": f"fco_{k:04d}_{j}",
                    "call_id": call,
                    "output": f"Chunk ID: {rng.getrandbits(24):06x}\nWall time: {rng.random():.4f} seconds\n"
                    f"Process exited with code 0\nOriginal token count: {len(listing) // 4}\nOutput:\n{listing}\n",
                }
            )
        if k % 3 == 0:
            patch = "\n".join("+" + line for line in _code_lines(rng, rng.randint(10, 60)).splitlines())
            call = f"call_patch_{k:04d}"
            turn.append(
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{k:04d}",
                    "status": "completed",
                    "call_id": call,
                    "name": "apply_patch",
                    "input": f"*** Begin Patch\n*** Update File: {f}_{k}.py\n@@\n{patch}\n*** End Patch\n",
                }
            )
            turn.append(
                {
                    "type": "custom_tool_call_output",
                    "id": f"ctco_{k:04d}",
                    "call_id": call,
                    "output": f"Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nM {f}_{k}.py\n",
                }
            )
        turn.append(
            {
                "type": "message",
                "status": "completed",
                "id": f"msg_a{k:04d}",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": "Done: " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 90))),
                        "annotations": [],
                        "logprobs": [],
                    }
                ],
            }
        )
        items += turn
        size += sum(len(orjson.dumps(item)) + 1 for item in turn)
    body["input"] = [*items, last]
    return orjson.dumps(body)


# ============================================================================ the driver


class Client:
    """One keep-alive HTTP/1.1 connection, one request at a time (blocking)."""

    def __init__(self, port: int, timeout: float) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buf += data

    def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nAuthorization: Bearer bench\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.sock.sendall(head + body)
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        raw, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        if headers.get("transfer-encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                while b"\r\n" not in self.buf:
                    self._fill()
                size_s, _, rest = self.buf.partition(b"\r\n")
                size = int(size_s.split(b";")[0], 16)
                while len(rest) < size + 2:
                    self._fill()
                    size_s, _, rest = self.buf.partition(b"\r\n")
                out += rest[:size]
                self.buf = rest[size + 2 :]
                if size == 0:
                    return status, bytes(out)
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return status, data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(port: int, path: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the process exited ({proc.returncode}) before it answered; log {log}:\n{tail(log)}")
        try:
            c = Client(port, 5)
            try:
                status, _ = c.request("GET", path)
            finally:
                c.close()
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no answer on port {port} within {timeout:.0f} s; log {log}:\n{tail(log)}")


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def tree_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONHASHSEED"] = "0"
    env["CROSSFEED_REASONING_KEY"] = REASONING_KEY
    return env


def pool_hosts(n: int) -> list[str]:
    """The loopback addresses the fake upstream listens on: one, or one per replica of ``--pool``
    (IP literals, as a replica's address is: a name would cost a resolver lookup a call)."""
    return [f"127.0.0.{i}" for i in range(1, max(n, 1) + 1)]


SCENARIOS = {
    # name: (direction, client path, api of the client body)
    "forward": ("forward", "/v1/responses", "responses"),
    "reverse": ("reverse", "/v1/chat/completions", "chat"),
    "codex3mb": ("forward", "/v1/responses", "responses"),
}


def frames_of(name: str, n: int) -> int:
    sys.path.insert(0, str(HERE))
    import upstream as up

    return up.frames_per_stream("chat" if SCENARIOS[name][0] == "forward" else "responses", up.Params(n=n))


_TRIGGER = "desc: Trigger: Client Request: "


def collect_dumps(outdir: Path, seen: set[str], keep: bool = False) -> Iterator[tuple[str, int]]:
    """(segment name, instructions) of every new callgrind dump; the files are removed (``keep``: not)."""
    for path in sorted(outdir.glob("cg.*"), key=lambda p: int(p.suffix[1:]) if p.suffix[1:].isdigit() else -1):
        if path.name in seen or not path.suffix[1:].isdigit():
            continue
        seen.add(path.name)
        name, total = None, None
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith(_TRIGGER):
                    name = line[len(_TRIGGER) :].strip()
                elif line.startswith("summary:"):
                    total = int(line.split()[1])
                    break
        if not keep:
            path.unlink()
        if name is not None and total is not None:
            yield name, total


class Pass:
    """One pass (time or callgrind) over the scenarios, one server process per direction."""

    def __init__(self, args: argparse.Namespace, kind: str, bodies: dict[str, bytes], up_url: str, work: Path) -> None:
        self.args = args
        self.kind = kind  # "time" | "callgrind" | "profile"
        self.bodies = bodies
        self.up_url = up_url
        self.work = work
        # label -> seq -> phase -> [cost, segments]
        self.data: dict[str, dict[int, dict[str, list[int]]]] = {}
        self.info: dict[str, Any] = {}
        self.reads: dict[str, dict[int, int]] = {}  # label -> seq -> upstream reads of the relay

    def record(self, name: str, cost: int, segments: int = 1) -> None:
        label, seq, phase = name.split("|", 2)
        if label == "-":
            return
        slot = self.data.setdefault(label, {}).setdefault(int(seq), {}).setdefault(phase, [0, 0])
        slot[0] += cost
        slot[1] += segments

    def pool_config(self, direction: str) -> Path:
        """A config whose default upstream is a pool of ``--pool`` replicas, all the fake upstream
        (listening on 127.0.0.1, 127.0.0.2, ...: one server, so the stream is the same as without
        it): the cost of the pool's own code, per request."""
        port = self.up_url.split(":")[2].split("/")[0]
        urls = ", ".join(f'"http://{h}:{port}/v1"' for h in pool_hosts(self.args.pool))
        api = "responses" if direction == "reverse" else "chat"
        path = self.work / f"pool-{direction}.toml"
        path.write_text(f'[[upstreams]]\nname = "default"\ndefault = true\napi = "{api}"\nbase_urls = [{urls}]\n')
        return path

    def run(self) -> None:
        directions = sorted({SCENARIOS[s][0] for s in self.args.scenarios}, reverse=False)
        for direction in directions:
            self.run_direction(direction, [s for s in self.args.scenarios if SCENARIOS[s][0] == direction])

    def run_direction(self, direction: str, scenarios: list[str]) -> None:
        args = self.args
        port = free_port()
        log = self.work / f"crossfeed-{self.kind}-{direction}.log"
        argv = [args.python, str(HERE / "account.py"), "--serve-hooked", "serve", "--host", "127.0.0.1"]
        argv += ["--port", str(port)]
        if args.pool > 1:  # the upstream as a pool of that many spellings of its one address
            argv += ["--config", str(self.pool_config(direction))]
        else:
            argv += ["--upstream", self.up_url]
            if direction == "reverse":
                argv += ["--upstream-api", "responses"]
        env = tree_env(Path(args.tree))
        env["CF_ACCOUNT_DIRECTION"] = direction
        env["CF_ACCOUNT_HOOKS"] = ",".join(args.hook)
        cgdir = self.work / f"cg-{direction}"
        if self.kind == "callgrind":
            cgdir.mkdir(parents=True, exist_ok=True)
            env["CF_ACCOUNT_MARKER"] = str(self.work / "marker")
            argv = [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={cgdir}/cg",
                "--dump-line=no",
                "--instr-atstart=no",
                "-q",
                # kept dumps are read one by one (callgrind_annotate): each names its own functions
                *(["--compress-strings=no", "--compress-pos=no"] if args.keep_dumps else []),
                *argv,
            ]
        with open(log, "ab") as logf:
            proc = subprocess.Popen(
                argv, stdout=logf, stderr=subprocess.STDOUT, cwd=args.tree, env=env, start_new_session=True
            )
        seen: set[str] = set()
        try:
            wait_http(port, "/healthz", proc, log, 600 if self.kind == "callgrind" else 60)
            client = Client(port, 600)
            try:
                self.drive(client, direction, scenarios)
                _, raw = client.request("GET", "/_account/report")
                report = json.loads(raw)
                for label, seq, reads in report["reads"]:
                    self.reads.setdefault(label, {})[seq] = reads
                if self.kind == "time":
                    for name, (ns, segments) in report["acc"].items():
                        self.record(name, ns, segments)
                elif self.kind == "callgrind":
                    for name, cost in collect_dumps(cgdir, seen, keep=args.keep_dumps):
                        self.record(name, cost)
                self.info[direction] = {k: report[k] for k in ("missing_hooks", "proxy", "translators")}
            finally:
                client.close()
        finally:
            stop(proc)
            if self.kind == "callgrind" and not args.keep_dumps:
                shutil.rmtree(cgdir, ignore_errors=True)

    def drive(self, client: Client, direction: str, scenarios: list[str]) -> None:
        args = self.args
        n_req = args.cg_requests if self.kind == "callgrind" else args.requests
        warm_body = self.bodies["forward" if direction == "forward" else "reverse"]
        path = SCENARIOS["forward" if direction == "forward" else "reverse"][1]
        for _ in range(args.warmup):  # outside any label (and, under callgrind, before counting starts)
            self.check(client.request("POST", path, warm_body), direction)
        for name in scenarios:
            body = self.bodies[name]
            path = SCENARIOS[name][1]
            reqs = max(3, n_req // 4) if name == "codex3mb" else n_req
            for _ in range(2 if name == "codex3mb" else 0):  # warm the large body's own paths
                self.check(client.request("POST", path, body), direction)
            if self.kind == "profile":
                out = Path(args.profile).resolve() / f"{name}.pstats"
                client.request("GET", f"/_account/begin?label={name}/profile&mode=profile&out={out}")
                for _ in range(reqs):
                    self.check(client.request("POST", path, body), direction)
                client.request("GET", "/_account/end")
                continue
            client.request("GET", "/_account/calibrate")
            for mode in ("bare", "full"):
                client.request("GET", f"/_account/begin?label={name}/{mode}&mode={mode}")
                gap = GAP if self.kind == "callgrind" else 0.0
                turns = Client(client.port, client.sock.gettimeout() or 600)  # a new connection (see _begin)
                try:
                    for _ in range(reqs + self.skip(name)):  # the first ones are dropped (see skip)
                        time.sleep(gap)
                        self.check(turns.request("POST", path, body), direction)
                    time.sleep(GAP)
                finally:
                    turns.close()
                client.request("GET", "/_account/end")
            if name == "codex3mb":
                reps = 5 if self.kind == "time" else 1
                client.request("POST", f"/_account/yardstick?label={name}/yardstick&reps={reps}", body)

    def skip(self, name: str) -> int:
        """Requests of each mode not counted: the first carries the end of the account request
        before it, and on a new connection the next few cost up to 7 % more (callgrind: 2.18,
        2.13, 2.09, then 2.04-2.06 M instructions), whatever warmed up before."""
        return 2 if name == "codex3mb" else self.args.skip

    @staticmethod
    def check(answer: tuple[int, bytes], direction: str) -> None:
        status, body = answer
        want = b"response.completed" if direction == "forward" else b"data: [DONE]"
        if status != 200 or body.rfind(want) < 0:
            raise RuntimeError(f"a request failed: HTTP {status}: {body[-600:]!r}")

    # ---------------------------------------------------------------- figures

    def overhead(self) -> float:
        """Median cost of one segment of the calibration loop (a cut with its wrapper)."""
        seqs = self.data.get("calibrate", {})
        vals = [segs[ph][0] / segs[ph][1] for i, segs in seqs.items() if i > 2 for ph in segs]
        return statistics.median(vals) if vals else 0.0

    def rows(self, name: str) -> dict[str, Any]:
        """Median per phase over the measured requests (full), cut overhead subtracted; totals."""
        ovh = self.overhead()
        full = self.data.get(f"{name}/full", {})
        bare = self.data.get(f"{name}/bare", {})
        skip = self.skip(name)
        fseqs = [s for s in sorted(full) if s > skip]
        bseqs = [s for s in sorted(bare) if s > skip]
        phases: dict[str, float] = {}
        unknown = sorted({ph for s in fseqs for ph in full[s]} - {k for k, _ in PHASES})
        for key in [k for k, _ in PHASES] + unknown:
            vals = [max(0.0, full[s][key][0] - ovh * full[s][key][1]) if key in full[s] else 0.0 for s in fseqs]
            phases[key] = statistics.median(vals) if vals else 0.0
        totals = [sum(max(0.0, c - ovh * n) for c, n in full[s].values()) for s in fseqs]
        bares = [sum(max(0.0, c - ovh * n) for c, n in bare[s].values()) for s in bseqs]
        out = {
            "phases": phases,
            "sum": statistics.median(totals) if totals else 0.0,
            "bare": statistics.median(bares) if bares else 0.0,
            "requests": len(fseqs),
            "segments": statistics.median([sum(n for _, n in full[s].values()) for s in fseqs]) if fseqs else 0,
            "overhead_per_segment": ovh,
            "upstream_reads": statistics.median(
                [n for s, n in self.reads.get(f"{name}/full", {}).items() if s > skip] or [0]
            ),
            "unknown_phases": unknown,
        }
        yard = self.data.get(f"{name}/yardstick")
        if yard:
            out["yardstick"] = {
                key: statistics.median([yard[s][key][0] - ovh for s in yard if key in yard[s]]) for key, _ in YARDSTICK
            }
        return out


def fmt_cost(v: float, kind: str) -> str:
    if kind == "time":
        return f"{v / 1000:,.1f}"  # ns -> µs
    return f"{v:,.0f}"


def render(results: dict[str, dict[str, Any]], scenarios: list[str], frames: dict[str, int]) -> str:
    kinds = [k for k in ("callgrind", "time") if k in results]
    cols = [(s, k) for s in scenarios for k in kinds]
    unit = {"callgrind": "instr", "time": "µs"}
    head = "| phase | " + " | ".join(f"{s} {unit[k]}" for s, k in cols) + " |"
    lines = [head, "|---|" + "--:|" * len(cols)]
    rows = {(s, k): results[k][s] for s, k in cols}

    def line(label: str, get: Callable[[dict[str, Any]], float | None], bold: bool = False) -> None:
        cells = []
        for s, k in cols:
            v = get(rows[(s, k)])
            cells.append("" if v is None else fmt_cost(v, k))
        text = f"**{label}**" if bold else label
        lines.append(f"| {text} | " + " | ".join(cells) + " |")

    def phase(key: str) -> Callable[[dict[str, Any]], float]:
        return lambda r: float(r["phases"].get(key, 0.0))

    extra = sorted({k for r in rows.values() for k in r["unknown_phases"]})
    for key, label in [*PHASES, *((k, f"{k} (--hook)") for k in extra)]:
        line(label, phase(key))
    line("sum of the phases (median request)", lambda r: r["sum"], bold=True)
    line("total, bare (one cut per request)", lambda r: r["bare"], bold=True)
    lines.append(
        "| per-chunk row per upstream frame | "
        + " | ".join(fmt_cost(rows[(s, k)]["phases"]["chunks"] / frames[s], k) for s, k in cols)
        + " |"
    )
    lines.append(
        "| upstream reads per request (frames: "
        + ", ".join(f"{s} {frames[s]}" for s in scenarios)
        + ") | "
        + " | ".join(f"{rows[(s, k)]['upstream_reads']:g}" for s, k in cols)
        + " |"
    )
    yard = [(s, k) for s, k in cols if "yardstick" in rows[(s, k)]]
    if yard:
        lines.append("")
        lines.append("| 3 MiB cell | " + " | ".join(f"{s} {unit[k]}" for s, k in yard) + " |")
        lines.append("|---|" + "--:|" * len(yard))
        for key, label in YARDSTICK:
            lines.append(f"| {label} | " + " | ".join(fmt_cost(rows[c]["yardstick"][key], c[1]) for c in yard) + " |")
        for label, get in (
            (
                "yardstick: json.loads + json.dumps",
                lambda r: r["yardstick"]["json.loads"] + r["yardstick"]["json.dumps"],
            ),
            (
                "crossfeed: read and parse + history + mapping",
                lambda r: sum(r["phases"][k] for k in ("read", "history", "mapping")),
            ),
            ("crossfeed: upstream request (encode and send)", lambda r: r["phases"]["upstream"]),
            ("crossfeed: whole request (bare)", lambda r: r["bare"]),
        ):
            lines.append(f"| {label} | " + " | ".join(fmt_cost(get(rows[c]), c[1]) for c in yard) + " |")
        for label, part in (
            (
                "ratio: parse + history + mapping / yardstick",
                lambda r: sum(r["phases"][k] for k in ("read", "history", "mapping")),
            ),
            (
                "ratio: + upstream request / yardstick",
                lambda r: sum(r["phases"][k] for k in ("read", "history", "mapping", "upstream")),
            ),
            ("ratio: whole request / yardstick", lambda r: r["bare"]),
        ):
            lines.append(
                f"| {label} | "
                + " | ".join(
                    f"{part(rows[c]) / (rows[c]['yardstick']['json.loads'] + rows[c]['yardstick']['json.dumps']):.2f}x"
                    for c in yard
                )
                + " |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve-hooked"]:
        return serve_hooked(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--scenarios", default="forward,reverse,codex3mb", help="comma-separated: forward, reverse, codex3mb"
    )
    ap.add_argument("--requests", type=int, default=100, help="measured requests per scenario and mode, time pass")
    ap.add_argument(
        "--cg-requests", type=int, default=8, help="measured requests per scenario and mode, callgrind pass"
    )
    ap.add_argument("--warmup", type=int, default=40, help="requests before any measurement (each server)")
    ap.add_argument(
        "--skip", type=int, default=6, help="requests of each mode not counted, on its new connection (codex3mb: 2)"
    )
    ap.add_argument("--n", type=int, default=20, help="deltas per upstream stream")
    ap.add_argument(
        "--write-batch",
        type=int,
        default=64,
        help="upstream frames per socket write (default 64: the whole stream in one write, so the relay reads "
        "it at once whatever the timing; 1: one write per frame, as bench/run.py, where the number of reads "
        "depends on timing)",
    )
    ap.add_argument(
        "--pace", type=float, default=0.0, help="ms between upstream deltas (a read per delta; >= 30 under callgrind)"
    )
    ap.add_argument("--codex-bytes", type=int, default=3 * 1024 * 1024, help="size of the grown Codex body")
    ap.add_argument("--no-callgrind", action="store_true", help="the time pass only")
    ap.add_argument("--no-time", action="store_true", help="the callgrind pass only")
    ap.add_argument("--tree", default=str(REPO), help="the source tree crossfeed runs from (default: this one)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument(
        "--hook",
        action="append",
        default=[],
        metavar="MODULE:ATTR=PHASE",
        help="one more function on a row of its own, e.g. aiohttp.client:ClientSession._request=aiohttp-request",
    )
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument(
        "--profile", metavar="DIR", help="also a cProfile pass (no hooks): DIR/<scenario>.pstats, exact call counts"
    )
    ap.add_argument(
        "--keep-dumps", action="store_true", help="keep the callgrind dumps (WORKDIR/cg-*/cg.N, callgrind_annotate)"
    )
    ap.add_argument("--workdir", help="logs and callgrind dumps (default: a temporary directory)")
    ap.add_argument(
        "--pool", type=int, default=1, help="the upstream as a pool of N replicas (2 to 5), all the one fake upstream"
    )
    args = ap.parse_args(argv)
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    for s in args.scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s!r}")
    args.tree = str(Path(args.tree).resolve())
    if not (Path(args.tree) / "proxy" / "__main__.py").is_file():
        ap.error(f"--tree {args.tree}: no proxy/__main__.py there")

    sys.path.insert(0, str(HERE))
    import upstream as up
    from run import git_describe  # the benchmark runner's: one way to name a tree

    model = up.model_name(args.n, d=args.pace, w=args.write_batch)
    bodies = {"forward": short_body("responses", model), "reverse": short_body("chat", model)}
    if "codex3mb" in args.scenarios:
        bodies["codex3mb"] = codex_body(args.codex_bytes, model)
    frames = {s: frames_of(s, args.n) for s in args.scenarios}
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="cf-account-"))
    work.mkdir(parents=True, exist_ok=True)
    kinds = [k for k, off in (("time", args.no_time), ("callgrind", args.no_callgrind)) if not off]
    if "callgrind" in kinds:
        if shutil.which("valgrind") is None:
            print("account: valgrind is not installed (apt-get install -y valgrind): time pass only", file=sys.stderr)
            kinds.remove("callgrind")
        else:
            build_marker(work / "marker")

    up_port = free_port()
    up_log = work / "upstream.log"
    with open(up_log, "ab") as logf:
        upstream = subprocess.Popen(
            [args.python, str(HERE / "upstream.py"), "--port", str(up_port), "--host", ",".join(pool_hosts(args.pool))],
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    results: dict[str, dict[str, Any]] = {}
    info: dict[str, Any] = {}
    started = time.time()
    try:
        wait_http(up_port, "/healthz", upstream, up_log, 30)
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            Pass(args, "profile", bodies, f"http://127.0.0.1:{up_port}/v1", work).run()
            print(f"# profiles written to {args.profile}", file=sys.stderr)
        for kind in kinds:
            t0 = time.monotonic()
            p = Pass(args, kind, bodies, f"http://127.0.0.1:{up_port}/v1", work)
            p.run()
            results[kind] = {s: p.rows(s) for s in args.scenarios}
            info[kind] = {"seconds": round(time.monotonic() - t0, 1), **p.info}
            print(f"# {kind} pass: {info[kind]['seconds']} s", file=sys.stderr, flush=True)
    finally:
        stop(upstream)
    load = ["?"]
    with contextlib.suppress(OSError):
        load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"# crossfeed per-request account (bench/account.py), tree {args.tree} ({git_describe(Path(args.tree))})")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average at the end {' '.join(load)}"
    )
    sizes = ", ".join(f"{s} {len(bodies[s]):,} B body, {frames[s]} upstream frames" for s in args.scenarios)
    print(
        f"# {sizes}; time pass {args.requests} requests per scenario and mode (codex3mb: a quarter), "
        f"callgrind pass {args.cg_requests}; medians"
    )
    for kind in kinds:
        for direction, what in info[kind].items():
            if isinstance(what, dict) and what.get("missing_hooks"):
                print(f"# {kind} {direction}: hooks not found in this tree: {', '.join(what['missing_hooks'])}")
        ovh = results[kind][args.scenarios[0]]["overhead_per_segment"]
        segs = results[kind][args.scenarios[0]]["segments"]
        print(
            f"# {kind}: a cut costs {fmt_cost(ovh, kind)} {'instr' if kind == 'callgrind' else 'µs'} (subtracted per segment; {segs:.0f} segments per {args.scenarios[0]} request)"
        )
    print(render(results, args.scenarios, frames))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "frames": frames, "results": results, "info": info}, indent=1)
        )
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
