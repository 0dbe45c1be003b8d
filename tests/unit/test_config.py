from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config import load_config
from proxy.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_example_config_is_complete_and_valid() -> None:
    cfg = load_config(ROOT / "config.example.toml", {})
    assert cfg.upstreams[0].name == "local" and cfg.store.backend == "sqlite"


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[server]\nport = 1111\nhost = \"0.0.0.0\"\n")
    assert load_config(f, {}).server.port == 1111
    assert load_config(f, {"CROSSFEED_PORT": "2222"}).server.port == 2222
    assert load_config(f, {"CROSSFEED_SERVER__PORT": "3333"}).server.port == 3333
    assert load_config(f, {"CROSSFEED_PORT": "2222"}, {"server.port": 4444}).server.port == 4444
    assert load_config(f, {}).server.host == "0.0.0.0"


@pytest.mark.parametrize(("text", "fragment"), [
    ("[server]\nprot = 1\n", "server.prot: Extra inputs are not permitted"),
    ("[server]\nport = \"x\"\n", "server.port"),
    ("[[upstreams]]\nbase_url = \"ftp://x\"\n", "upstreams.0.base_url"),
    ("[[upstreams]]\nname = \"a\"\n[[upstreams]]\nname = \"a\"\n", "unique"),
    ("[[upstreams]]\napi = \"grpc\"\n", "upstreams.0.api"),
    ("[[upstreams]]\n[upstreams.timeouts]\nidle = -1\n", "upstreams.0.timeouts.idle"),
    ("[store]\nbackend = \"redis\"\nredis_url = \"redis://:hunter2@host/0\"\n", "must not hold credentials"),
    ("not toml = = 1", "invalid TOML"),
])
def test_bad_files_name_the_key(tmp_path: Path, text: str, fragment: str) -> None:
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(f, {})
    assert fragment in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml", {})


def test_routing_exact_glob_default() -> None:
    cfg = load_config(None, {}, {})
    assert cfg.route("anything").name == "default"
