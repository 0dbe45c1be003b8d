"""bench/idle.py: the idle CPUs' polling set for a run and always put back (on a file that
stands in for the haltpoll driver's parameter, never the machine's own)."""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _idle() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_idle", REPO / "bench" / "idle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = _idle()
    poll = tmp_path / "guest_halt_poll_ns"
    poll.write_text("0\n")
    driver = tmp_path / "current_driver"
    driver.write_text("haltpoll\n")
    monkeypatch.setattr(module, "POLL_NS", poll)
    monkeypatch.setattr(module, "DRIVER", driver)
    return module


def test_polling_is_set_for_the_block_and_put_back(idle: ModuleType) -> None:
    with idle.polling(200_000):
        assert idle.POLL_NS.read_text() == "200000"
        assert idle.idle_state() == {"cpuidle_driver": "haltpoll", "halt_poll_ns": 200_000}
    assert idle.POLL_NS.read_text() == "0"
    assert idle.idle_state() == {"cpuidle_driver": "haltpoll", "halt_poll_ns": 0}


def test_polling_is_put_back_when_the_run_fails_and_sigterm_ends_it(idle: ModuleType) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError), idle.polling(1000):
        raise RuntimeError("the run broke")
    assert idle.POLL_NS.read_text() == "0"
    with pytest.raises(SystemExit) as ended, idle.polling(1000):
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)  # what a SIGTERM runs while the block is open
    assert ended.value.code == 143
    assert idle.POLL_NS.read_text() == "0"
    assert signal.getsignal(signal.SIGTERM) == before


def test_none_leaves_the_machine_alone(idle: ModuleType) -> None:
    idle.POLL_NS.unlink()
    with idle.polling(None):
        pass
    assert not idle.POLL_NS.exists()


class _ReadOnly:
    """The parameter as a user who is not root sees it: readable, not writable."""

    def read_text(self) -> str:
        return "0\n"

    def write_text(self, text: str) -> int:
        raise PermissionError(13, "Permission denied")


def test_no_driver_or_no_right_is_a_clear_error(idle: ModuleType) -> None:
    idle.POLL_NS.unlink()
    with pytest.raises(idle.IdleError, match="haltpoll cpuidle driver"), idle.polling(1000):
        pass
    idle.POLL_NS = _ReadOnly()
    with pytest.raises(idle.IdleError, match="it needs root"), idle.polling(1000):
        pass


def test_the_header_line_says_how_idle_cpus_wait(idle: ModuleType) -> None:
    assert idle.describe({"cpuidle_driver": "haltpoll", "halt_poll_ns": 0}).endswith(
        "halt at once (a wake-up from idle is an interrupt)"
    )
    assert idle.describe({"cpuidle_driver": "haltpoll", "halt_poll_ns": 200000}).endswith("poll 200000 ns, then halt")
    assert (
        idle.describe({"cpuidle_driver": "intel_idle", "halt_poll_ns": None}) == "idle CPUs: cpuidle driver intel_idle"
    )
    assert idle.describe({"cpuidle_driver": None, "halt_poll_ns": None}) == "idle CPUs: cpuidle driver unknown"
