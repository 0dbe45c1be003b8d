"""Run the real Codex CLI (``@openai/codex``) non-interactively against a local Responses endpoint.

Pure Python, no pytest dependency. Facts this relies on were checked against Codex 0.171.0 (see
docs/codex.md):

- ``codex exec`` with a throwaway ``CODEX_HOME`` whose config.toml defines a custom provider
  (``wire_api = "responses"``, ``base_url`` = the endpoint, ``env_key`` = an env var holding a dummy
  key) sends only ``POST {base_url}/responses``, streaming.
- Nothing else leaves the machine once ``features.plugins = false`` (otherwise it runs
  ``git ls-remote https://github.com/openai/plugins.git`` and resolves chatgpt.com /
  api.github.com); update checks, analytics, feedback, OTEL and history are switched off too.
- ``features.unbounded_connection_retries = false``: otherwise a refused connection makes Codex
  print "Reconnecting... waiting for network" forever.
- ``request_max_retries = 0`` and ``stream_max_retries = 0`` on the provider: otherwise an HTTP 500
  is tried (4+1) x (5+1) = 30 times over about 25 s.

Also a recorder: ``python tests/e2e/codex_support.py record [CASE ...]`` runs Codex against
``fake_responses_backend.FakeResponsesBackend`` for each case in ``CASES`` and writes every request
body to ``tests/fixtures/codex/`` (plus ``manifest.json``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CODEX_VERSION = "0.171.0"
REPO_ROOT = Path(__file__).resolve().parents[2]
CODEX_INSTALL_DIR = REPO_ROOT / ".tools" / "codex"
FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures" / "codex"

PROVIDER_ID = "crossfeed"
API_KEY_ENV = "CROSSFEED_CODEX_API_KEY"
DUMMY_API_KEY = "sk-crossfeed-dummy"

#: A model name for which Codex declares ``apply_patch`` as a freeform ``custom`` tool (plus
#: ``tool_search`` and ``web_search``). Any name starting with a bundled catalog slug matches
#: (``gpt-5.5``, ``gpt-5.5-anything``, ``vendor/gpt-5.5``); see docs/codex.md.
APPLY_PATCH_MODEL = "gpt-5.5"
#: A name Codex does not know: fallback metadata, no apply_patch tool at all, a ``namespace`` tool
#: (``multi_agent_v1``), and ``reasoning: {"summary": "auto"}``.
FALLBACK_MODEL = "crossfeed-test-model"

# Environment variables that could point Codex somewhere else or change its auth.
_SCRUB_ENV_PREFIXES = ("CODEX_", "OPENAI_", "AZURE_OPENAI", "RUST_LOG")
_SCRUB_ENV = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}


# --------------------------------------------------------------------------------------- binary


def codex_binary() -> Path | None:
    """Path of the pinned Codex CLI launcher, or None when it is not installed.

    ``CROSSFEED_CODEX_BIN`` overrides. Otherwise ``.tools/codex/node_modules/.bin/codex`` (what
    ``.ci/install-codex.sh`` installs), only if its version file says ``CODEX_VERSION``, the native
    platform package is present, and ``node`` is on PATH (the launcher is a node script).
    """
    override = os.environ.get("CROSSFEED_CODEX_BIN")
    if override:
        p = Path(override)
        return p if p.is_file() and os.access(p, os.X_OK) else None
    launcher = CODEX_INSTALL_DIR / "node_modules" / ".bin" / "codex"
    pkg = CODEX_INSTALL_DIR / "node_modules" / "@openai" / "codex" / "package.json"
    if not launcher.exists() or not pkg.is_file() or shutil.which("node") is None:
        return None
    try:
        if json.loads(pkg.read_text()).get("version") != CODEX_VERSION:
            return None
    except (OSError, ValueError):
        return None
    native = list((CODEX_INSTALL_DIR / "node_modules" / "@openai").glob("codex-*/vendor/*/bin/codex"))
    if not native:
        return None
    return launcher


# --------------------------------------------------------------------------------------- config


def codex_binary_or_skip() -> Path:
    """The Codex binary; without it the test skips locally and fails in CI (require_service)."""
    from tests.support.services import require_service

    exe = codex_binary()
    if exe is None:
        require_service("codex", "export CROSSFEED_CODEX_BIN=$(bash .ci/install-codex.sh)")
    assert exe is not None
    return exe


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string literal is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def to_toml(doc: Mapping[str, Any]) -> str:
    """Minimal TOML writer: scalars, lists and nested tables (enough for config.toml)."""
    out: list[str] = []

    def emit(table: Mapping[str, Any], path: list[str]) -> None:
        scalars = [(k, v) for k, v in table.items() if not isinstance(v, Mapping)]
        tables = [(k, v) for k, v in table.items() if isinstance(v, Mapping)]
        if path and (scalars or not tables):
            out.append("")
            out.append("[" + ".".join(_toml_key(p) for p in path) + "]")
        for k, v in scalars:
            if v is None:
                continue
            out.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in tables:
            emit(v, [*path, k])

    emit(doc, [])
    return "\n".join(out).lstrip("\n") + "\n"


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        elif v is None:
            base.pop(k, None)
        else:
            base[k] = dict(v) if isinstance(v, Mapping) else v
    return base


def codex_config(
    *,
    base_url: str,
    model: str,
    request_max_retries: int | None = 0,
    stream_max_retries: int | None = 0,
    stream_idle_timeout_ms: int | None = None,
    web_search: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The config.toml document (as a dict) used by ``write_codex_home``.

    ``request_max_retries`` / ``stream_max_retries``: None leaves Codex's defaults (4 and 5: an
    HTTP 500 is then tried 30 times over ~25 s).
    ``web_search``: None keeps Codex's default (a ``web_search`` tool is declared in every
    request; it is a hosted tool, Codex itself connects nowhere for it); ``"disabled"`` removes it.
    ``extra`` is deep-merged last; a value of None deletes a key.
    """
    provider: dict[str, Any] = {
        "name": "crossfeed",
        "base_url": base_url,
        "env_key": API_KEY_ENV,
        "wire_api": "responses",
        "request_max_retries": request_max_retries,
        "stream_max_retries": stream_max_retries,
        "supports_websockets": False,
    }
    if stream_idle_timeout_ms is not None:
        provider["stream_idle_timeout_ms"] = stream_idle_timeout_ms
    cfg: dict[str, Any] = {
        "model": model,
        "model_provider": PROVIDER_ID,
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "check_for_update_on_startup": False,
        "web_search": web_search,
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "history": {"persistence": "none"},
        "otel": {"exporter": "none", "metrics_exporter": "none", "trace_exporter": "none", "log_user_prompt": False},
        "features": {
            "plugins": False,  # else: git ls-remote github.com/openai/plugins.git, chatgpt.com
            "remote_plugin": False,
            "apps": False,
            "tool_suggest": False,
            "unbounded_connection_retries": False,  # else a refused connection retries forever
        },
        "model_providers": {PROVIDER_ID: provider},
    }
    return _deep_merge(cfg, extra or {})


