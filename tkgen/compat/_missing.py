"""Modules of TileKernels whose every function tkgen has not built: each name raises NotImplementedError."""
import types

from ._common import missing


def module(qualname: str, release: str, names, doc: str = "") -> types.ModuleType:
    """A module `qualname` whose attributes `names` are stand-ins naming themselves (`<module>.<name>`)."""
    mod = types.ModuleType(qualname, doc or f"TileKernels {release}'s `{qualname.rsplit('.', 1)[-1]}`: not built "
                                            "in tkgen yet; every function raises NotImplementedError.")
    short = qualname.split(".", 3)[-1]
    for name in names:
        setattr(mod, name, missing(f"{short}.{name}", release))
    mod.__all__ = list(names)
    return mod
