"""The kernel IR's verifier (stub)."""


class VerifyError(Exception):
    pass


def verify(module, invariants=(), where=""):
    return None