def write_codex_home(
    dir: str | os.PathLike[str],
    *,
    base_url: str,
    model: str,
    extra: Mapping[str, Any] | None = None,
    **config_kwargs: Any,
) -> dict[str, str]:
    """Write ``dir/config.toml`` for a throwaway CODEX_HOME; return the env to run Codex with.

    ``base_url`` is the Responses base (Codex appends ``/responses``), e.g.
    ``http://127.0.0.1:PORT/v1``. Extra keyword arguments go to ``codex_config``.
    The returned env is the current environment without CODEX_*/OPENAI_*/proxy variables, plus
    ``CODEX_HOME`` and the dummy API key.
    """
    home = Path(dir)
    home.mkdir(parents=True, exist_ok=True)
    cfg = codex_config(base_url=base_url, model=model, extra=extra, **config_kwargs)
    (home / "config.toml").write_text(to_toml(cfg), encoding="utf-8")
    return _codex_env(home, API_KEY_ENV)


#: The env var ``codex exec`` (and ``exec resume``) reads an API key from for the built-in
#: ``openai`` provider. ``OPENAI_API_KEY`` in the environment is NOT used by 0.171.0: with only
#: that set, Codex sends its requests with no ``Authorization`` header at all.
BUILTIN_API_KEY_ENV = "CODEX_API_KEY"


