"""Every generated operator, by name: `tkgen.ops.<op>(...)`.

Attributes resolve lazily to the public function of `generated/<family>/<op>/op.py`; importing an op
registers its `torch.ops.tkgen.<op>` custom op.
"""
from . import registry


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    fn = getattr(registry.op_package(name), name)
    globals()[name] = fn
    return fn


def __dir__():
    return sorted(registry.op_modules())
