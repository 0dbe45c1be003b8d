"""Safe by default, from the operator's side: every test runs ``python -m crossfeed ...`` as a person
would, with the environment a container gets.

- ``CROSSFEED_INBOUND_KEYS`` alone (no config file naming it) turns inbound auth on: a request
  without the key gets 401. Set while the file names another variable, or set but empty, serve
  refuses to start: it is never silently ignored.
- Listening beyond loopback with no inbound keys prints a warning naming the risk (and
  ``allow_unauthenticated`` says it is intended); with keys but an open ``/metrics``, a warning too.
- ``/metrics`` requires its own key (``metrics_key_env``), or lives on a port of its own
  (``metrics_port``), with one worker and with two.
- The listening line and ``check-config`` say where the store lives and which settings are
  built-in defaults; a config with no upstream says so.
- ``--model-map`` / ``CROSSFEED_MODEL_MAP``: the one setting every Codex user on a real backend needs.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.cli import SECRET, Server, base_env, cli, write
from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(120)


def status_of(url: str, key: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_output(tmp_path: Path, *args: str, env: dict[str, str]) -> tuple[str, str, int]:
    """Start serve, read its listening line, stop it with SIGTERM: (first stdout line, stderr, port)."""
    server = Server(tmp_path, *args, env=env)  # a --host among args wins over its 127.0.0.1
    try:
        line = server.line
    finally:
        assert server.stop(signal.SIGTERM) == 0
    return line, (tmp_path / "serve.err").read_text(), server.port


# -- inbound keys from the environment alone ---------------------------------------------------------


def test_crossfeed_inbound_keys_alone_turns_auth_on(tmp_path: Path) -> None:
    """The README's first container command configures everything by environment: the key
    variable must protect the proxy by itself, with no file naming it."""
    env = base_env(tmp_path) | {"CROSSFEED_INBOUND_KEYS": f"{SECRET},second-key"}
    server = Server(tmp_path, env=env)
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert status_of(base + "/v1/responses/resp_x") == 401
        assert status_of(base + "/v1/responses/resp_x", "wrong") == 401
        assert status_of(base + "/v1/responses/resp_x", SECRET) == 404  # past auth: the store's answer
        assert status_of(base + "/v1/responses/resp_x", "second-key") == 404
        assert status_of(base + "/healthz") == 200
    finally:
        assert server.stop(signal.SIGTERM) == 0
    assert SECRET not in (tmp_path / "serve.err").read_text() and SECRET not in server.line
    empty = write(tmp_path, "")
    r = cli("check-config", str(empty), env=env)
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr.decode()
    assert "inbound auth: key-1, key-2... from $CROSSFEED_INBOUND_KEYS (set)" in out
    assert "CROSSFEED_INBOUND_KEYS" in out.splitlines()[1]  # "environment overrides applied: ..."
    assert "inbound auth: off" not in out and SECRET not in out


def test_crossfeed_inbound_keys_is_never_ignored(tmp_path: Path) -> None:
    other = write(tmp_path, '[server]\ninbound_keys_env = "OTHER_KEYS"\n')
    env = base_env(tmp_path) | {"CROSSFEED_INBOUND_KEYS": SECRET, "OTHER_KEYS": "k"}
    for command in (["serve", "--config", str(other), "--port", "0"], ["check-config", str(other)]):
        r = cli(*command, env=env, timeout=30)
        err = r.stderr.decode()
        assert r.returncode == 2 and b"listening" not in r.stdout, err
        assert "$CROSSFEED_INBOUND_KEYS is set, but server.inbound_keys_env" in err and "$OTHER_KEYS" in err
        assert str(other) in err and SECRET not in err and "Traceback" not in err
    for empty in ("", " , "):
        r = cli("serve", "--port", "0", env=base_env(tmp_path) | {"CROSSFEED_INBOUND_KEYS": empty}, timeout=30)
        err = r.stderr.decode()
        assert r.returncode == 2 and b"listening" not in r.stdout, err
        assert "$CROSSFEED_INBOUND_KEYS is set but holds no key: refusing to start" in err
    # a typo of it is caught like every other variable's
    r = cli("serve", "--port", "0", env=base_env(tmp_path) | {"CROSSFEED_INBOUND_KEY": "k"}, timeout=30)
    assert r.returncode == 2 and "did you mean $CROSSFEED_INBOUND_KEYS?" in r.stderr.decode()


# -- listening beyond loopback ------------------------------------------------------------------------


def test_open_port_without_keys_warns_at_start(tmp_path: Path) -> None:
    """0.0.0.0 is what a container binds. Without keys serve warns once, naming the risk and the
    fixes; ``allow_unauthenticated`` says it is intended; loopback never warns."""
    env = base_env(tmp_path) | {"CROSSFEED_UPSTREAM": "http://127.0.0.1:9/v1"}
    line, err, port = serve_output(tmp_path, "--host", "0.0.0.0", env=env)
    warnings = [w for w in err.splitlines() if w.startswith("crossfeed: warning:")]
    assert len(warnings) == 1, err
    assert f"listening on 0.0.0.0:{port} with no inbound keys: anyone who can reach this port" in warnings[0]
    assert "CROSSFEED_INBOUND_KEYS" in warnings[0] and "allow_unauthenticated" in warnings[0]
    assert line.startswith("crossfeed listening on http://0.0.0.0:")
    _, quiet, _ = serve_output(
        tmp_path, "--host", "0.0.0.0", env=env | {"CROSSFEED_SERVER__ALLOW_UNAUTHENTICATED": "1"}
    )
    assert "warning" not in quiet, quiet
    _, local, _ = serve_output(tmp_path, env=env)
    assert "warning" not in local, local
    # with keys, the open /metrics is what is left to warn about
    _, keyed, port = serve_output(tmp_path, "--host", "0.0.0.0", env=env | {"CROSSFEED_INBOUND_KEYS": SECRET})
    (warning,) = [w for w in keyed.splitlines() if w.startswith("crossfeed: warning:")]
    assert f"GET /metrics answers without a key on 0.0.0.0:{port}" in warning and "metrics_key_env" in warning
    r = cli("check-config", str(write(tmp_path, '[server]\nhost = "::"\n')), env=env)
    assert (
        r.returncode == 0 and "serve would warn:" in r.stdout.decode() and "with no inbound keys" in r.stdout.decode()
    )


# -- /metrics: a key of its own, or a port of its own ---------------------------------------------------


def test_metrics_key_is_required_and_is_not_a_client_key(tmp_path: Path) -> None:
    env = base_env(tmp_path) | {
        "CROSSFEED_INBOUND_KEYS": "client-key",
        "CROSSFEED_SERVER__METRICS_KEY_ENV": "SCRAPE_KEY",
        "SCRAPE_KEY": "scrape-key",
    }
    server = Server(tmp_path, env=env)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        assert status_of(url) == 401
        assert status_of(url, "client-key") == 401  # a client's key reads no metrics
        assert status_of(url, "scrape-key") == 200
        assert status_of(f"http://127.0.0.1:{server.port}/v1/responses/r", "scrape-key") == 401  # nor the reverse
    finally:
        assert server.stop(signal.SIGTERM) == 0
    r = cli("serve", "--port", "0", env={k: v for k, v in env.items() if k != "SCRAPE_KEY"}, timeout=30)
    assert r.returncode == 2 and "server.metrics_key_env names $SCRAPE_KEY, which is unset" in r.stderr.decode()


@pytest.mark.parametrize("workers", [1, 2])
def test_metrics_on_a_port_of_its_own(tmp_path: Path, workers: int) -> None:
    port = free_port()
    env = base_env(tmp_path) | {"CROSSFEED_SERVER__METRICS_PORT": str(port), "CROSSFEED_WORKERS": str(workers)}
    server = Server(tmp_path, env=env)
    try:
        assert status_of(f"http://127.0.0.1:{server.port}/metrics") == 404  # not on the main port
        assert status_of(f"http://127.0.0.1:{server.port}/healthz") == 200
        for _ in range(4):  # with two workers, whichever accepts answers
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                assert resp.status == 200 and b"crossfeed_requests_total" in resp.read()
        assert status_of(f"http://127.0.0.1:{port}/healthz") == 404  # that port serves metrics only
    finally:
        assert server.stop(signal.SIGTERM) == 0
    assert "Traceback" not in (tmp_path / "serve.err").read_text()
    r = cli("check-config", str(write(tmp_path, "")), env=env)
    assert f"GET /metrics: on its own port 127.0.0.1:{port} (not on the main port), no key" in r.stdout.decode()


def test_metrics_port_taken_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = base_env(tmp_path) | {"CROSSFEED_SERVER__METRICS_PORT": str(port)}
        r = cli("serve", "--port", "0", env=env, timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 1 and f"cannot listen on 127.0.0.1:{port} (server.metrics_port)" in err, err


# -- where things are, and what nobody set --------------------------------------------------------------


def test_listening_line_and_check_config_say_where_the_store_lives(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    env.pop("CROSSFEED_DATA_DIR")
    env["HOME"] = str(tmp_path / "home")
    env.pop("XDG_STATE_HOME", None)
    default_file = tmp_path / "home" / ".local" / "state" / "crossfeed" / "responses.sqlite3"
    line, err, _ = serve_output(tmp_path, env=env)
    assert f"store: sqlite (built-in default) at {default_file} (built-in default: shared by every" in line
    assert "default=http://127.0.0.1:8000/v1 (chat) [built-in default] (no upstream configured)" in line
    assert "crossfeed: warning: no upstream is configured: using the built-in default http://127.0.0.1:8000/v1" in err
    r = cli("check-config", str(write(tmp_path, "[logging]\nlevel = 'debug'\n")), env=env)
    out = r.stdout.decode()
    assert f"response store: sqlite (built-in default) at {default_file}" in out
    assert "logging: level debug, format auto (built-in default)" in out  # the file's own: no note
    assert "server: listen 127.0.0.1:8080 (host built-in default; port built-in default)" in out
    assert "none configured: the built-in default below is used" in out
    assert re.search(r"base_url  http://127\.0\.0\.1:8000/v1 \(built-in default\)", out)
    # set by a variable: named
    r = cli("check-config", str(write(tmp_path, "")), env=env | {"CROSSFEED_DATA_DIR": str(tmp_path / "d")})
    assert f"at {tmp_path / 'd' / 'responses.sqlite3'} (from $CROSSFEED_DATA_DIR)" in r.stdout.decode()
    redis = write(tmp_path, '[store]\nbackend = "redis"\n', "redis.toml")
    r = cli("check-config", str(redis), env=env | {"CROSSFEED_REDIS_URL": "redis://user:pw@127.0.0.1:6390/2"})
    out = r.stdout.decode()
    assert "response store: redis at redis://127.0.0.1:6390/2 (from $CROSSFEED_REDIS_URL)" in out
    assert "pw" not in out.split("response store:")[1].splitlines()[0]


# -- --model-map ------------------------------------------------------------------------------------------


def test_model_map_from_flag_and_variable(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    empty = str(write(tmp_path, ""))
    r = cli("check-config", empty, env=env | {"CROSSFEED_MODEL_MAP": '{"gpt-5.5": "qwen3-coder"}'})
    assert r.returncode == 0 and "renames   gpt-5.5 -> qwen3-coder" in r.stdout.decode(), r.stderr.decode()
    for args, extra, name in (
        (["--model-map", "gpt-5.5=qwen"], {}, "--model-map"),
        ([], {"CROSSFEED_MODEL_MAP": "[1]"}, "$CROSSFEED_MODEL_MAP"),
    ):
        r = cli("serve", "--port", "0", *args, env=env | extra, timeout=30)
        err = r.stderr.decode()
        assert r.returncode == 2 and f"{name}: must be a JSON object of model names" in err, err
    code = (
        "import sys; from crossfeed.proxy.cli.main import build_parser, config_from_args; "
        "c = config_from_args(build_parser().parse_args(sys.argv[1:])); print(c.upstreams[0].model_map)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "serve", "--model-map", '{"gpt-5.5": "from-flag"}'],
        cwd=ROOT,
        env=env | {"CROSSFEED_MODEL_MAP": '{"gpt-5.5": "from-variable"}'},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert r.stdout.decode().strip() == "{'gpt-5.5': 'from-flag'}", r.stderr.decode()  # the flag wins
    assert os.environ.get("CROSSFEED_MODEL_MAP") is None
