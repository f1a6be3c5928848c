"""Helpers of the generated autograd formulas (`backward:` blocks of specs)."""
import torch


def _present(a, b):
    """The first of two tensors that is there: an output that was not written is an empty tensor."""
    return a if a is not None and a.numel() else b


def _contiguous(g):
    return None if g is None else g.contiguous()


def _like(a, ref):
    """`a` in the dtype of `ref` (an input of the backward op typed like another one)."""
    return a if a is None or ref is None or a.dtype == ref.dtype else a.to(ref.dtype)


def _grad_like(g, ref):
    """A gradient in the dtype of the forward input it belongs to (None for an input that was None); `ref`
    is that input, or its dtype where the forward did not save it."""
    if ref is None or g is None:
        return None
    if isinstance(ref, torch.dtype):
        return g.to(ref)
    return g.to(ref.dtype) if isinstance(ref, torch.Tensor) else g


def _dtype(t):
    """What the backward keeps of a forward input it does not read: its dtype (None where it was None)."""
    return t.dtype if isinstance(t, torch.Tensor) else None


__all__ = ["torch", "_present", "_contiguous", "_like", "_grad_like", "_dtype"]
