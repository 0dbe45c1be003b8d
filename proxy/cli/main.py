"""Command line (``crossfeed ...``, also ``python -m crossfeed ...``).

  crossfeed serve [--config FILE] [--host H] [--port P] [--upstream URL] [--upstream-api chat|responses]
                  [--upstream-api-key-env NAME] [--model-map JSON] [--log-level L] [--log-format F]
                  [--record DIR] [--workers N|auto]
  crossfeed check-config FILE          validate a config file, print the resolved routing table
  crossfeed demo [--no-sdk]            a scripted backend + crossfeed + the OpenAI SDK, all on loopback
  crossfeed translate --from chat --to responses [FILE] [--request FILE] [--jsonl]
                                       translate a captured SSE stream offline (and the reverse)

Exit codes: 0 success, 1 runtime failure (cannot listen, demo failed), 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.runtime.allocator import tune_allocator
from crossfeed.proxy.runtime.collector import tune_collector
from crossfeed.proxy.runtime.config import Config, load_config
from crossfeed.proxy.runtime.logs import FLUSH_BYTES, configure_logging, flush_logs, log
from crossfeed.proxy.state.store.base import StoreError

CONFIG_ENV = "CROSSFEED_CONFIG"  # default for --config (the container mounts its file there)


_EXAMPLES = {
    "crossfeed": "examples:\n"
    "  crossfeed serve --upstream http://127.0.0.1:8000/v1      # in front of a chat backend\n"
    "  crossfeed check-config crossfeed.toml                     # what serve would do with it\n"
    "  crossfeed demo                                            # see it work, offline\n"
    "  crossfeed COMMAND --help                                  # each command's options",
    "serve": "examples:\n"
    "  crossfeed serve --upstream http://127.0.0.1:8000/v1\n"
    "  crossfeed serve --config crossfeed.toml --port 9000\n"
    "  crossfeed serve --config crossfeed.toml --workers auto        # a worker process per core\n"
    "  BACKEND_KEY=sk-... crossfeed serve --upstream https://api.deepseek.com/v1 "
    "--upstream-api-key-env BACKEND_KEY\n"
    "  CROSSFEED_WEB_SEARCH__BACKEND=searxng CROSSFEED_WEB_SEARCH__URL=http://127.0.0.1:8888 crossfeed serve",
    "check-config": "examples:\n"
    "  crossfeed check-config crossfeed.toml\n"
    "  CROSSFEED_PORT=9000 crossfeed check-config crossfeed.toml    # with the environment applied",
    "demo": "examples:\n  crossfeed demo\n  crossfeed demo --no-sdk --delay 0.2",
    "translate": "examples:\n"
    "  crossfeed translate --from chat --to responses captured-chat.sse\n"
    "  curl -sN ... | crossfeed translate --from responses --to chat --jsonl\n"
    "  crossfeed translate --from chat --to responses --request body.json stream.sse",
}

Subcommands = argparse._SubParsersAction  # what add_subparsers returns


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crossfeed",
        description="Streaming translation proxy between the OpenAI Responses API and Chat Completions API.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EXAMPLES["crossfeed"],
    )
    parser.add_argument("--version", action="version", version=f"crossfeed {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    _add_check_config(sub)
    _add_demo(sub)
    _add_translate(sub)
    return parser


def _add_serve(sub: Subcommands) -> None:
    """``crossfeed serve``: the proxy, its flags over the config file, and the hidden ones of a worker."""
    serve = sub.add_parser(
        "serve", help="run the proxy", epilog=_EXAMPLES["serve"], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    serve.add_argument(
        "--config", type=Path, help=f"TOML config file (see config.example.toml; default: ${CONFIG_ENV} when set)"
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8080; 0 picks a free port)")
    serve.add_argument("--upstream", help="backend base URL including /v1 (default http://127.0.0.1:8000/v1)")
    serve.add_argument("--upstream-api", choices=["chat", "responses"], help="the API the backend speaks")
    serve.add_argument(
        "--upstream-api-key-env",
        metavar="NAME",
        help="environment variable holding the backend's API key (default: pass the client's key)",
    )
    serve.add_argument(
        "--model-map",
        metavar="JSON",
        help="rename the model names clients send, for the default upstream: a JSON object, e.g. "
        '\'{"gpt-5.5": "qwen3-coder"}\' (Codex asks for OpenAI model names; also $CROSSFEED_MODEL_MAP)',
    )
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--log-format", choices=["auto", "json", "console"])
    serve.add_argument(
        "--record",
        metavar="DIR",
        help="write every streamed turn (the backend's raw stream, the request, the events sent) to DIR "
        "for `crossfeed translate` (a debugging switch, not for production; also $CROSSFEED_RECORD_DIR)",
    )
    serve.add_argument(
        "--workers",
        metavar="N|auto",
        help="worker processes serving the port (default 1; auto: one per core; needs the sqlite or redis store)",
    )
    # Set by the supervisor of --workers on the processes it starts (proxy/cli/workers.py).
    for hidden in ("--worker-index", "--ready-fd", "--parent-fd", "--listen-fd"):
        serve.add_argument(hidden, type=int, help=argparse.SUPPRESS)


def _add_check_config(sub: Subcommands) -> None:
    """``crossfeed check-config FILE``."""
    check = sub.add_parser(
        "check-config",
        help="validate a config file and print the resolved routing table",
        description="Load FILE the way `serve --config FILE` does (CROSSFEED_* environment "
        "variables applied), report the first problems by key path (exit 2), or print "
        "the resolved routing table: exit 0 when `serve` would start with it here, 1 when "
        "this environment lacks what the file names (inbound keys, a Redis URL). Secrets "
        "are shown only by variable name.",
        epilog=_EXAMPLES["check-config"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("file", type=Path, metavar="FILE")


def _add_demo(sub: Subcommands) -> None:
    """``crossfeed demo``."""
    demo = sub.add_parser(
        "demo",
        help="see crossfeed work: a scripted chat backend, crossfeed in front of it, "
        "and a streaming request from the OpenAI SDK, all on loopback",
        description="Start a built-in scripted Chat Completions backend and crossfeed in "
        "front of it on free loopback ports, send streaming Responses requests with the "
        "OpenAI SDK (aiohttp when the SDK is not installed), and print the translated "
        "events as they arrive. Needs no network and no config.",
        epilog=_EXAMPLES["demo"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--no-sdk", action="store_true", help="use a plain aiohttp client instead of the OpenAI SDK")
    demo.add_argument(
        "--delay", type=float, default=0.02, metavar="SECONDS", help="pause between the backend's chunks (default 0.02)"
    )


def _add_translate(sub: Subcommands) -> None:
    """``crossfeed translate``: a captured stream, translated offline."""
    tr = sub.add_parser(
        "translate",
        help="translate a captured SSE stream offline",
        description="Read a captured SSE stream (a backend's raw response body) from FILE or "
        "stdin and translate it with the same code the server runs. Prints SSE frames "
        "(default) or one JSON event per line (--jsonl) on stdout, a one-line summary on "
        "stderr. A stream that translates into a failure is printed too (exit 0). A stream "
        "of the other API than --from says is pointed out.",
        epilog=_EXAMPLES["translate"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tr.add_argument(
        "--from",
        dest="source",
        choices=["chat", "responses"],
        help="the API of the captured stream (required without --case)",
    )
    tr.add_argument(
        "--to", dest="target", choices=["chat", "responses"], help="the API to translate to (required without --case)"
    )
    tr.add_argument(
        "--case",
        type=Path,
        metavar="FILE",
        help="a test case saved from the inspector: its stream, request and options (in place of FILE and the flags)",
    )
    tr.add_argument(
        "--check",
        action="store_true",
        help="with --case: compare the replay with the case's recorded events (ids and timestamps aside); exit 1 if they differ",
    )
    tr.add_argument("file", nargs="?", type=Path, metavar="FILE", help="captured stream (default: stdin)")
    tr.add_argument(
        "--request",
        type=Path,
        metavar="FILE",
        help="the client's request body (JSON): echoed on the Response, tool context, "
        "stream_options.include_usage for chat output",
    )
    tr.add_argument("--jsonl", action="store_true", help="print one JSON event per line instead of SSE frames")
    tr.add_argument(
        "--reasoning-field",
        default="reasoning_content",
        metavar="NAME",
        help="chat output: the delta field that carries reasoning (default reasoning_content)",
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("crossfeed")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    """The command line; output cut short by a closed pipe (``crossfeed check-config ... | head``)
    ends quietly, as other command-line tools do."""
    try:
        return _main(argv)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not fail again
        return 0


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args, argv)
    if args.command == "check-config":
        from crossfeed.proxy.cli.check_config import check_config

        return check_config(args.file, os.environ)
    if args.command == "demo":
        from crossfeed.proxy.cli.demo import main as demo_main

        return demo_main(use_sdk=not args.no_sdk, delay=args.delay)
    if args.command == "translate":
        if args.source == args.target and args.source is not None:
            parser.error("translate: --from and --to must differ (chat -> responses or responses -> chat)")
        from crossfeed.proxy.cli.translate import run as translate_run

        return translate_run(args)
    return 2


# -- serve ------------------------------------------------------------------------------------


def config_from_args(args: argparse.Namespace) -> Config:
    overrides = {
        "server.host": args.host,
        "server.port": args.port,
        "upstream.base_url": args.upstream,
        "upstream.api": args.upstream_api,
        "upstream.api_key_env": args.upstream_api_key_env,
        "upstream.model_map": getattr(args, "model_map", None),
        "logging.level": getattr(args, "log_level", None),
        "logging.format": getattr(args, "log_format", None),
        "logging.record_dir": getattr(args, "record", None),
        "server.workers": getattr(args, "workers", None),
    }
    path = args.config
    if path is None and os.environ.get(CONFIG_ENV):
        path = Path(os.environ[CONFIG_ENV])
    return load_config(path, os.environ, overrides, labels=FLAG_NAMES)


# The flag behind each override, for the messages that blame a bad value on its source.
FLAG_NAMES = {
    "server.host": "--host",
    "server.port": "--port",
    "upstream.base_url": "--upstream",
    "upstream.api": "--upstream-api",
    "upstream.api_key_env": "--upstream-api-key-env",
    "upstream.model_map": "--model-map",
    "logging.level": "--log-level",
    "logging.format": "--log-format",
    "logging.record_dir": "--record",
    "server.workers": "--workers",
}


def serve(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    # Until the event loop (or the supervisor of --workers) takes the signals over: a stop asked
    # for while starting is kept, and the server stops as soon as it listens (an exit 0, not a
    # death by the signal).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop_early)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"crossfeed: {exc}", file=sys.stderr)
        return 2
    worker = WorkerRole.from_args(args)
    if worker is None:
        from crossfeed.proxy.cli.install_check import warning

        clash = warning()
        if clash:
            print(f"crossfeed: warning: {clash}", file=sys.stderr)
    if worker is None and config.server.worker_count > 1:
        return _supervise(config, argv if argv is not None else sys.argv[1:], stopped=bool(_STOP_ASKED))
    import select

    configure_logging(
        config.logging.level,
        config.logging.format,
        fields={"worker": worker.index} if worker else None,
        batch_bytes=select.PIPE_BUF if worker else FLUSH_BYTES,
    )
    reserve_descriptors()  # before the event loop starts any thread
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(_serve(config, worker))
    except KeyboardInterrupt:
        pass
    except (ConfigError, StoreError) as exc:  # found at start-up: before or while opening the listener
        print(f"crossfeed: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = exc.filename or f"{config.server.host}:{config.server.port}"
        print(f"crossfeed: cannot listen on {where}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


_STOP_ASKED: list[int] = []


def _stop_early(signum: int, frame: Any) -> None:
    _STOP_ASKED.append(signum)


@dataclass(frozen=True)
class WorkerRole:
    """What a worker of ``serve --workers`` is told by its supervisor (proxy/cli/workers.py)."""

    index: int
    ready_fd: int | None
    parent_fd: int | None
    listen_fd: int | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WorkerRole | None:
        index = getattr(args, "worker_index", None)
        if index is None:
            return None
        return cls(index, args.ready_fd, args.parent_fd, args.listen_fd)


def _supervise(config: Config, argv: list[str], *, stopped: bool) -> int:
    """The process the operator started, with several workers: checks the environment once (so a
    missing key is one message, not one per worker), then runs the workers."""
    from crossfeed.proxy.cli.workers import supervise
    from crossfeed.proxy.runtime.guard import inbound_keys, metrics_key, upstream_keys

    configure_logging(config.logging.level, config.logging.format, fields={"worker": "supervisor"})
    try:
        inbound_keys(config, os.environ)
        upstream_keys(config, os.environ)
        metrics_key(config, os.environ)
    except ConfigError as exc:
        print(f"crossfeed: {exc}", file=sys.stderr)
        return 2
    try:
        return supervise(config, argv, stopped=stopped or bool(_STOP_ASKED))
    except KeyboardInterrupt:
        return 0
    finally:
        flush_logs()


# The most descriptors reserve_descriptors() sizes the table for: 512 KiB of kernel memory.
MAX_RESERVED_DESCRIPTORS = 65_536


def reserve_descriptors(limit: int = MAX_RESERVED_DESCRIPTORS) -> int:
    """Raise the soft limit on open files to the hard limit (at most ``limit``) and grow the
    process's descriptor table to it once, now. Returns the table's size (0 if it failed).

    Every stream holds two sockets. Linux grows a process's descriptor table by doubling
    (64, 256, 512, 1,024... slots), and in a process with threads (the event loop's resolver
    pool) each growth waits for an RCU grace period: the whole event loop stopped for milliseconds
    each time the open connections crossed 128, 256, 512... streams, so every token of every
    open stream waited too (a loop-lag monitor at 256 paced streams saw a stall at each
    crossing, with no CPU used, and none once the table is grown at start-up: docs/DESIGN.md). Grown here,
    before any thread exists, the table never grows again. The soft limit is raised as systemd
    asks of services that need more than 1,024 descriptors; a proxy holding two per stream does.
    """
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(limit, hard) if hard != resource.RLIM_INFINITY else limit
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        size = min(limit, soft) if soft != resource.RLIM_INFINITY else limit
        try:
            os.fstat(size - 1)
            return size  # that descriptor is open (inherited): the table is that large already
        except OSError:
            pass
        fd = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(fd, size - 1)  # the table now has `size` slots; they stay when the fd closes
            os.close(size - 1)
        finally:
            os.close(fd)
        return size
    except (ImportError, OSError, ValueError):  # not Linux/Unix, or limits we may not change
        return 0


# How soon a thread waiting for the GIL gets it from the busy event loop (Python's default: 5 ms).
SWITCH_INTERVAL = 0.0005


def _tune_threads() -> None:
    """The SQLite store's thread takes the GIL back after each statement; with the event loop busy
    it waited a whole default interval each time, and a stream's terminal event waits for its
    save: on a saturated process the shorter interval takes about half of what saving before
    the terminal event added, and a still shorter one nothing more (docs/benchmark.md,
    bench/store_latency.py). With one thread runnable nothing changes: no switch is forced."""
    sys.setswitchinterval(SWITCH_INTERVAL)


async def _serve(config: Config, worker: WorkerRole | None = None) -> None:
    # Imported here: check-config and translate do not need the server.
    from aiohttp import web

    from crossfeed.proxy.app import create_app
    from crossfeed.proxy.http.server import make_runner

    # Signals first: a SIGTERM that arrives right after the listening line must still stop cleanly.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if _STOP_ASKED:
        stop.set()
    app = create_app(config, environ=os.environ)
    runner = make_runner(app, config)
    try:
        await runner.setup()  # opens the upstream session, then the store: may fail (StoreError)
    except BaseException:
        await runner.cleanup()  # closes whatever had been opened
        raise
    site = _site(web, runner, config, worker)
    metrics_runner = None
    try:
        await site.start()
        metrics_runner = await _metrics_listener(web, app, config, worker)
    except BaseException:
        await runner.cleanup()
        raise
    sockets = site._server.sockets if site._server else []
    port = sockets[0].getsockname()[1] if sockets else config.server.port
    log.debug("server.collector", thresholds=tune_collector(config.server.gc_young_threshold))
    _tune_threads()
    log.debug("server.allocator", setting=tune_allocator(config.server.allocator_retain_mb))
    if worker is None:
        from crossfeed.proxy.cli.startup import announce

        announce(config, port, os.environ)
    else:
        log.info("server.worker.started", pid=os.getpid(), port=port)
        if worker.parent_fd is not None:  # readable (at its end) once the supervisor is gone
            fd = worker.parent_fd

            def orphaned() -> None:
                loop.remove_reader(fd)
                log.warning("server.supervisor.gone")
                stop.set()

            loop.add_reader(fd, orphaned)
        if worker.ready_fd is not None:
            with contextlib.suppress(OSError):  # a supervisor gone meanwhile: the parent pipe says so
                os.write(worker.ready_fd, b"1")
            os.close(worker.ready_fd)
    await stop.wait()
    loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C during the drain quits at once
    if worker is not None:
        # One stop is enough: under systemd or Kubernetes every process of the group gets the
        # SIGTERM the supervisor then passes on too, and the second must not kill a finished drain.
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log.info("server.stopping")
    await runner.cleanup()
    if metrics_runner is not None:
        await metrics_runner.cleanup()
    log.info("server.stopped")
    flush_logs()


async def _metrics_listener(web: Any, app: Any, config: Config, worker: WorkerRole | None) -> Any:
    """``[server] metrics_port``: GET /metrics on a listener of its own (every worker binds it with
    SO_REUSEPORT, and any of them answers with the sum over all; where workers share one accepting
    socket instead, the first worker serves it). None when /metrics is on the main port."""
    s = config.server
    if s.metrics_port is None or (worker is not None and worker.listen_fd is not None and worker.index != 0):
        return None
    from crossfeed.proxy.runtime.observability import metrics_app

    runner = web.AppRunner(metrics_app(app), access_log=None)
    await runner.setup()
    host = s.metrics_host or s.host
    site = web.TCPSite(runner, host, s.metrics_port, reuse_port=worker is not None or None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(exc.errno, exc.strerror, f"{host}:{s.metrics_port} (server.metrics_port)") from None
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def _site(web: Any, runner: Any, config: Config, worker: WorkerRole | None) -> Any:
    """A single process listens on its own; a worker binds the supervisor's port with
    SO_REUSEPORT, or accepts on the socket the supervisor listens on (``--listen-fd``)."""
    import socket

    if worker is not None and worker.listen_fd is not None:
        return web.SockSite(runner, socket.socket(fileno=worker.listen_fd))
    return web.TCPSite(runner, config.server.host, config.server.port, reuse_port=worker is not None or None)
