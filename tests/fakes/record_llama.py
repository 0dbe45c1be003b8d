"""Record the real llama.cpp server streams the golden cases replay.

    python -m tests.fakes.record_llama [OUT_DIR]    # default tests/fixtures/recorded

Starts both servers (built by .ci/build-llama.sh) on the tiny scripted model, sends each request
below, and writes the raw response body byte for byte (``chat/`` or ``responses/``), with the
request beside it. The README under tests/fixtures/recorded lists what each one shows.
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.request
from pathlib import Path

from tests.fakes import llama_servers as ls
from tests.fakes.tiny_model import write_model

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
USER = {"role": "user", "content": "Weather in Paris?"}

# (server, file name, path, request body)
RECORDINGS = [
    (
        "llama-cpp-python",
        "chat/llamacpppython-named-tool-legacy-function-call.sse",
        "/chat/completions",
        {
            "messages": [USER],
            "tools": [WEATHER],
            "stream": True,
            "stream_options": {"include_usage": True},
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
    ),
    (
        "llama-cpp-python",
        "chat/llamacpppython-tool-markup-in-content.sse",
        "/chat/completions",
        {"messages": [USER], "tools": [WEATHER], "stream": True, "stream_options": {"include_usage": True}},
    ),
    (
        "llama-server",
        "chat/llamaserver-tool-call.sse",
        "/chat/completions",
        {"messages": [USER], "tools": [WEATHER], "stream": True, "stream_options": {"include_usage": True}},
    ),
    *[
        (
            "llama-server",
            f"chat/llamaserver-markup-{m}.sse",
            "/chat/completions",
            {
                "messages": [{"role": "system", "content": f"markup={m}"}, USER],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        for m in ("hermes", "mistral", "qwen3")
    ],
    (
        "llama-server",
        "responses/llamaserver-native-text.sse",
        "/responses",
        {"model": "tiny", "input": "Say hello", "stream": True},
    ),
    (
        "llama-server",
        "responses/llamaserver-native-cut.sse",
        "/responses",
        {"model": "tiny", "input": "Say hello", "stream": True, "max_output_tokens": 3},
    ),
    (
        "llama-server",
        "responses/llamaserver-native-tool-call.sse",
        "/responses",
        {
            "model": "tiny",
            "input": "Weather in Paris?",
            "stream": True,
            "tools": [{"type": "function", **WEATHER["function"]}],
        },
    ),
]


def post(url: str, body: dict[str, object]) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:  # loopback
        return r.read()  # type: ignore[no-any-return]


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
    bins = ls.binaries()
    if bins is None:
        print(ls.BUILD_HINT, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        model = write_model(Path(tmp) / "tiny.gguf")
        with ls.llama_server(bins, model, Path(tmp)) as a, ls.llama_cpp_python(bins, model, Path(tmp)) as b:
            urls = {"llama-server": a.url, "llama-cpp-python": b.url}
            for server, name, path, body in RECORDINGS:
                target = out / name
                target.write_bytes(post(urls[server] + path, body))
                target.with_suffix(".request.json").write_text(json.dumps(body, indent=2) + "\n")
                print(f"{server}: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
