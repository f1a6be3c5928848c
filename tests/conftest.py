import functools
import os

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "0")

settings.register_profile("tkgen", deadline=None, suppress_health_check=list(HealthCheck),
                          max_examples=int(os.environ.get("TKGEN_EXAMPLES", "40")), print_blob=True)
settings.load_profile("tkgen")


@functools.lru_cache(maxsize=None)
def shipped_catalog():
    """The catalog of the shipped specs, loaded once per test process: loading checks that every variant
    lowers (about two seconds), and the property tests alone asked for it 150 times. Read it, never
    change it: a test that changes a catalog loads its own (tests/test_safety.py)."""
    from tkgen import registry
    from tkgen.driver import load_catalog
    registry.use_generated()
    return load_catalog(registry.specs_dir())


@pytest.fixture(scope="session")
def catalog():
    return shipped_catalog()


def op_names():
    return sorted(shipped_catalog().ops)
