"""tkgen's own cache directory: $TKGEN_CACHE, else ~/.cache/tkgen, else the temporary directory (a
read-only home). It holds the libm mirror and the compile locks; TileLang keeps its kernels in its own."""
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    cache = Path(os.environ.get("TKGEN_CACHE", Path.home() / ".cache" / "tkgen"))
    try:
        cache.mkdir(parents=True, exist_ok=True)
        return cache
    except OSError:
        return Path(tempfile.gettempdir())
