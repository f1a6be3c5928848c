"""What the commands share: names looked up with "did you mean", and progress on stderr."""
from __future__ import annotations

import difflib
import os
import sys
import time
from pathlib import Path

from .. import registry
from ..spec.safety import did_you_mean  # noqa: F401 (the commands' and the specs' one rule)


class UsageError(Exception):
    """A name the command does not know (an op, a file, an arch): one line on stderr, exit code 2."""


def known_op(name: str):
    """`name` if a generated op has it, else UsageError naming the closest ops."""
    ops = registry.op_modules()
    if name not in ops:
        raise UsageError(f"unknown op {name!r}{did_you_mean(name, ops) or f' ({len(ops)} ops: tkgen list)'}")
    return name


def known_arch(cat, name: str):
    if name not in cat.archs:
        raise UsageError(f"unknown arch {name!r}{did_you_mean(name, cat.archs)} (archs: {', '.join(sorted(cat.archs))})")
    return name


def existing_path(path: str, what: str = "file", specs=None) -> Path:
    """`path` if it exists, else UsageError naming the closest entries of its directory and, for spec
    files, the spec files of the same name under `specs`."""
    p = Path(path)
    if p.exists():
        return p
    # names compared without their directory, whose shared prefix would make every entry look close
    near = {c.name: str(c) for c in p.parent.iterdir()} if p.parent.is_dir() else {}
    close = difflib.get_close_matches(p.name, list(near), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(near[c] for c in close)}?" if close else ""
    if not hint and specs is not None and Path(specs).is_dir():
        files = {f.name: os.path.relpath(f) for f in sorted(Path(specs).rglob("*.yaml"))}
        close = difflib.get_close_matches(p.name, list(files), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(files[c] for c in close)}?" if close else ""
    raise UsageError(f"no such {what}: {path}{hint}")


def progress_printer(verb: str, total: int, every: float = 10.0, stream=None):
    """step(i, name) after each of `total` items of a long command, on stderr: a counter rewritten in place
    when stderr is a terminal, else a line every `every` seconds (a short run prints nothing)."""
    stream = stream or sys.stderr
    tty = stream.isatty()
    t0 = last = time.time()

    def step(i: int, name: str):
        nonlocal last
        now = time.time()
        if tty:
            end = f"\r{' ' * 78}\r" if i >= total else ""      # cleared at the end: the summary follows
            print(f"\r{verb} {i}/{total} {name}"[:78].ljust(78) + end, end="", file=stream, flush=True)
        elif now - last >= every and i < total:
            last = now
            print(f"tkgen: {verb} {i}/{total} ({now - t0:.0f} s)", file=stream, flush=True)
    return step
