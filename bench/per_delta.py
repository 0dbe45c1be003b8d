"""Instructions per upstream text delta, in process: the forward and the reverse stream machines
side by side (issue 33: reverse per delta at most forward's), counted by callgrind.

    .venv/bin/python bench/per_delta.py                      # ~2 minutes on 2 cores
    .venv/bin/python bench/per_delta.py --tree /tmp/cf-base  # another build (an exported tree)
    .venv/bin/python bench/per_delta.py --layers machine --json out.json
    .venv/bin/python bench/per_delta.py --variant tool       # a call's argument fragments instead of text
    .venv/bin/python bench/per_delta.py --variant reasoning --layers reads4,reads8  # reads of 4 and 8 frames

The bench's fake upstream (bench/upstream.py) makes one 20-delta and one 120-delta text stream of
each API, as bench/run.py's cells do (24 and 28 frames around the deltas). A child process under
``valgrind --tool=callgrind`` translates each stream three times to warm up, then ``--loops``
times inside a ``functools.reduce``: callgrind collects only inside that call
(``--toggle-collect``) and dumps when it returns (``--dump-after``), so the interpreter's start,
the imports and the streams' making are not counted. The difference of the two streams' counts
over the 100 deltas between them and the loops is the figure (a stream's fixed cost cancels out).

Layers, each including the one before:

  machine  each frame's JSON to the machine: ``feed_frame``, or ``orjson.loads`` and ``feed`` when
           it declines; every output rendered (``render_responses`` / ``render_chat``), wire mode
  paced    the frames through the ``Pump``, one read a frame (a paced stream: a token a read)
  whole    the whole stream in one read (the Pump's runs, ``feed_run``)
  readsK   the frames through the ``Pump``, K a read (``reads4``, ``reads8``: a stream under load,
           a run only in reads of 1 KiB or more). Where the reads' edges fall differs between
           the two streams, so besides the figure per delta the instructions of each whole
           stream are printed: compare builds by those.

Instructions are of the whole process, user space only, and do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LAYERS = ("machine", "paced", "whole")
DIRECTIONS = ("forward", "reverse")
SHORT, LONG = 20, 120


def child(direction: str, layer: str, loops: int, variant: str = "text") -> None:
    """Translate the short and the long stream ``loops`` times each (after three warm-up passes),
    each batch inside one ``functools.reduce`` call: what callgrind counts and dumps."""
    sys.path.insert(0, str(HERE))
    import orjson
    import upstream

    from crossfeed.translators.ids import SequentialIds
    from crossfeed.translators.options import BackendProfile
    from crossfeed.translators.pump import Pump
    from crossfeed.translators.sse import SSE_FRAMING, SSEDecoder, render_chat, render_responses

    api = "responses" if direction == "reverse" else "chat"
    for n in (SHORT, LONG):
        model = upstream.model_name(n, v=variant)
        plan = upstream.get_plan(api, model, model.split(":", 1)[1])
        frames = [f for f in plan.frames(1) if f is not None]
        datas = [data for f in frames for _, data in SSEDecoder().feed(f) if data != b"[DONE]"]
        whole = b"".join(frames)
        k = int(layer[5:]) if layer.startswith("reads") else 1
        reads = {"paced": frames, "whole": [whole]}.get(layer) or [
            b"".join(frames[i : i + k]) for i in range(0, len(frames), k)
        ]

        def make(model: str = model) -> tuple[Any, Any, list[Any]]:
            if direction == "reverse":
                from crossfeed.translators.reverse.machine import ResponsesToChatStream

                m: Any = ResponsesToChatStream(
                    include_usage=True,
                    options=BackendProfile(),
                    ids=SequentialIds(),
                    now=lambda: 1,
                    model=model,
                    wire=SSE_FRAMING,
                )
                return m, render_chat, []
            from crossfeed.translators.forward.machine import ChatToResponsesStream

            request = {"model": model, "input": "hi", "stream": True}
            m = ChatToResponsesStream(request, ids=SequentialIds(), now=lambda: 1, wire=SSE_FRAMING)
            return m, render_responses, m.start()

        def run(
            _: Any = None, __: Any = None, *, reads: list[bytes] = reads, datas: list[bytes] = datas, make: Any = make
        ) -> None:
            m, render, first = make()
            render(first)
            if layer == "machine":
                for data in datas:
                    out = m.feed_frame(data)
                    render(m.feed(orjson.loads(data)) if out is None else out)
                render(m.finish())
                return
            pump = Pump(m)
            for read in reads:
                render(pump.feed(read))
            render(pump.finish())

        for _ in range(3):
            run()
        functools.reduce(run, range(loops), None)  # counted (``count``)


def count(args: argparse.Namespace, job: tuple[str, str], work: Path) -> tuple[int, int]:
    """The instructions of the short and of the long streams' loops, ``job`` a direction and a layer."""
    direction, layer = job
    env = dict(os.environ, PYTHONPATH=str(args.tree), PYTHONHASHSEED="0")
    out = work / f"{direction}.{layer}"
    out.mkdir()
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce"]
    cmd += ["--dump-after=functools_reduce", f"--callgrind-out-file={out}/cg", args.python, __file__]
    cmd += ["--child", direction, layer, str(args.loops), args.variant]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    dumps = [out / "cg.1", out / "cg.2"]
    if done.returncode != 0 or not all(d.exists() for d in dumps):
        raise SystemExit(f"{direction} {layer} failed:\n{done.stderr[-2000:]}")
    short, long = (summary(d) for d in dumps)
    return short, long


