"""Sampling profiles of a target during benchmark cells (``bench/run.py --profile DIR``).

Attaches ``py-spy record --nonblocking --format raw`` to the target's pid for the length of one
measurement and writes the collapsed stacks to DIR, then a short text summary (top functions by
own samples and by inclusive samples) next to it. py-spy is a dev tool, not a dependency:
``.venv/bin/pip install py-spy``. Figures from a profiled run are not for quoting.

Summarise an existing file:  python bench/pyspy.py DIR/forward-c16_n20_text.txt
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


def find_pyspy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    if here.exists():
        return str(here)
    return shutil.which("py-spy")


class Recorder:
    def __init__(self, exe: str, pid: int, out: Path, cpu: int | None, rate: int = 250) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if cpu is not None:
            os.sched_setaffinity(self.proc.pid, {cpu})

    def stop(self) -> Path | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if not self.out.exists():
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            print(f"py-spy wrote no profile ({err.strip()[-300:]})", file=sys.stderr)
            return None
        summary = self.out.with_suffix(".summary.txt")
        summary.write_text(summarise(self.out))
        return summary


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py:123)"
    if " (" in frame and frame.endswith(")"):
        name, _, loc = frame.partition(" (")
        return f"{name} ({loc.rsplit('/', 1)[-1]}"
    return frame


def summarise(path: Path, top: int = 25) -> str:
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        k = int(n)
        total += k
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    if not total:
        return "no samples\n"
    out = [f"{total} samples ({path.name})", "", "own samples:"]
    out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in own.most_common(top)]
    out += ["", "inclusive samples:"]
    out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in incl.most_common(top)]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        sys.stdout.write(summarise(Path(arg)))
