"""The command line as a person uses it: every test runs ``python -m crossfeed ...`` in a subprocess.

- ``check-config``: a good file prints the routing table (no secret values); bad files exit 2
  naming the key's path (unknown key, wrong type, bad URL, bad TOML, missing file).
- ``demo``: exits 0 with progress lines, events in sequence order, the final text and usage;
  with the SDK, with ``--no-sdk``, and with the ``openai`` package made unimportable.
- ``translate``: captures in both directions; the output passes the strict validators
  (``validate_responses_sse`` / ``validate_chat_sse``), in SSE and JSONL, from a file and stdin,
  deterministic; failures are data (exit 0); usage errors exit 2.
- ``serve``: starts on port 0, prints its listening line, answers /healthz (also with the
  Dockerfile's own HEALTHCHECK command), exits 0 on SIGTERM and on SIGINT.

Every subprocess has a timeout; every server is stopped in a ``finally``. The container files are
tests/deploy/test_container.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.support.captures import capture_path
from tests.support.cli import SECRET, Server, base_env, cli, write
from tests.support.paths import ROOT
from tests.support.validators import validate_chat_sse, validate_responses_sse

# -- check-config ---------------------------------------------------------------------------------

GOOD = """
[server]
port = 9099
inbound_keys_env = "TEST_INBOUND_KEYS"

[[upstreams]]
name = "local"
base_url = "http://127.0.0.1:8000/v1/"
api = "chat"
models = ["qwen3*", "llama-3.3-70b"]
default = true
model_map = { "llama-3.3-70b" = "meta-llama/Llama-3.3-70B-Instruct" }
headers = { "X-Tenant" = "not-shown-either" }

[upstreams.timeouts]
first_byte = 900
idle = 60

[[upstreams]]
name = "hosted"
base_url = "https://api.example.com/v1"
api = "responses"
api_key_env = "TEST_HOSTED_KEY"
models = ["gpt-*"]
"""


def test_check_config_prints_routing_table(tmp_path: Path) -> None:
    env = base_env(tmp_path) | {"TEST_HOSTED_KEY": SECRET, "TEST_INBOUND_KEYS": SECRET + "-inbound"}
    r = cli("check-config", str(write(tmp_path, GOOD)), env=env)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "valid" in out.splitlines()[0]
    assert "listen 127.0.0.1:9099" in out
    local, hosted = out.index("1. local"), out.index("2. hosted")
    assert local < hosted
    assert "[default]" in out[local:hosted] and "[default]" not in out[hosted:]
    assert re.search(r"api\s+chat", out[local:hosted]) and re.search(r"api\s+responses", out[hosted:])
    assert "http://127.0.0.1:8000/v1\n" in out  # normalized, trailing slash removed
    assert "https://api.example.com/v1" in out
    assert "qwen3*, llama-3.3-70b" in out and "gpt-*" in out
    assert "llama-3.3-70b -> meta-llama/Llama-3.3-70B-Instruct" in out
    assert "$TEST_HOSTED_KEY (set)" in out and "$TEST_INBOUND_KEYS (set)" in out
    assert "first byte 900s" in out and "idle 60s" in out and "connect 10s" in out and "total 3600s" in out
    assert "X-Tenant" in out and "not-shown-either" not in out  # header names only
    assert "unknown models: -> local (default)" in out
    assert SECRET not in out and SECRET not in r.stderr.decode()


def test_check_config_environment_applies_and_unset_keys_are_flagged(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    env = base_env(tmp_path) | {"CROSSFEED_PORT": "7001"}
    r = cli("check-config", str(path), env=env)
    # The file is valid, but serve would refuse to start without the inbound keys it names: exit 1.
    assert r.returncode == 1, r.stderr.decode()
    out = r.stdout.decode()
    assert "listen 127.0.0.1:7001" in out and "CROSSFEED_PORT" in out
    assert "$TEST_HOSTED_KEY (NOT SET" in out
    assert "NOT SET in this environment: serve refuses to start without them" in out
    err = r.stderr.decode()
    # a backend key named but unset is a start-up problem too: the client's key must not go in its place
    assert "TEST_INBOUND_KEYS" in err and "names $TEST_HOSTED_KEY, which is unset or empty" in err
    assert "api_key_env (upstream" in err


def test_serve_refuses_an_upstream_key_variable_that_is_unset(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [[upstreams]]
        name = "hosted"
        api_key_env = "TEST_UNSET_BACKEND_KEY"
    """,
    )
    r = cli("serve", "--config", str(path), "--port", "0", env=base_env(tmp_path))
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "upstreams.0.api_key_env (upstream 'hosted') names $TEST_UNSET_BACKEND_KEY" in err
    assert "Traceback" not in err


