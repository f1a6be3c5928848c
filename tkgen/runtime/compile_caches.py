"""torch.compile's caches keyed to the Python that tkgen traces into graphs.

Inductor's and AOTAutograd's on-disk caches key a graph by its own code, not by the schemas of the custom ops
it calls nor by their autograd formulas: after an upgrade that adds a param to a backward op, a warm cache
would replay a backward graph that calls the op with the old arguments. Every generated op therefore adds
the digest of the ops' modules (`<family>/<op>/op.py`: schemas and formulas) and of the hand-written
formulas to `torch.compiler.config.cache_key_tag`, after the user's own tag: graphs are reused for as long
as that Python is the same, and recompiled once after it changes. A tag the user sets later replaces it.
"""
from __future__ import annotations

import hashlib
import sys
from functools import lru_cache
from pathlib import Path

import torch.compiler.config

PREFIX = "tkgen-ops-"
_TKGEN = Path(__file__).resolve().parent.parent
FORMULAS = ("nn/moe_autograd.py", "runtime/autograd.py")    # hand-written code that graphs trace through


@lru_cache(maxsize=None)
def ops_digest(generated_root: str) -> str:
    """The digest of every op module under a generated directory and of the hand-written formulas."""
    h = hashlib.sha256()
    root = Path(generated_root)
    for path in sorted(root.glob("*/*/op.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    for rel in FORMULAS:
        h.update(rel.encode() + b"\0" + (_TKGEN / rel).read_bytes())
    return h.hexdigest()[:16]


def tag_for(package: str) -> None:
    """Key torch.compile's caches to the ops of the generated package `package` belongs to."""
    top = sys.modules.get(package.split(".")[0])
    if top is None or not getattr(top, "__path__", None):
        return
    ours = PREFIX + ops_digest(str(Path(top.__path__[0]).resolve()))
    tag = torch.compiler.config.cache_key_tag
    head, _, last = tag.rpartition("|")
    user = head if last.startswith(PREFIX) else tag      # our part replaced, the user's kept
    torch.compiler.config.cache_key_tag = f"{user}|{ours}" if user else ours