def write_codex_home_builtin(
    dir: str | os.PathLike[str], *, base_url: str, model: str, extra: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Write ``dir/config.toml`` that uses Codex's built-in ``openai`` provider; return the env.

    The drop-in setup users have: ``openai_base_url = base_url`` (e.g.
    ``http://127.0.0.1:PORT/v1``) and no ``model_provider`` / ``[model_providers]``. Unlike a
    custom provider this one has WebSockets on: Codex opens ``GET {base_url}/responses`` with
    ``Upgrade: websocket`` (a ``generate: false`` prewarm, then ``response.create`` frames) and
    falls back to ``POST {base_url}/responses`` (at once on a 426 answer to the upgrade; after 5
    retries, ~7 s, on 401/403/404/405/5xx). Checked against 0.171.0, see docs/codex.md.

    Same network switch-offs as ``codex_config`` (plugins, update check, analytics, feedback,
    OTEL, history, unbounded connection retries). Retries cannot be made smaller: 0.171.0 has no
    config key for the built-in provider's ``request_max_retries`` / ``stream_max_retries``
    (``[model_providers.openai]`` is rejected as a reserved id; top-level keys are unknown), so
    the defaults (4 and 5) apply.

    Auth: the dummy key goes in ``CODEX_API_KEY`` (what ``codex exec`` honours; it wins over
    auth.json) and in ``dir/auth.json`` (``{"auth_mode": "apikey", "OPENAI_API_KEY": ...}``, the
    file ``codex login --with-api-key`` writes), so other subcommands authenticate too.
    ``extra`` is deep-merged into the config last; a value of None deletes a key.
    """
    home = Path(dir)
    home.mkdir(parents=True, exist_ok=True)
    cfg = codex_config(base_url=base_url, model=model, extra={"model_provider": None, "model_providers": None})
    cfg["openai_base_url"] = base_url  # a root key: to_toml writes root scalars before tables
    _deep_merge(cfg, extra or {})
    (home / "config.toml").write_text(to_toml(cfg), encoding="utf-8")
    (home / "auth.json").write_text(
        json.dumps({"auth_mode": "apikey", "OPENAI_API_KEY": DUMMY_API_KEY}, indent=2) + "\n", encoding="utf-8"
    )
    return _codex_env(home, BUILTIN_API_KEY_ENV)


def _codex_env(home: Path, key_env: str) -> dict[str, str]:
    """The current environment without CODEX_*/OPENAI_*/proxy variables, plus ``CODEX_HOME`` and
    the dummy key in ``key_env``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_ENV_PREFIXES) and k not in _SCRUB_ENV}
    env["CODEX_HOME"] = str(home)
    env[key_env] = DUMMY_API_KEY
    env["NO_COLOR"] = "1"
    env.setdefault("NO_PROXY", "127.0.0.1,localhost,::1")
    return env


# --------------------------------------------------------------------------------------- running


def codex_exec_args(
    prompt: str,
    *,
    cwd: str | os.PathLike[str],
    json_events: bool = True,
    ephemeral: bool = True,
    resume_last: bool = False,
    output_last_message: str | os.PathLike[str] | None = None,
    extra_args: Iterable[str] = (),
) -> list[str]:
    """argv after the binary: ``exec [resume --last] <flags> -- PROMPT``."""
    args = ["exec"]
    if resume_last:
        args += ["resume", "--last"]
    args += ["--skip-git-repo-check", "--strict-config"]
    if not resume_last:  # `exec resume` has neither --color nor -C (it runs in the process cwd)
        args += ["--color", "never", "-C", str(cwd)]
    if json_events:
        args.append("--json")
    if ephemeral and not resume_last:
        args.append("--ephemeral")
    if output_last_message is not None:
        args += ["-o", str(output_last_message)]
    args += list(extra_args)
    args += ["--", prompt]
    return args


