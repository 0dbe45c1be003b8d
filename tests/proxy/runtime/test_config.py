from __future__ import annotations

from pathlib import Path

import pytest

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.runtime.config import Config, load_config
from tests.support.paths import ROOT


def test_example_config_is_complete_and_valid() -> None:
    cfg = load_config(ROOT / "config.example.toml", {})
    assert cfg.upstreams[0].name == "local" and cfg.store.backend == "sqlite"


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[server]\nport = 1111\nhost = "0.0.0.0"\n')
    assert load_config(f, {}).server.port == 1111
    assert load_config(f, {"CROSSFEED_PORT": "2222"}).server.port == 2222
    assert load_config(f, {"CROSSFEED_SERVER__PORT": "3333"}).server.port == 3333
    assert load_config(f, {"CROSSFEED_PORT": "2222"}, {"server.port": 4444}).server.port == 4444
    assert load_config(f, {}).server.host == "0.0.0.0"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[server]\nprot = 1\n", "server.prot (in "),
        ('[server]\nport = "x"\n', "server.port"),
        ('[[upstreams]]\nbase_url = "ftp://x"\n', "upstreams.0.base_url"),
        ('[[upstreams]]\nname = "a"\n[[upstreams]]\nname = "a"\n', "unique"),
        ('[[upstreams]]\napi = "grpc"\n', "upstreams.0.api"),
        ("[[upstreams]]\n[upstreams.timeouts]\nidle = -1\n", "upstreams.0.timeouts.idle"),
        ("[server]\nallocator_retain_mb = -1\n", "server.allocator_retain_mb"),
        ("[server]\ngc_young_threshold = -5\n", "server.gc_young_threshold"),
        ('[store]\nbackend = "redis"\nredis_url = "redis://:hunter2@host/0"\n', "must not hold credentials"),
        ("not toml = = 1", "invalid TOML"),
    ],
)
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


def _upstreams(tmp_path: Path, text: str) -> Config:
    f = tmp_path / "c.toml"
    f.write_text(text)
    return load_config(f, {})


def test_routing_most_specific_wins_whatever_the_order(tmp_path: Path) -> None:
    # The catch-all comes first, as in config.example.toml: the narrower upstreams after it
    # must still get their models.
    cfg = _upstreams(
        tmp_path,
        """
[[upstreams]]
name = "local"
models = ["*"]
default = true
[[upstreams]]
name = "deepseek"
base_url = "https://api.deepseek.com/v1"
models = ["deepseek-*", "exact-model"]
[[upstreams]]
name = "other"
base_url = "http://127.0.0.1:9/v1"
models = ["deepseek-reasoner", "deep*"]
""",
    )
    assert cfg.route("deepseek-chat").name == "deepseek"  # pattern beats the catch-all
    assert cfg.route("exact-model").name == "deepseek"  # exact name
    assert cfg.route("deepseek-reasoner").name == "other"  # exact beats an earlier pattern
    assert cfg.route("deepest").name == "other"  # only the later pattern matches
    assert cfg.route("qwen3").name == "local"  # nothing narrower: the default


def test_routing_default_before_a_bare_star_then_404(tmp_path: Path) -> None:
    cfg = _upstreams(
        tmp_path,
        """
[[upstreams]]
name = "unnamed-models"
[[upstreams]]
name = "fallback"
base_url = "http://127.0.0.1:9/v1"
models = ["x-*"]
default = true
""",
    )
    assert cfg.route("x-1").name == "fallback"
    assert cfg.route("y").name == "fallback"  # marked default beats an upstream listing only "*"
    cfg = _upstreams(
        tmp_path,
        """
[[upstreams]]
name = "a"
models = ["a-*"]
[[upstreams]]
name = "b"
base_url = "http://127.0.0.1:9/v1"
""",
    )
    assert cfg.route("a-1").name == "a"
    assert cfg.route("z").name == "b"  # no default: the upstream that lists "*"
    cfg = _upstreams(
        tmp_path,
        """
[[upstreams]]
name = "a"
models = ["a-*", "a?c", "[xy]z"]
""",
    )
    assert cfg.route("abc").name == "a" and cfg.route("yz").name == "a"
    assert cfg.route("b") is None  # 404 model_not_found


def test_example_config_routes_the_commented_second_upstream(tmp_path: Path) -> None:
    """config.example.toml's commented second upstream, uncommented, gets its models."""
    root = ROOT
    text = (root / "config.example.toml").read_text()
    block = text.split("# A second backend", 1)[1].split("\n\n", 1)[0]
    uncommented = "\n".join(line[2:] for line in block.splitlines()[1:] if line.startswith("# "))
    assert "models" in uncommented
    head, store = text.split("\n[store]", 1)
    cfg = _upstreams(tmp_path, head + "\n" + uncommented + "\n\n[store]" + store)
    assert [u.name for u in cfg.upstreams] == ["local", "deepseek"]
    assert cfg.route("deepseek-chat").name == "deepseek"
    assert cfg.route("qwen3-8b").name == "local"


