"""A precompiled header for the C kernels.

TileLang's C source for a kernel starts with `#include <tl_templates/cpp/common.h>` (half.hpp's 5,600 lines of
C++ and the C library's headers), which g++ parses again for every kernel: measured on this project's
kernels, about 0.5 s of a small kernel's 0.85 s compile and 0.5 s of a large one's 1.2 s. Given the header
first on its command line (`-include H`) with `H.gch` beside it, built by the same compiler with the same
flags, g++ loads the parsed header instead. If anything differs, g++ ignores the `.gch` and parses the text
(slower, nothing else), and the kernel's machine code is the same either way (tests/test_compile_cache.py).

The header is built once per compiler, flags and TileLang version into $TKGEN_CACHE (tkgen/runtime/cache.py)
under a file lock, so parallel test workers build it once. TKGEN_NO_PCH=1 compiles without it.
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
import tempfile
from pathlib import Path

from .cache import cache_dir

_TEXT = "#include <tl_templates/cpp/common.h>\n"
_BASE_FLAGS = ("-std=c++17", "-fPIC")      # TileLang's own for a C kernel (tilelang/jit/adapter/libgen.py)


def with_header(target: str, compile_flags) -> list:
    """A C kernel's compile flags with the precompiled header included first; other targets', and those for
    which no header could be built, unchanged."""
    flags = list(compile_flags)
    if target != "c" or os.environ.get("TKGEN_NO_PCH", "") not in ("", "0"):
        return flags
    header = _header(tuple(flags))
    return flags + ["-include", header] if header else flags


@functools.lru_cache(maxsize=None)
def _header(flags: tuple):
    """The header's path, its .gch built; None where it cannot be (no compiler, a read-only cache, a failed
    build): kernels then compile as TileLang alone would."""
    try:
        return _built(flags)
    except (OSError, subprocess.SubprocessError):
        return None


def _built(flags: tuple):
    from filelock import FileLock
    import tilelang
    from tilelang.contrib.cc import get_cplus_compiler
    from tilelang.env import TILELANG_TEMPLATE_PATH
    cxx = get_cplus_compiler()
    if not cxx:
        return None
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256(repr((cxx, version, _BASE_FLAGS, flags, str(TILELANG_TEMPLATE_PATH), tilelang.__version__,
                               platform.machine(), _TEXT)).encode()).hexdigest()[:16]
    where = cache_dir() / "pch" / key
    header, compiled = where / "tl_common.h", where / "tl_common.h.gch"
    if compiled.exists():
        return str(header)
    where.mkdir(parents=True, exist_ok=True)
    with FileLock(str(where) + ".lock"):
        if not compiled.exists():
            # written beside their final names and renamed into place: a process that sees the .gch sees a
            # whole one, and the header text before it
            with tempfile.TemporaryDirectory(dir=where) as tmp:
                text, out = Path(tmp) / "tl_common.h", Path(tmp) / "tl_common.h.gch"
                text.write_text(_TEXT)
                r = subprocess.run([cxx, *_BASE_FLAGS, *flags, "-I" + str(TILELANG_TEMPLATE_PATH), "-x", "c++-header",
                                    str(text), "-o", str(out)], capture_output=True, text=True, timeout=600)
                if r.returncode:
                    return None
                os.replace(text, header)
                os.replace(out, compiled)
    return str(header)