def run_codex_exec(
    prompt: str,
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    timeout: float = 120.0,
    json_events: bool = True,
    ephemeral: bool = True,
    resume_last: bool = False,
    extra_args: Iterable[str] = (),
    binary: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``codex exec`` once, non-interactively, bounded by ``timeout``.

    Codex runs in its own process group with stdin closed; on timeout the whole group (Codex and
    any shell commands it started) is killed and ``subprocess.TimeoutExpired`` is raised.
    With ``json_events`` stdout is JSONL (``parse_events``); the human log goes to stderr.
    ``ephemeral=False`` keeps the session so a later ``resume_last=True`` call can continue it.
    """
    exe = Path(binary) if binary else codex_binary()
    if exe is None:
        raise FileNotFoundError("Codex CLI not installed: run .ci/install-codex.sh")
    argv = [
        str(exe),
        *codex_exec_args(
            prompt,
            cwd=cwd,
            json_events=json_events,
            ephemeral=ephemeral,
            resume_last=resume_last,
            extra_args=extra_args,
        ),
    ]
    proc = subprocess.Popen(
        argv,
        cwd=str(cwd),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(argv, timeout, output=out, stderr=err) from None
    finally:
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
    _kill_group(proc)  # leftovers (background shells) once Codex itself exited
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def parse_events(stdout: str) -> list[dict[str, Any]]:
    """The JSONL events of ``codex exec --json`` (non-JSON lines skipped)."""
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


def agent_messages(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["item"].get("text", "")
        for e in events
        if e.get("type") == "item.completed" and e.get("item", {}).get("type") == "agent_message"
    ]


def command_executions(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Completed ``command_execution`` items: ``command``, ``aggregated_output``, ``exit_code``."""
    return [
        e["item"]
        for e in events
        if e.get("type") == "item.completed" and e.get("item", {}).get("type") == "command_execution"
    ]


def error_messages(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """``ERROR: ...`` lines Codex printed on stderr, plus ``error``/``turn.failed`` JSON events."""
    msgs = [ln[len("ERROR: ") :] for ln in (proc.stderr or "").splitlines() if ln.startswith("ERROR: ")]
    for e in parse_events(proc.stdout or ""):
        if e.get("type") == "error":
            msgs.append(e.get("message", ""))
        elif e.get("type") == "turn.failed":
            msgs.append((e.get("error") or {}).get("message", ""))
    return msgs


# --------------------------------------------------------------------------------------- recorder

_PATCH = (
    "*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello world\n+hello crossfeed\n"
    "*** Add File: new.txt\n+created by apply_patch\n*** End Patch\n"
)


def _msg(text: str) -> dict[str, Any]:
    return {"items": [{"type": "message", "text": text}]}


def _err(status: int, message: str, type_: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {
        "http_error": {
            "status": status,
            "body": {"error": {"message": message, "type": type_, "param": param, "code": code}},
        }
    }


#: Recording cases: model, prompt, files to seed, backend script, optional resume turns, config.
CASES: dict[str, dict[str, Any]] = {
    "plain": {"model": APPLY_PATCH_MODEL, "prompt": "say hi", "script": [_msg("hi there")]},
    "plain_fallback_model": {"model": FALLBACK_MODEL, "prompt": "say hi", "script": [_msg("hi there")]},
    "plain_responses_lite_model": {"model": "gpt-6-sol", "prompt": "say hi", "script": [_msg("hi there")]},
    "shell": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "write hello-from-codex to out.txt and show it",
        "script": [
            {
                "items": [
                    {
                        "type": "function_call",
                        "name": "exec_command",
                        "call_id": "call_shell_1",
                        "arguments": {"cmd": "echo hello-from-codex > out.txt && cat out.txt"},
                    }
                ]
            },
            _msg("The file says hello-from-codex."),
        ],
    },
    "shell_fallback_model": {
        "model": FALLBACK_MODEL,
        "prompt": "print hello",
        "script": [
            {
                "items": [
                    {
                        "type": "function_call",
                        "name": "exec_command",
                        "call_id": "call_shell_2",
                        "arguments": {"cmd": "echo hello"},
                    }
                ]
            },
            _msg("printed hello"),
        ],
    },
    "parallel": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "run two commands",
        "script": [
            {
                "items": [
                    {
                        "type": "function_call",
                        "name": "exec_command",
                        "call_id": "call_p1",
                        "arguments": {"cmd": "echo one"},
                    },
                    {
                        "type": "function_call",
                        "name": "exec_command",
                        "call_id": "call_p2",
                        "arguments": {"cmd": "echo two"},
                    },
                ]
            },
            _msg("both ran"),
        ],
    },
    "apply_patch": {
        "model": APPLY_PATCH_MODEL,
        "seed": {"hello.txt": "hello world\n"},
        "prompt": "change hello world to hello crossfeed in hello.txt and create new.txt",
        "script": [
            {
                "items": [
                    {"type": "custom_tool_call", "name": "apply_patch", "call_id": "call_patch_1", "input": _PATCH}
                ]
            },
            _msg("patched"),
        ],
    },
    "reasoning": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "think, then list the directory",
        "ephemeral": False,
        "script": [
            {
                "items": [
                    {
                        "type": "reasoning",
                        "summary": ["**Planning**\n\nI should list the files."],
                        "encrypted_content": "ENC-opaque-blob-1",
                    },
                    {
                        "type": "function_call",
                        "name": "exec_command",
                        "call_id": "call_r1",
                        "arguments": {"cmd": "ls -a"},
                    },
                ]
            },
            {
                "items": [
                    {"type": "reasoning", "summary": ["Listing done."], "encrypted_content": "ENC-opaque-blob-2"},
                    {"type": "message", "text": "The directory is empty."},
                ]
            },
        ],
        "resume": [("now say bye", [_msg("bye")])],
    },
    "reasoning_no_encrypted_content": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "think, then run true",
        "script": [
            {
                "items": [
                    {"type": "reasoning", "summary": ["thinking without encrypted content"]},
                    {
                        "type": "function_call",
                        "name": "exec_command",
                        "call_id": "call_ne1",
                        "arguments": {"cmd": "true"},
                    },
                ]
            },
            _msg("ok"),
        ],
    },
    "reasoning_raw_content": {
        "model": FALLBACK_MODEL,
        "prompt": "think",
        "script": [
            {
                "items": [
                    {
                        "type": "reasoning",
                        "summary": [],
                        "content": ["raw chain of thought"],
                        "encrypted_content": "ENC-raw-1",
                    },
                    {
                        "type": "function_call",
                        "name": "exec_command",
                        "call_id": "call_rc1",
                        "arguments": {"cmd": "true"},
                    },
                ]
            },
            _msg("ok"),
        ],
    },
    "namespace_call": {
        "model": FALLBACK_MODEL,
        "prompt": "wait for agent nope",
        "script": [
            {
                "items": [
                    {
                        "type": "function_call",
                        "namespace": "multi_agent_v1",
                        "name": "wait_agent",
                        "call_id": "call_ns_1",
                        "arguments": {"targets": ["nope"], "timeout_ms": 100},
                    }
                ]
            },
            _msg("no such agent"),
        ],
    },
    "image_input": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "describe the image",
        "seed": {"pixel.png": "PNG1x1"},
        "args": ["-i", "pixel.png"],
        "script": [_msg("a single pixel")],
    },
    # errors: one request each (retries 0); the bodies equal "plain" apart from ids.
    "error_400": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "say hi",
        "save_bodies": False,
        "script": [
            _err(
                400,
                "Invalid value for 'tools[3]': unsupported tool type 'custom'.",
                "invalid_request_error",
                "invalid_value",
                "tools[3]",
            )
        ],
    },
    "error_500": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "say hi",
        "save_bodies": False,
        "script": [_err(500, "upstream exploded", "server_error", "server_error")],
    },
    "error_503": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "say hi",
        "save_bodies": False,
        "script": [_err(503, "backend unavailable", "server_error", None)],
    },
    "error_response_failed": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "say hi",
        "save_bodies": False,
        "script": [{"error_event": {"code": "server_error", "message": "backend failed mid-stream"}}],
    },
    "error_stream_truncated": {
        "model": APPLY_PATCH_MODEL,
        "prompt": "say hi",
        "save_bodies": False,
        "script": [
            {"items": [{"type": "message", "text": "partial answer that never completes"}], "truncate_after": 5}
        ],
    },
}