def test_errors_blame_their_source_in_plain_words(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    cases = [
        ({"CROSSFEED_PORT": "abc"}, None, "server.port (from $CROSSFEED_PORT): must be a whole number, got 'abc'"),
        (
            {"CROSSFEED_UPSTREAM__TIMEOUTS__IDLE": "-1"},
            None,
            "upstreams.0.timeouts.idle (from $CROSSFEED_UPSTREAM__TIMEOUTS__IDLE): must be above 0",
        ),
        ({}, ({"server.port": 70000}, {"server.port": "--port"}), "server.port (from --port): must be at most 65535"),
        ({"CROSSFEED_LOG_LEVEL": "loud"}, None, "logging.level (from $CROSSFEED_LOG_LEVEL): must be one of"),
    ]
    for env, flags, expected in cases:
        with pytest.raises(ConfigError) as info:
            load_config(empty, env, *(flags or ()))
        assert expected in str(info.value), str(info.value)
        assert "empty.toml" not in str(info.value)  # the file is not to blame
    f = tmp_path / "c.toml"
    f.write_text('[upstreams]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"write \[\[upstreams\]\] \(two brackets\)"):
        load_config(f, {})
    f.write_text("[server]\nprot = 1\n")
    with pytest.raises(ConfigError, match=r"server.prot \(in .*c.toml\): unknown key; did you mean 'port'\?"):
        load_config(f, {})


def test_a_misspelt_variable_is_named_with_the_right_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$CROSSFEED_UPSTRAEM: .*did you mean \$CROSSFEED_UPSTREAM\?"):
        load_config(None, {"CROSSFEED_UPSTRAEM": "http://x/v1"})
    # a script's own CROSSFEED_* variables, and the ones the config names, are not typos
    cfg = load_config(
        None,
        {
            "CROSSFEED_TEST_REDIS_URL": "redis://x",
            "CROSSFEED_CODEX_BIN": "/x",
            "CROSSFEED_HOSTS": "k",
            "CROSSFEED_UPSTREAM__API_KEY_ENV": "CROSSFEED_HOSTS",
        },
    )
    assert cfg.upstreams[0].api_key_env == "CROSSFEED_HOSTS"  # one letter from CROSSFEED_HOST, but named


def test_event_dialect_server_wide_and_per_key(tmp_path: Path) -> None:
    from crossfeed.translators.options import OPEN_RESPONSES_EVENTS, OPENAI_EVENTS

    assert load_config(None, {}).server.event_names(None) is OPENAI_EVENTS  # the default: OpenAI's names
    f = tmp_path / "c.toml"
    f.write_text(
        '[server]\nevent_dialect = "open_responses"\n'
        '[[server.inbound_keys]]\nname = "sdk"\nkey_env = "K1"\nevent_dialect = "openai"\n'
        '[[server.inbound_keys]]\nname = "other"\nkey_env = "K2"\n'
    )
    server = load_config(f, {}).server
    assert server.event_names("sdk") is OPENAI_EVENTS  # the key's own setting wins
    assert server.event_names("other") is OPEN_RESPONSES_EVENTS  # else the server's
    assert server.event_names("key-1") is server.event_names("") is OPEN_RESPONSES_EVENTS
    env = load_config(None, {"CROSSFEED_EVENT_DIALECT": "open_responses"})
    assert env.server.event_names(None) is OPEN_RESPONSES_EVENTS
    assert env.origin("server", "event_dialect") == "$CROSSFEED_EVENT_DIALECT"


def test_a_bad_event_dialect_names_its_key_and_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"server.event_dialect \(from \$CROSSFEED_EVENT_DIALECT\): must be one of"):
        load_config(None, {"CROSSFEED_EVENT_DIALECT": "openresponses"})
    f = tmp_path / "c.toml"
    f.write_text('[[server.inbound_keys]]\nname = "a"\nkey_env = "K"\nevent_dialect = "open-responses"\n')
    with pytest.raises(ConfigError, match=r"server.inbound_keys.0.event_dialect \(in .*c.toml\): must be one of"):
        load_config(f, {})


def test_reasoning_effort_map_reaches_the_profile(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[[upstreams]]\nname = "a"\nreasoning_effort_map = { minimal = "low", xhigh = "omit" }\n')
    up = load_config(f, {}).upstreams[0]
    assert dict(up.profile.reasoning_effort_map) == {"minimal": "low", "xhigh": "omit"}
    f.write_text('[[upstreams]]\nname = "a"\napi = "responses"\nreasoning_effort_map = { minimal = "low" }\n')
    with pytest.raises(ConfigError, match="reasoning_effort_map only applies"):
        load_config(f, {})


def test_images_section(tmp_path: Path) -> None:
    assert load_config(None, {}).images.backend_url is None  # the default: no images backend
    f = tmp_path / "c.toml"
    f.write_text('[images]\nbackend_url = "http://127.0.0.1:8080/v1/"\nsizes = ["512x512", "1024x1024"]\n')
    images = load_config(f, {}).images
    assert images.endpoint == "http://127.0.0.1:8080/v1/images/generations" and images.size == "512x512"
    env = load_config(
        None, {"CROSSFEED_IMAGES__BACKEND_URL": "http://h/v1", "CROSSFEED_IMAGES__DEFAULT_SIZE": "1536x1024"}
    )
    assert env.images.size == "1536x1024" and env.origin("images", "backend_url") == "$CROSSFEED_IMAGES__BACKEND_URL"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[images]\nbackend_url = "localhost:8080"\n', r"images.backend_url \(in .*c.toml\): .*http:// or https://"),
        ('[images]\nsizes = ["big"]\n', r"images.sizes \(in .*c.toml\): .*WIDTHxHEIGHT .*'big'"),
        ('[images]\ndefault_size = "640x480"\n', r"images \(in .*c.toml\): .*default_size '640x480' is not one of"),
        ("[images]\nmax_calls = 0\n", r"images.max_calls \(in .*c.toml\)"),
        ('[images]\nbackend = "localai"\n', r"images.backend \(in .*c.toml\): unknown key"),
    ],
)
def test_a_bad_images_section_names_its_key_and_source(tmp_path: Path, text: str, fragment: str) -> None:
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        load_config(f, {})
    with pytest.raises(ConfigError, match=r"images.timeout_seconds \(from \$CROSSFEED_IMAGES__TIMEOUT_SECONDS\)"):
        load_config(None, {"CROSSFEED_IMAGES__TIMEOUT_SECONDS": "0"})
