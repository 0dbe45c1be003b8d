"""Chaos: the response store goes away under a steady mixed load on two real crossfeed
processes, and comes back.

- ``redis``: two replicas (``python -m crossfeed serve``) share a redis-server of the test's own; it
  is stopped for 30 s (SIGTERM; its append-only file keeps the data) and started again.
- ``sqlite``: ``serve --workers 2`` on one SQLite file in a small tmpfs mounted in a private mount
  namespace (``unshare --mount``, as root); the test fills the tmpfs (SQLite gets SQLITE_FULL)
  for 20 s through ``/proc/<pid>/root``, then frees it. Without root, unshare or mount, the test
  fails naming the reason (CI runs as root).

The load: four clients, each a loop of turns over fresh connections (streamed and not, ``store``
true and false, follow-ups by ``previous_response_id`` on either process), bounded in count and
time, every answer checked (streams by the strict validator). Counted per phase and asserted:
answers that never came (0), hangs (0), 5xx other than the documented 503 (0), 404s (0), 503
``store_unavailable`` (documented; follow-ups only), and the time from the store's return to full
recovery: every response made during the outage in the store and every process's ``/readyz``
back to ``ok``. Marked ``slow`` (``.ci/run`` runs them; about 80 s together).
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, Recorded
from tests.support.chat_replies import json_text, text_reply
from tests.support.full_disk import fill, namespace_problem
from tests.support.redis_server import RedisServer
from tests.support.serve_process import ServedProcess, serve_process
from tests.support.validators import validate_responses_sse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CLIENTS = 4
PAUSE = 0.05  # between one client's requests
HANG = 15.0  # an answer later than this is a hang (reads are bounded at 3 s, saves wait 1 s)
MAX_REQUESTS = 6000  # the whole load, at most
RECOVERY_LIMIT = 10.0  # seconds from the store's return to full recovery, at most
AFTER = 3.0  # seconds of load after full recovery: follow-ups all answered again
PAD = "The quick brown fox jumps over the lazy dog. " * 40  # ~1.8 KB per turn: every save writes pages


@dataclass
class Tally:
    phase: str = "before"
    counts: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    failures: list[str] = field(default_factory=list)
    made: list[tuple[str, str]] = field(default_factory=list)  # (response id, phase) of store: true answers
    said: dict[str, str] = field(default_factory=dict)  # one 503 message of each kind
    total: int = 0

    def add(self, what: str, detail: str = "") -> None:
        self.counts[self.phase][what] += 1
        if what in ("never", "hang", "5xx", "404", "unexpected") and len(self.failures) < 20:
            self.failures.append(f"{self.phase}: {what}: {detail}")

    def sum(self, what: str, phase: str | None = None) -> int:
        return sum(c[what] for p, c in self.counts.items() if phase in (None, p))

    def table(self) -> str:
        kinds = ["ok", "503", "never", "hang", "5xx", "404", "unexpected"]
        rows = [f"{'phase':<9}" + "".join(f"{k:>11}" for k in kinds)]
        for phase in ("before", "outage", "recovery", "after"):
            rows.append(f"{phase:<9}" + "".join(f"{self.counts[phase][k]:>11}" for k in kinds))
        return "\n".join(rows)


def reply(req: Recorded) -> Any:
    turns = sum(1 for m in req.body.get("messages", []) if m.get("role") == "user")
    return text_reply(f"turn {turns}") if req.body.get("stream") else json_text(f"turn {turns}")


async def one(session: aiohttp.ClientSession, url: str, body: dict[str, Any], tally: Tally) -> str | None:
    """One request, its outcome counted; the response id when it completed."""
    follow = "previous_response_id" in body
    try:
        async with asyncio.timeout(HANG):
            async with session.post(url + "/v1/responses", json=body) as r:
                raw = await r.read()
                status = r.status
    except TimeoutError:
        tally.add("hang", f"{url} {body.get('stream')=} {follow=}")
        return None
    except (aiohttp.ClientError, OSError) as exc:
        tally.add("never", f"{url}: {type(exc).__name__}: {exc}")
        return None
    if status == 200:
        try:
            if body["stream"]:
                events = validate_responses_sse(raw)
                final = events[-1]
                assert final["type"] == "response.completed", final["type"]
                response = final["response"]
            else:
                response = orjson.loads(raw)
                assert response["status"] == "completed", response
        except Exception as exc:  # a cut or broken answer: it never came whole
            tally.add("never", f"{url}: 200 but {type(exc).__name__}: {exc}: {raw[-300:]!r}")
            return None
        tally.add("ok")
        if body["store"]:
            tally.made.append((response["id"], tally.phase))
        return str(response["id"])
    error = orjson.loads(raw).get("error", {}) if raw.startswith(b"{") else {}
    detail = f"{status} {error.get('code')}: {error.get('message')}"
    if status == 503 and error.get("code") == "store_unavailable" and follow and "response store" in str(error):
        tally.add("503")
        message = str(error.get("message"))
        tally.said.setdefault(re.sub(r"resp_\w+|\d{4}-\d\d-\d\dT[\d:]+Z", "…", message), message)
    elif status == 404:
        tally.add("404", detail)
    elif status >= 500:
        tally.add("5xx", detail)
    else:
        tally.add("unexpected", detail)
    return None


async def client(n: int, urls: list[str], tally: Tally, stop: asyncio.Event) -> None:
    """Turns over fresh connections: fresh and follow-up, streamed and not, store true and false;
    a follow-up goes to the other replica every other time (with --workers, the kernel picks)."""
    previous: tuple[str, int] | None = None
    i = 0
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        while not stop.is_set() and tally.total < MAX_REQUESTS:
            i += 1
            tally.total += 1
            body: dict[str, Any] = {"model": "m", "input": f"client {n} turn {i}. {PAD}"}
            body["stream"] = (i + n) % 2 == 0
            body["store"] = i % 5 != 0
            target = (n + i) % len(urls)
            if previous is not None and i % 3 != 0:
                body["previous_response_id"] = previous[0]
                target = (previous[1] + (i // 3) % 2) % len(urls)  # the other one, then the same one
            rid = await one(session, urls[target], body, tally)
            if rid is not None and body["store"]:
                previous = (rid, target)
            elif rid is None:
                previous = None  # (a 503: start over, as a client would)
            await asyncio.sleep(PAUSE)


async def readyz(url: str) -> tuple[str, str]:
    """(the answering process's request-id prefix, its store state)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        async with s.get(url + "/readyz", timeout=aiohttp.ClientTimeout(total=5)) as r:
            return r.headers.get("X-Request-ID", "")[:16], (await r.json())["store"]


async def metrics(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
        text = await r.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(
            ("crossfeed_store_failures_total", "crossfeed_store_retries_total", "crossfeed_store_saves")
        ):
            name, value = line.rsplit(" ", 1)
            out[name] = out.get(name, 0.0) + float(value)
    return out


async def chaos(
    urls: list[str],
    outage: float,
    break_store: Callable[[], Any],
    heal_store: Callable[[], Any],
    in_store: Callable[[list[str]], Any],
    processes: int,
) -> tuple[Tally, float]:
    """Load before, during and after an outage; returns the tally and the recovery time."""
    tally, stop = Tally(), asyncio.Event()
    load = [asyncio.create_task(client(n, urls, tally, stop)) for n in range(CLIENTS)]
    try:
        await asyncio.sleep(4)
        tally.phase = "outage"
        await break_store()
        await asyncio.sleep(outage)
        tally.phase = "recovery"
        await heal_store()
        back = time.monotonic()
        # full recovery: every response made during the outage is in the store, and every process
        # says its store is ok (its retry queue written)
        outage_ids = [rid for rid, phase in tally.made if phase == "outage"]
        ok_from: set[str] = set()
        while time.monotonic() - back < RECOVERY_LIMIT + 5:
            for url in urls:
                for _ in range(4 if len(urls) == 1 else 1):  # (--workers: fresh connections reach both)
                    who, state = await readyz(url)
                    if state == "ok":
                        ok_from.add(who)
            if len(ok_from) >= processes and await in_store(outage_ids):
                break
            await asyncio.sleep(0.1)
        recovered = time.monotonic() - back
        tally.phase = "after"
        await asyncio.sleep(AFTER)
    finally:
        stop.set()
        await asyncio.gather(*load)
    assert outage_ids, "no response was made during the outage"
    assert await in_store(outage_ids), "responses made during the outage never reached the store"
    return tally, recovered


def report(name: str, tally: Tally, recovered: float, extra: dict[str, Any]) -> None:
    print(f"\n== {name}: {tally.total} requests; full recovery {recovered:.2f}s after the store came back")
    print(tally.table())
    for key, value in extra.items():
        print(f"{key}: {value}")
    for message in tally.said.values():
        print("503:", message)
    for line in tally.failures:
        print("FAILURE", line)


def check(tally: Tally, recovered: float) -> None:
    for what in ("never", "hang", "5xx", "404", "unexpected"):
        assert tally.sum(what) == 0, (what, tally.failures)
    assert tally.sum("ok", "outage") > 20, "the load did not run during the outage"
    assert tally.sum("503", "after") == 0, "follow-ups still refused after full recovery"
    assert tally.sum("ok", "after") > 10
    assert recovered < RECOVERY_LIMIT


def config(tmp: Path, upstream: FakeUpstream, store: str) -> Path:
    path = tmp / "c.toml"
    path.write_text(
        f'[server]\ndrain_seconds = 3\n\n[[upstreams]]\nname = "fake"\nbase_url = "{upstream.base_url}"\n'
        f"default = true\n\n[store]\n{store}\noperation_timeout_seconds = 3.0\n"
    )
    return path


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}, **extra}


