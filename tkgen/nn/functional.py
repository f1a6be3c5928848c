"""Differentiable functions: every spec with a `backward:` block that names a `function`.

Attributes resolve lazily to the function generated in that op's `op.py`; they run the generated
forward kernel, and their registered autograd formula runs the generated backward kernel.
"""
import importlib

from .. import registry


def _functions():
    found = {}
    for pkg in registry.op_modules().values():
        mod = importlib.import_module(pkg + ".op")
        found.update(getattr(mod, "FUNCTIONAL", {}))
    return found


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    fns = _functions()
    if name not in fns:
        raise AttributeError(f"tkgen.nn.functional has no {name!r}; generated: {', '.join(sorted(fns)) or 'none'}")
    globals()[name] = fns[name]
    return fns[name]


def __dir__():
    return sorted(_functions())