def _png_1x1() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def _scrub_headers(h: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in h.items() if k not in ("host", "content-length")}


def record_case(name: str, case: Mapping[str, Any], out_dir: Path, *, timeout: float = 120.0) -> dict[str, Any]:
    """Run one case against the fake backend; write its request bodies; return a manifest entry."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fake_responses_backend import FakeResponsesBackend

    tmp = Path(tempfile.mkdtemp(prefix=f"codex-rec-{name}-"))
    try:
        work = tmp / "work"
        work.mkdir()
        for fn, content in case.get("seed", {}).items():
            if content == "PNG1x1":
                (work / fn).write_bytes(_png_1x1())
            else:
                (work / fn).write_text(content)
        runs = []
        with FakeResponsesBackend(list(case["script"])) as fake:
            env = write_codex_home(tmp / "home", base_url=fake.url, model=case["model"], **case.get("config", {}))
            turns = [(case["prompt"], None), *case.get("resume", [])]
            for k, (prompt, more) in enumerate(turns):
                if more:
                    fake.add_steps(*more)
                t0 = time.time()
                p = run_codex_exec(
                    prompt,
                    cwd=work,
                    env=env,
                    timeout=timeout,
                    resume_last=k > 0,
                    ephemeral=case.get("ephemeral", True),
                    extra_args=case.get("args", []) if k == 0 else [],
                )
                ev = parse_events(p.stdout)
                runs.append(
                    {
                        "prompt": prompt,
                        "returncode": p.returncode,
                        "seconds": round(time.time() - t0, 2),
                        "agent_messages": agent_messages(ev),
                        "errors": error_messages(p),
                        "commands": [
                            {
                                "command": c.get("command"),
                                "exit_code": c.get("exit_code"),
                                "aggregated_output": c.get("aggregated_output"),
                            }
                            for c in command_executions(ev)
                        ],
                    }
                )
            reqs = list(fake.requests)
        files = {}
        for f in work.iterdir():
            if f.is_file() and f.suffix != ".png":
                files[f.name] = f.read_text()
        bodies = [r for r in reqs if r["method"] == "POST" and r["path"].endswith("/responses")]
        written = []
        if case.get("save_bodies", True):
            for i, r in enumerate(bodies, 1):
                fn = f"{name}.request.json" if len(bodies) == 1 else f"{name}.{i}.request.json"
                (out_dir / fn).write_text(json.dumps(r["body"], indent=2, ensure_ascii=False) + "\n")
                written.append(fn)
        return {
            "model": case["model"],
            "runs": runs,
            "script": case["script"],
            "resume_scripts": [m for _, m in case.get("resume", [])],
            "requests": [
                {
                    "method": r["method"],
                    "path": r["path"],
                    "query": r["query"],
                    "has_authorization": r["has_authorization"],
                }
                for r in reqs
            ],
            "request_headers": [_scrub_headers(r["headers"]) for r in bodies[:1]],
            "request_files": written,
            "files_after": files,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def record(names: list[str] | None = None, out_dir: Path = FIXTURES_DIR) -> int:
    if codex_binary() is None:
        print("Codex not installed: run .ci/install-codex.sh", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest["codex_version"] = CODEX_VERSION
    manifest.setdefault("cases", {})
    sample = codex_config(base_url="http://127.0.0.1:PORT/v1", model="MODEL")
    manifest["config_toml"] = to_toml(sample)
    manifest["exec_args"] = codex_exec_args("PROMPT", cwd="WORKDIR")
    for name in names or list(CASES):
        print(f"recording {name} ...", flush=True)
        manifest["cases"][name] = record_case(name, CASES[name], out_dir)
        r = manifest["cases"][name]["runs"]
        print(
            f"  rc={[x['returncode'] for x in r]} msgs={[x['agent_messages'] for x in r]} "
            f"errors={[x['errors'] for x in r]} files={manifest['cases'][name]['request_files']}",
            flush=True,
        )
    manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["record"]:
        return record(argv[1:] or None)
    if argv[:1] == ["which"]:
        b = codex_binary()
        print(b or "")
        return 0 if b else 1
    print("usage: codex_support.py record [CASE ...] | which", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
