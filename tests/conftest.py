import os

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "0")

settings.register_profile("tkgen", deadline=None, suppress_health_check=list(HealthCheck),
                          max_examples=int(os.environ.get("TKGEN_EXAMPLES", "40")), print_blob=True)
settings.load_profile("tkgen")


@pytest.fixture(scope="session")
def catalog():
    from tkgen import registry
    from tkgen.driver import load_catalog
    registry.use_generated()
    return load_catalog(registry.specs_dir())


def op_names():
    from tkgen import registry
    from tkgen.driver import load_catalog
    return sorted(load_catalog(registry.specs_dir()).ops)
