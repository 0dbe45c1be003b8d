"""Start-up checks that depend on the environment: ``check-config`` reports exactly what would
stop ``serve`` in this environment (exit 1, the file itself being valid), and ``serve`` stops on
them with one clear line, never a traceback."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import base_env, cli, write

KEYS = """
[server]
inbound_keys_env = "TEST_CF_INBOUND"
[store]
backend = "memory"
"""

REDIS = """
[store]
backend = "redis"
"""


def test_check_config_unset_inbound_keys_is_a_problem_here(tmp_path: Path) -> None:
    path = write(tmp_path, KEYS)
    r = cli("check-config", str(path), env=base_env(tmp_path))
    assert r.returncode == 1
    out, err = r.stdout.decode(), r.stderr.decode()
    assert "valid" in out.splitlines()[0]
    assert "$TEST_CF_INBOUND, NOT SET in this environment: serve refuses to start" in out
    assert "would refuse to start" in err and "TEST_CF_INBOUND" in err and "Traceback" not in err
    ok = cli("check-config", str(path), env=base_env(tmp_path) | {"TEST_CF_INBOUND": "k1,k2"})
    assert ok.returncode == 0, ok.stderr.decode()
    assert ok.stderr == b""
    # The client's key is crossfeed's own inbound key: the table says it is not passed on.
    assert "never passed on" in ok.stdout.decode()


def test_serve_refuses_unset_inbound_keys_with_one_line(tmp_path: Path) -> None:
    r = cli("serve", "--config", str(write(tmp_path, KEYS)), "--port", "0", env=base_env(tmp_path), timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 2 and b"listening" not in r.stdout
    assert "TEST_CF_INBOUND" in err and "refusing to start" in err and "Traceback" not in err


def test_redis_store_without_url(tmp_path: Path) -> None:
    path = write(tmp_path, REDIS)
    env = base_env(tmp_path)
    env.pop("CROSSFEED_REDIS_URL", None)
    r = cli("check-config", str(path), env=env)
    err = r.stderr.decode()
    assert r.returncode == 1 and "redis" in err and "CROSSFEED_REDIS_URL" in err and "Traceback" not in err
    r = cli("serve", "--config", str(path), "--port", "0", env=env, timeout=30)
    err = r.stderr.decode()
    assert r.returncode == 2 and b"listening" not in r.stdout
    assert "redis_url" in err and "CROSSFEED_REDIS_URL" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
