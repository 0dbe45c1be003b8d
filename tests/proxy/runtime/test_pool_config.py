"""A pool's keys on an ``[[upstreams]]`` entry (proxy/runtime/config.py): ``base_urls`` instead of
``base_url``, each URL checked; the failover keys only on a pool; ``fallback`` names another
upstream of the same API; errors name the key. check-config shows each replica without its
credentials."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from crossfeed.proxy.cli.check_config import check_config
from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.runtime.config import Config, load_config
from crossfeed.proxy.runtime.pool_config import CONTINUATION_KEYS
from tests.support.paths import ROOT


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_config(path, {})


def test_base_urls_make_a_pool_whose_base_url_is_its_first_replica(tmp_path: Path) -> None:
    config = load(tmp_path, '[[upstreams]]\nname = "gpu"\nbase_urls = ["http://a:8000/v1/", "http://b:8000/v1"]\n')
    up = config.upstreams[0]
    assert up.pooled and up.base_url == "http://a:8000/v1"
    assert up.replica_urls == ("http://a:8000/v1", "http://b:8000/v1")
    assert not config.base_url_defaulted(0)
    single = load(tmp_path, '[[upstreams]]\nname = "one"\nbase_url = "http://a:8000/v1"\n').upstreams[0]
    assert not single.pooled and single.replica_urls == ("http://a:8000/v1",)


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            'base_url = "http://x/v1"\nbase_urls = ["http://a/v1", "http://b/v1"]',
            ["upstreams.0", "base_url and base_urls are exclusive"],
        ),
        ('base_urls = ["http://a/v1", "ftp://b/v1"]', ["upstreams.0.base_urls", "ftp://b/v1"]),
        ('base_urls = ["http://a/v1", "http://a/v1/"]', ["upstreams.0.base_urls", "listed twice"]),
        ("cooldown_seconds = 5", ["upstreams.0", "cooldown_seconds only applies to a pool"]),
        ('base_urls = ["http://a/v1", "http://b/v1"]\nretries = -1', ["upstreams.0.retries"]),
        ('base_urls = ["http://a/v1", "http://b/v1"]\nfallback = "gpu"', ["upstreams.0.fallback", "another upstream"]),
        ('base_urls = ["http://a/v1", "http://b/v1"]\nfallback = "nowhere"', ["upstreams.0.fallback", "'nowhere'"]),
        ("continue_on_failure = true", ["upstreams.0", "continue_on_failure only applies to a pool"]),
        (
            'base_urls = ["http://a/v1", "http://b/v1"]\napi = "responses"\ncontinue_on_failure = true',
            ["upstreams.0", "continue_on_failure needs a pool of chat replicas"],
        ),
        ('base_urls = ["http://a/v1", "http://b/v1"]\nprefill = "echo"', ["upstreams.0.prefill"]),
        (
            'base_urls = ["http://a/v1", "http://b/v1"]\nreasoning_prefill = "content"',
            ["upstreams.0.reasoning_prefill", "think_tag", "reasoning_field"],
        ),
        ('reasoning_prefill = "reasoning_field"', ["upstreams.0", "reasoning_prefill only applies to a pool"]),
        ('base_urls = ["http://a/v1", "http://b/v1"]\nmax_continuations = 3', ["upstreams.0.max_continuations"]),
    ],
)
def test_bad_pool_keys_are_named(tmp_path: Path, text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f'[[upstreams]]\nname = "gpu"\n{text}\n')
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_a_fallback_must_speak_the_same_api(tmp_path: Path) -> None:
    text = (
        '[[upstreams]]\nname = "gpu"\nbase_urls = ["http://a/v1", "http://b/v1"]\nfallback = "cloud"\n'
        '[[upstreams]]\nname = "cloud"\napi = "responses"\nbase_url = "http://c/v1"\n'
    )
    with pytest.raises(ConfigError, match="a fallback must speak the same API"):
        load(tmp_path, text)


def test_check_config_shows_each_replica_without_credentials(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[[upstreams]]\nname = "gpu"\nbase_urls = ["http://u:SECRET-PW@a:8000/v1", "http://b:8000/v1"]\n'
        'fallback = "cpu"\nmax_concurrent_streams = 4\n'
        '[[upstreams]]\nname = "cpu"\nbase_url = "http://c:8080/v1"\n'
    )
    out = io.StringIO()
    assert check_config(path, {}, out) == 0
    text = out.getvalue()
    assert "SECRET-PW" not in text
    assert "replica   gpu/0 http://a:8000/v1" in text and "replica   gpu/1 http://b:8000/v1" in text
    assert "1 other replica tried" in text and "fallback upstream 'cpu'" in text
    assert "max streams 4 on each replica" in text
    assert "has no base_url" not in text
    assert "continue " not in text
    text = _checked(path, 'prefill = "continue_final_message"')
    assert "prefill: continue_final_message, reasoning prefill: think_tag" in text
    assert (
        "continue  an answer whose replica dies mid-text or mid-reasoning goes on on another replica "
        "(a whole answer is asked again), once a turn; " in text
    )
    text = _checked(path, 'reasoning_prefill = "reasoning_field"')
    assert "prefill: trailing_assistant, reasoning prefill: reasoning_field" in text


def _checked(path: Path, continuation: str) -> str:
    """What check-config says of a two-replica pool that continues answers (``continuation``: one key more)."""
    path.write_text(
        '[[upstreams]]\nname = "gpu"\nbase_urls = ["http://a:8000/v1", "http://b:8000/v1"]\n'
        f"continue_on_failure = true\n{continuation}\n"
    )
    out = io.StringIO()
    assert check_config(path, {}, out) == 0
    return out.getvalue()


def test_the_documented_pools_load(tmp_path: Path) -> None:
    """README "Pools" recipes and config.example.toml's commented pool, uncommented, are valid."""
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```toml\n")[1:]]
    recipe = next(b for b in blocks if 'name = "vllm"' in b)
    config = load(tmp_path, recipe)
    assert [(u.name, len(u.replica_urls), u.fallback) for u in config.upstreams] == [
        ("vllm", 3, None),
        ("llama", 2, "vllm"),
    ]
    example = (ROOT / "config.example.toml").read_text()
    start = example.index('# [[upstreams]]\n# name = "gpu"')
    lines = [line[2:] for line in example[start:].splitlines() if line.startswith("# ")]
    pool_lines = lines[: next(i for i, line in enumerate(lines) if line.startswith("fallback"))]
    config = load(tmp_path, "\n".join(pool_lines) + "\n")
    assert config.upstreams[0].pooled and config.upstreams[0].retries == 2
    keys = [line.split(" ", 1)[0] for line in lines]
    continuation = lines[keys.index("continue_on_failure") : keys.index("max_continuations") + 1]
    assert tuple(line.split(" ", 1)[0] for line in continuation) == CONTINUATION_KEYS  # each documented
    up = load(tmp_path, "\n".join(pool_lines + continuation) + "\n").upstreams[0]
    assert up.prefill == "trailing_assistant" and up.reasoning_prefill == "think_tag"


def test_continuation_keys_on_a_pool(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        '[[upstreams]]\nname = "gpu"\nbase_urls = ["http://a/v1", "http://b/v1"]\ncontinue_on_failure = true\n'
        'prefill = "continue_final_message"\nreasoning_prefill = "reasoning_field"\nmax_continuations = 2\n',
    )
    up = config.upstreams[0]
    assert up.continue_on_failure and up.prefill == "continue_final_message" and up.max_continuations == 2
    assert up.reasoning_prefill == "reasoning_field"
    plain = load(tmp_path, '[[upstreams]]\nname = "gpu"\nbase_urls = ["http://a/v1", "http://b/v1"]\n').upstreams[0]
    assert not plain.continue_on_failure and plain.prefill == "trailing_assistant" and plain.max_continuations == 1
    assert plain.reasoning_prefill == "think_tag"