SERVE = [sys.executable, "-m", "crossfeed", "serve", "--port", "0", "--log-format", "json"]


@pytest.fixture
async def upstream_for_load() -> AsyncIterator[FakeUpstream]:
    up = FakeUpstream()
    up.default = reply
    await up.start()
    yield up
    await up.close()


@pytest.mark.redis
async def test_redis_stopped_30s_under_load_on_two_replicas(upstream_for_load: FakeUpstream, tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    prefix = f"cf-chaos-{os.getpid()}:"
    cfg = config(
        tmp_path, upstream_for_load, f'backend = "redis"\nkey_prefix = "{prefix}"\nredis_timeout_seconds = 1.0'
    )
    replicas: list[ServedProcess] = []
    try:
        for n in range(2):
            env = clean_env(CROSSFEED_REDIS_URL=redis.url)
            replicas.append(await serve_process([*SERVE, "--config", str(cfg)], env, tmp_path / f"replica{n}.log"))
        urls = [r.url for r in replicas]

        async def down() -> None:
            redis.stop()

        async def up() -> None:
            redis.start()

        async def in_store(ids: list[str]) -> bool:
            if not redis.answers():
                return False
            return all(redis.command("EXISTS", f"{prefix}resp:{rid}").startswith(b":1") for rid in ids)

        tally, recovered = await chaos(urls, 30.0, down, up, in_store, processes=2)
        # every response made during the outage is served by both replicas
        outage_ids = [rid for rid, phase in tally.made if phase == "outage"]
        async with aiohttp.ClientSession() as s:
            for url in urls:
                for rid in outage_ids:
                    async with s.get(f"{url}/v1/responses/{rid}") as r:
                        assert r.status == 200, (url, rid, await r.text())
        figures = {url: await metrics(url) for url in urls}
    finally:
        codes = [await r.stop() for r in replicas]
        redis.stop()
    report("redis stopped 30 s, two replicas", tally, recovered, {"outage responses": len(outage_ids), **figures})
    check(tally, recovered)
    assert codes == [0, 0]
    assert sum(tally.counts["outage"].values()) > 0 and tally.sum("503", "outage") > 0


COUNT_MISSING = """
import json, sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=5)
found = {row[0] for row in conn.execute("SELECT id FROM responses")}
print(len(set(json.load(sys.stdin)) - found))
"""


async def test_sqlite_disk_full_20s_under_load_on_two_workers(upstream_for_load: FakeUpstream, tmp_path: Path) -> None:
    problem = namespace_problem()
    if problem is not None:
        pytest.fail(f"the disk-full chaos test cannot run here: {problem}")
    data = tmp_path / "data"
    data.mkdir()
    cfg = config(tmp_path, upstream_for_load, f'backend = "sqlite"\ndata_dir = "{data}"')
    mount = 'mount -t tmpfs -o size=16m,mode=0700 tmpfs "$0" && exec "$@"'
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(data)]
    served = await serve_process(
        [*cmd, *SERVE, "--config", str(cfg), "--workers", "2"], clean_env(), tmp_path / "serve.log"
    )
    inside = Path(f"/proc/{served.proc.pid}/root") / data.relative_to("/")  # the tmpfs, seen from its namespace
    filler = inside / "fill"
    filled = 0
    try:
        assert not (data / "responses.sqlite3").exists(), "the store is not on the private tmpfs"
        assert (inside / "responses.sqlite3").exists()

        async def full() -> None:
            nonlocal filled
            filled = fill(filler)

        async def freed() -> None:
            filler.unlink()

        async def in_store(ids: list[str]) -> bool:
            # read in the namespace (SQLite resolves /proc/<pid>/root to this namespace's root)
            proc = await asyncio.create_subprocess_exec(
                "nsenter", "--target", str(served.proc.pid), "--mount", "--", sys.executable, "-c", COUNT_MISSING,
                str(data / "responses.sqlite3"),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(proc.communicate(orjson.dumps(ids)), 30)
            return out.strip() == b"0"

        tally, recovered = await chaos([served.url], 20.0, full, freed, in_store, processes=2)
        figures = await metrics(served.url)
        failed_saves = served.log.read_text().count('"store.failed"')
    finally:
        if filler.exists():
            filler.unlink()
        code = await served.stop()
    outage_ids = [rid for rid, phase in tally.made if phase == "outage"]
    report(
        "sqlite disk full 20 s, two workers",
        tally,
        recovered,
        {"filled bytes": filled, "outage responses": len(outage_ids), "store.failed lines": failed_saves, **figures},
    )
    check(tally, recovered)
    assert code == 0
    assert failed_saves > 0 and figures.get('crossfeed_store_retries_total{outcome="saved"}', 0) > 0, figures