def summary(dump: Path) -> int:
    """The instructions a callgrind dump holds."""
    found = re.search(r"^summary: (\d+)", dump.read_text(), re.M)
    if found is None:
        raise SystemExit(f"no summary line in {dump}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2], int(argv[3]), *argv[4:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default=",".join(LAYERS), help="comma-separated: " + ", ".join(LAYERS))
    ap.add_argument(
        "--variant", choices=["text", "tool", "reasoning"], default="text", help="the deltas' kind (bench/upstream.py)"
    )
    ap.add_argument("--loops", type=int, default=30, help="streams counted, after three warm-up passes")
    ap.add_argument("--tree", type=Path, default=REPO, help="the source tree to count (default: this one)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    layers = [x.strip() for x in args.layers.split(",") if x.strip()]
    for layer in layers:
        if layer not in LAYERS and not re.fullmatch(r"reads[1-9][0-9]?", layer):
            ap.error(f"unknown layer {layer!r} (machine, paced, whole, or readsK: K frames a read)")
    if shutil.which("valgrind") is None:
        print("bench/per_delta.py needs valgrind (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    jobs = [(d, layer) for layer in layers for d in DIRECTIONS]
    with tempfile.TemporaryDirectory(prefix="per-delta-") as tmp, ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: count(args, job, Path(tmp)), jobs), strict=True))
    per = {job: (long - short) / ((LONG - SHORT) * args.loops) for job, (short, long) in counts.items()}
    print(f"# instructions per upstream text delta, in process (bench/per_delta.py), tree {args.tree}")
    print(
        f"# {args.loops} {args.variant} streams of {SHORT} and of {LONG} deltas each way, the difference over {LONG - SHORT}"
    )
    print("| layer | forward | reverse | reverse / forward |")
    print("|---|--:|--:|--:|")
    for layer in layers:
        f, r = per[("forward", layer)], per[("reverse", layer)]
        print(f"| {layer} | {f:,.0f} | {r:,.0f} | {r / f:.3f}x |")
    streamed = [layer for layer in layers if layer.startswith("reads")]
    if streamed:
        print(f"\n# instructions per stream ({SHORT} and {LONG} deltas), the reads layers")
        print(f"| layer | forward {SHORT} | forward {LONG} | reverse {SHORT} | reverse {LONG} |")
        print("|---|--:|--:|--:|--:|")
        for layer in streamed:
            row = [n / args.loops for d in DIRECTIONS for n in counts[(d, layer)]]
            print(f"| {layer} | " + " | ".join(f"{n:,.0f}" for n in row) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({f"{d} {layer}": round(v) for (d, layer), v in per.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
