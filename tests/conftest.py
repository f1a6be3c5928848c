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


@pytest.fixture(scope="session")
def unformatted_files(request, tmp_path_factory, catalog):
    """Every generated file as the printers write it (`render_all(formatted=False)`), rendered once per run:
    under pytest-xdist the first worker that asks renders it (about 20 seconds) and leaves it in the run's
    temporary directory, and the other workers read that."""
    from tkgen.codegen.generate import render_all
    worker = getattr(request.config, "workerinput", {}).get("workerid")
    if worker is None:                 # one process: nothing to share
        return render_all(catalog, formatted=False)
    import pickle
    from filelock import FileLock
    shared = tmp_path_factory.getbasetemp().parent / "unformatted_files.pickle"    # this run's, all workers'
    with FileLock(str(shared) + ".lock"):
        if shared.exists():
            return pickle.loads(shared.read_bytes())
        files = render_all(catalog, formatted=False)
        shared.write_bytes(pickle.dumps(files))
        return files


@pytest.fixture(scope="session")
def rendered_files(unformatted_files):
    """Every generated file as `generate` writes it: the printers' lines broken within the width."""
    from tkgen.codegen.format_source import format_source
    return {path: format_source(text) for path, text in unformatted_files.items()}