def test_check_config_without_default_says_404(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [[upstreams]]
        name = "only"
        models = ["a-*"]
    """,
    )
    r = cli("check-config", str(path), env=base_env(tmp_path))
    assert r.returncode == 0, r.stderr.decode()
    assert "404 model_not_found" in r.stdout.decode()


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            """
     [[upstreams]]
     name = "a"
     bse_url = "http://x/v1"
     """,
            ["upstreams.0.bse_url", "unknown key; did you mean 'base_url'?"],
        ),
        (
            """
     [server]
     port = "eighty"
     """,
            ["server.port"],
        ),
        (
            """
     [server]
     prot = 80
     """,
            ["server.prot"],
        ),
        (
            """
     [[upstreams]]
     name = "a"
     base_url = "ftp://backend/v1"
     """,
            ["upstreams.0.base_url", "http://"],
        ),
        (
            """
     [[upstreams]]
     name = "a"
     api = "completions"
     """,
            ["upstreams.0.api"],
        ),
        (
            """
     [[upstreams]]
     name = "a"
     [upstreams.timeouts]
     idle = -1
     """,
            ["upstreams.0.timeouts.idle"],
        ),
        ("[server\nport = 1\n", ["invalid TOML"]),
    ],
    ids=["unknown-key", "wrong-type", "misspelt-section-key", "bad-url", "bad-api", "negative-timeout", "bad-toml"],
)
def test_check_config_bad_file_names_the_key(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = write(tmp_path, text)
    r = cli("check-config", str(path), env=base_env(tmp_path))
    assert r.returncode == 2
    err = r.stderr.decode()
    assert str(path) in err
    for piece in expected:
        assert piece in err, err
    assert r.stdout == b""
    assert "Traceback" not in err


def test_check_config_missing_file(tmp_path: Path) -> None:
    r = cli("check-config", str(tmp_path / "nope.toml"), env=base_env(tmp_path))
    assert r.returncode == 2
    assert "nope.toml" in r.stderr.decode() and "Traceback" not in r.stderr.decode()


def test_deploy_sample_configs_are_valid(tmp_path: Path) -> None:
    # The samples name CROSSFEED_INBOUND_KEYS, which their deployments set (a Secret, `-e`).
    env = base_env(tmp_path) | {"CROSSFEED_INBOUND_KEYS": "sk-sample"}
    r = cli("check-config", str(ROOT / "deploy" / "crossfeed.toml"), env=env)
    assert r.returncode == 0, r.stderr.decode()
    bare = cli("check-config", str(ROOT / "deploy" / "crossfeed.toml"), env=base_env(tmp_path))
    assert bare.returncode == 1 and "CROSSFEED_INBOUND_KEYS" in bare.stderr.decode()
    # The TOML embedded in the Kubernetes ConfigMap (the block under `config.toml: |`).
    text = (ROOT / "deploy" / "kubernetes-sidecar.yaml").read_text()
    block = text.split("config.toml: |\n", 1)[1].split("\n---", 1)[0]
    r = cli("check-config", str(write(tmp_path, block, "configmap.toml")), env=env)
    assert r.returncode == 0, r.stderr.decode()
    assert "http://127.0.0.1:8000/v1" in r.stdout.decode()


# -- demo -----------------------------------------------------------------------------------------

EVENT_LINE = re.compile(r"^\s+#(\d+)\s+(\S+)")


def demo_blocks(out: str) -> list[list[tuple[int, str]]]:
    blocks: list[list[tuple[int, str]]] = []
    for line in out.splitlines():
        if line.startswith("sending "):
            blocks.append([])
        m = EVENT_LINE.match(line)
        if m:
            blocks[-1].append((int(m.group(1)), m.group(2)))
    return blocks


def check_demo_output(r: subprocess.CompletedProcess) -> str:
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    assert re.search(r"^starting demo backend on http://127\.0\.0\.1:\d+/v1", out, re.MULTILINE)
    assert re.search(r"^crossfeed on http://127\.0\.0\.1:\d+/v1", out, re.MULTILINE)
    assert out.index("starting demo backend") < out.index("crossfeed on") < out.index("sending ")
    blocks = demo_blocks(out)
    assert len(blocks) == 2
    for block in blocks:
        seqs = [s for s, _ in block]
        assert seqs == list(range(len(block)))  # printed as they arrived, in order, none missing
        assert block[0][1] == "response.created" and block[1][1] == "response.in_progress"
        assert block[-1][1] == "response.completed"
    first, second = ({t for _, t in b} for b in blocks)
    assert {"response.reasoning_text.delta", "response.function_call_arguments.delta"} <= first
    assert {"response.reasoning_text.delta", "response.output_text.delta"} <= second
    assert "get_weather" in out
    assert re.search(r"^final text: It is sunny in Paris", out, re.MULTILINE)
    assert re.search(
        r"^usage: input_tokens=\d+ output_tokens=\d+ \(reasoning \d+\) total_tokens=\d+", out, re.MULTILINE
    )
    # the demo ran to its end: its last line is the closing summary
    assert re.match(r"done: \d+ chat requests reached the backend", out.rstrip().splitlines()[-1]), out[-500:]
    return out


# Hang guard of a demo run, not a speed limit: above the demo's own DEMO_TIMEOUT (60 s, after which
# it prints "demo failed: gave up" and exits 1), so a stuck demo reports itself first.
DEMO_GUARD = 90


def test_demo_with_sdk(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    # check_demo_output: exit 0, every event in order, the final text and the usage line
    out = check_demo_output(cli("demo", env=base_env(tmp_path), timeout=DEMO_GUARD))
    assert "with the openai SDK" in out


def test_demo_with_aiohttp_client(tmp_path: Path) -> None:
    out = check_demo_output(cli("demo", "--no-sdk", "--delay", "0", env=base_env(tmp_path), timeout=DEMO_GUARD))
    assert "aiohttp" in out


def test_demo_falls_back_when_openai_is_missing(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "openai"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = base_env(tmp_path) | {"PYTHONPATH": str(tmp_path / "shadow")}
    out = check_demo_output(cli("demo", "--delay", "0", env=env, timeout=DEMO_GUARD))
    assert "openai package is not installed" in out and "aiohttp" in out


# -- translate ------------------------------------------------------------------------------------

CHAT_CASES = [
    "crusoe-vllm-llama33-text",
    "deepseek-reasoner-reasoning-content",
    "groq-kimik2-content-and-tool-call",
    "deepseek-chat-length",
    "avian-kimik25-reasoning-details-parallel-tools",
]
RESPONSES_CASES = [
    "openai-gpt4o-function-call-no-seq",
    "azure-gpt5mini-reasoning-summary-3-parts",
    "openai-gpt5-web-search-call",
    "openai-gpt4omini-parallel-function-calls",
    "githubcopilot-gpt53codex-rotating-item-ids",
]


def capture(kind: str, name: str) -> Path:
    return capture_path(f"{kind}/{name}.sse")


@pytest.mark.parametrize("name", CHAT_CASES)
def test_translate_chat_to_responses(tmp_path: Path, name: str) -> None:
    path = capture("chat", name)
    r = cli("translate", "--from", "chat", "--to", "responses", str(path), env=base_env(tmp_path))
    assert r.returncode == 0, r.stderr.decode()
    events = validate_responses_sse(r.stdout)
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert "chat -> responses" in r.stderr.decode()
    # Deterministic: the same bytes again, and the same events as JSONL from stdin.
    again = cli("translate", "--from", "chat", "--to", "responses", str(path), env=base_env(tmp_path))
    assert again.stdout == r.stdout
    jl = cli(
        "translate", "--from", "chat", "--to", "responses", "--jsonl", env=base_env(tmp_path), stdin=path.read_bytes()
    )
    assert jl.returncode == 0, jl.stderr.decode()
    assert [orjson.loads(line) for line in jl.stdout.splitlines()] == events


@pytest.mark.parametrize("name", RESPONSES_CASES)
def test_translate_responses_to_chat(tmp_path: Path, name: str) -> None:
    path = capture("responses", name)
    r = cli("translate", "--from", "responses", "--to", "chat", str(path), env=base_env(tmp_path))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.endswith(b"data: [DONE]\n\n")
    chunks = validate_chat_sse(r.stdout, expect_usage=True)
    assert all(c.get("object") == "chat.completion.chunk" for c in chunks)
    assert any(ch.get("finish_reason") for c in chunks for ch in c["choices"])
    jl = cli(
        "translate", "--from", "responses", "--to", "chat", "--jsonl", env=base_env(tmp_path), stdin=path.read_bytes()
    )
    assert jl.returncode == 0, jl.stderr.decode()
    assert [orjson.loads(line) for line in jl.stdout.splitlines()] == chunks


def test_translate_with_request_files(tmp_path: Path) -> None:
    """--request: a Responses request is echoed; a Chat request without include_usage drops usage."""
    path = capture("chat", "crusoe-vllm-llama33-text")
    req = write(
        tmp_path, json.dumps({"model": "llama-echo", "input": "hi", "stream": True, "temperature": 0.25}), "req.json"
    )
    r = cli(
        "translate", "--from", "chat", "--to", "responses", "--request", str(req), str(path), env=base_env(tmp_path)
    )
    assert r.returncode == 0, r.stderr.decode()
    events = validate_responses_sse(r.stdout)
    assert events[0]["response"]["model"] == "llama-echo"
    assert events[-1]["response"]["temperature"] == 0.25

    rpath = capture("responses", "openai-gpt4o-function-call-no-seq")
    chat_req = write(
        tmp_path,
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}),
        "chat.json",
    )
    r = cli(
        "translate",
        "--from",
        "responses",
        "--to",
        "chat",
        "--request",
        str(chat_req),
        str(rpath),
        env=base_env(tmp_path),
    )
    assert r.returncode == 0, r.stderr.decode()
    chunks = validate_chat_sse(r.stdout, expect_usage=False)
    assert all("usage" not in c for c in chunks)


def test_translate_failures_are_data(tmp_path: Path) -> None:
    path = capture("chat", "groq-gptoss-error-event-midstream")
    r = cli("translate", "--from", "chat", "--to", "responses", str(path), env=base_env(tmp_path))
    assert r.returncode == 0, r.stderr.decode()
    events = validate_responses_sse(r.stdout)
    assert events[-1]["type"] == "response.failed"
    assert "ended: failed" in r.stderr.decode()

    truncated = (
        b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1",'
        b'"object":"response","created_at":1,"status":"in_progress","model":"m","output":[]}}\n\n'
    )
    r = cli("translate", "--from", "responses", "--to", "chat", env=base_env(tmp_path), stdin=truncated)
    assert r.returncode == 0, r.stderr.decode()
    chunks = validate_chat_sse(r.stdout)
    assert chunks[-1]["error"]["message"]

    r = cli("translate", "--from", "chat", "--to", "responses", env=base_env(tmp_path), stdin=b"data: {not json\n\n")
    assert r.returncode == 0
    assert validate_responses_sse(r.stdout)[-1]["type"] == "response.failed"


def test_translate_usage_errors(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    r = cli("translate", "--from", "chat", "--to", "responses", str(tmp_path / "missing.sse"), env=env)
    assert r.returncode == 2 and "missing.sse" in r.stderr.decode() and r.stdout == b""
    r = cli("translate", "--from", "chat", "--to", "chat", str(tmp_path), env=env)
    assert r.returncode == 2 and "must differ" in r.stderr.decode()
    bad = write(tmp_path, "{nope", "bad.json")
    r = cli(
        "translate",
        "--from",
        "chat",
        "--to",
        "responses",
        "--request",
        str(bad),
        str(capture("chat", "crusoe-vllm-llama33-text")),
        env=env,
    )
    assert r.returncode == 2 and "not valid JSON" in r.stderr.decode()
    r = cli("translate", "--from", "chat", env=env)
    assert r.returncode == 2


# -- serve ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_starts_answers_and_stops_cleanly(tmp_path: Path, sig: int) -> None:
    server = Server(tmp_path)
    try:
        status, body = server.get("/healthz")
        assert status == 200 and orjson.loads(body)["status"] == "ok"
    finally:
        rc = server.stop(sig)
    assert rc == 0
    assert "Traceback" not in (tmp_path / "serve.err").read_text()


def test_serve_reverse_mode_and_environment(tmp_path: Path) -> None:
    server = Server(tmp_path, "--upstream-api", "responses", "--upstream", "http://127.0.0.1:9/v1")
    try:
        assert "http://127.0.0.1:9/v1 (responses)" in server.line
        assert server.get("/healthz")[0] == 200
    finally:
        assert server.stop(signal.SIGTERM) == 0
    # CROSSFEED_CONFIG stands for --config (the container's way); flags still win over it.
    path = write(tmp_path, '[[upstreams]]\nname = "viaenv"\nbase_url = "http://127.0.0.1:9/v1"\napi = "responses"\n')
    server = Server(tmp_path, env=base_env(tmp_path) | {"CROSSFEED_CONFIG": str(path)})
    try:
        assert "viaenv=http://127.0.0.1:9/v1 (responses)" in server.line
    finally:
        assert server.stop(signal.SIGTERM) == 0


def test_serve_bad_config_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nprot = 1\n")
    r = cli("serve", "--config", str(path), "--port", "0", env=base_env(tmp_path), timeout=30)
    assert r.returncode == 2
    assert "server.prot" in r.stderr.decode() and b"listening" not in r.stdout


def test_serve_rejects_unknown_upstream_api(tmp_path: Path) -> None:
    r = cli("serve", "--upstream-api", "completions", env=base_env(tmp_path), timeout=30)
    assert r.returncode == 2 and "invalid choice" in r.stderr.decode()


def test_version_and_a_closed_pipe(tmp_path: Path) -> None:
    r = cli("--version", env=base_env(tmp_path))
    assert r.returncode == 0 and r.stdout.decode().startswith("crossfeed ")
    # `crossfeed check-config FILE | head -1`: the reader is gone before the output is written
    # (the read end of the pipe is closed first, so every write fails): no traceback, exit 0
    read, write = os.pipe()
    os.close(read)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "crossfeed", "check-config", str(ROOT / "config.example.toml")],
            cwd=ROOT,
            env=base_env(tmp_path),
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write)
    assert r.returncode == 0, r.stderr.decode()
    assert b"Traceback" not in r.stderr and b"BrokenPipe" not in r.stderr


def test_translate_says_when_the_stream_is_the_other_api(tmp_path: Path) -> None:
    responses = tmp_path / "r.sse"
    responses.write_bytes(
        b'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"r"}}\n\n'
    )
    r = cli("translate", "--from", "chat", "--to", "responses", str(responses), env=base_env(tmp_path))
    assert "this is a Responses API stream" in r.stderr.decode() and "--from responses --to chat" in r.stderr.decode()
    chat = tmp_path / "c.sse"
    chat.write_bytes(
        b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}'
        b"\n\ndata: [DONE]\n\n"
    )
    r = cli("translate", "--from", "responses", "--to", "chat", str(chat), env=base_env(tmp_path))
    assert "this is a Chat Completions stream" in r.stderr.decode()
    r = cli("translate", "--from", "chat", "--to", "responses", str(chat), env=base_env(tmp_path))
    assert "note:" not in r.stderr.decode()  # the right way round: no hint


def test_every_command_has_examples_in_its_help(tmp_path: Path) -> None:
    for command in ([], ["serve"], ["check-config"], ["demo"], ["translate"]):
        r = cli(*command, "--help", env=base_env(tmp_path))
        assert r.returncode == 0 and "examples:\n  crossfeed " in r.stdout.decode(), command
