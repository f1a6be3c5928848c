"""`tkgen bench` and `tkgen tune`: time generated kernels against their competitors, and tune schedules.

For each operator and each workload its spec lists, in one process and alternating between them, it times
the generated kernel, the generated reference in eager PyTorch, torch.compile of that reference, and any
competitor adapters (TileKernels) found in the adapters file; a competitor that cannot run is skipped
with its reason. Bytes come from the spec: every input read once, every output written once.

Every implementation is timed two ways, alternating:
- kernel (`time_us`): warm-up, then `reps` timed batches of launches between device events, captured in a
  CUDA graph where an implementation can be (so host work does not count); tkgen's row launches its
  prepared kernel;
- eager (`eager_us`): the same batches of the Python call as a training loop makes it (tkgen's row calls
  `tkgen.ops.<op>`), without a graph; `host_us` is the host's own time per call in those batches (wall
  clock from the first call to the return of the last, before waiting for the device).
Medians over batches; inputs rotate over enough copies that the whole working set exceeds the L2 cache.
On the CPU the same loops run with a wall clock (kernel and eager then differ by tkgen's host path alone).
"""
from __future__ import annotations

import importlib.util
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from ..spec import expr as E
from .. import registry
from ..lower.cost import op_count
from ..runtime.fastpath import prepare
from ..runtime.ops import check, variant_of
from ..testing.inputs import materialize

L2_BYTES = 64 << 20


@dataclass
class Result:
    op: str
    workload: str
    impl: str
    time_us: Optional[float]
    bytes: int
    gbps: Optional[float] = None
    pct_copy: Optional[float] = None
    note: str = ""
    spread_us: Optional[float] = None
    extra: Dict = field(default_factory=dict)
    eager_us: Optional[float] = None      # the Python call, no CUDA graph (see the module doc)
    host_us: Optional[float] = None       # the host's time per eager call


@dataclass
class Impl:
    """One implementation of a workload: per rotated input set, the callable timed as the kernel and the
    one timed as an eager call (the same where the user-facing call is all there is), or None and why."""
    fns: Optional[List[Callable]]
    note: str = ""
    eager: Optional[List[Callable]] = None

    def __post_init__(self):
        if self.eager is None:
            self.eager = self.fns


ROUNDS = 3   # timing rounds per implementation, interleaved


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fns: List[Callable], device, reps=30, batch=10, warmup_ms=25.0, graph=True, host=None):
    """Median time (µs) of one call, cycling through `fns` (one per rotated input set).

    Returns (median_us, spread_us, used_graph). `host`: a list that receives the host's median time per
    call (µs) where the calls are not captured in a graph."""
    n = len(fns)
    call = lambda i: fns[i % n]()  # noqa: E731
    t0 = time.perf_counter()
    i = 0
    while (time.perf_counter() - t0) * 1e3 < warmup_ms or i < 3:
        call(i)
        i += 1
        _sync(device)
    # a slow implementation (the eager reference) needs no batching to dwarf the event overhead; but a
    # batch covers every rotated input set, so that the working set stays beyond the L2 cache
    batch = max(n, min(batch, int(2e-3 / ((time.perf_counter() - t0) / i))))
    used_graph = False
    issued = []
    if device.type == "cuda":
        def runner():
            a = time.perf_counter()
            for k in range(batch):
                call(k)
            issued.append((time.perf_counter() - a) * 1e6 / batch)
        if graph:
            try:
                g = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream(device)
                s.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(s):
                    runner()
                torch.cuda.current_stream(device).wait_stream(s)
                with torch.cuda.graph(g):
                    runner()
                runner = g.replay
                used_graph = True
            except Exception:  # not capturable (host syncs, allocations outside the pool): time launches
                torch.cuda.synchronize(device)
        issued.clear()
        samples = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            runner()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) * 1e3 / batch)
    else:
        samples = []
        for r in range(reps):
            a = time.perf_counter()
            for k in range(batch):
                call(r * batch + k)
            samples.append((time.perf_counter() - a) * 1e6 / batch)
        issued = list(samples)
    if host is not None and issued and not used_graph:
        host.append(statistics.median(issued))
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.8)] - samples[int(len(samples) * 0.2)], used_graph


def copy_bandwidth(device, nbytes=2 << 30):
    """Device-to-device copy, bytes read plus written per second (GB/s): the memory ceiling."""
    if device.type == "cpu":
        nbytes = 256 << 20
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    t, _, _ = time_fn([lambda: dst.copy_(src)], device, reps=20, batch=5, graph=False)
    return 2 * nbytes / (t * 1e-6) / 1e9


def _load_adapters(path):
    if path is None or not Path(path).exists():
        return {}
    spec = importlib.util.spec_from_file_location("tkgen_bench_adapters", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, "ADAPTERS", {})


@lru_cache(maxsize=None)
def _spec_of(name):
    from ..driver import load_catalog
    return load_catalog(registry.specs_dir()).op(name)


def _value_range(pkg, name, env) -> dict:
    """The spec's `values: range` of an integer input (positions into another tensor), evaluated at the
    workload's sizes; distinct positions are drawn without negatives, as a mapping that routes every pair."""
    t = _spec_of(pkg.OP.name).inputs[name]
    rng = t.values.get("range")
    if rng is None:
        return {}
    lo, hi = (E.evaluate(E.parse(str(r)), env) for r in rng)
    distinct = bool(t.values.get("distinct"))
    return {"range": [max(lo, 0) if distinct else lo, hi], "distinct": distinct}


def workload_inputs(pkg, workload, device, copies):
    from ..testing.strategies import with_codec
    op = pkg.OP
    dims = dict(workload["dims"])
    params = {p.name: workload.get("params", {}).get(p.name, p.default) for p in op.params}
    for p in op.params:   # a param whose value names a dim (group: H)
        if isinstance(params[p.name], str) and params[p.name] in dims and not p.structural:
            params[p.name] = dims[params[p.name]]
    env = {**dims, **params}
    present = {i.name: (not i.optional or i.name in workload.get("dtypes", {})) or None for i in op.inputs}
    variant = variant_of(op, params, present)
    sets = []
    for c in range(copies):
        tensors = {}
        for info in op.inputs:
            if info.optional and info.name not in workload.get("dtypes", {}):
                tensors[info.name] = None       # an optional input is present when the workload gives its dtype
                continue
            dtype = workload.get("dtypes", {}).get(info.name, "present")
            dtype = (info.dtypes or ("fp32",))[0] if dtype == "present" else dtype   # `present`: the format decides
            recipe = {"dtype": dtype, "seed": 1234 + c, "scale_exp": 0, "style": "normal", "specials": []}
            recipe.update(_value_range(pkg, info.name, env))
            codec = info.codec(variant) if info.codec else None
            recipe, shape = with_codec(recipe, codec, tuple(info.shape_fn(env)))
            tensors[info.name] = materialize(recipe, tuple(shape), "cpu").to(device)
        sets.append(tensors)
    return sets, params


def sized_for(device, spec, wl):
    """The workload, with at most 256 rows on the CPU (whose kernels are for checking, not for speed)."""
    wl = dict(wl)
    if device.type == "cpu":
        wl["dims"] = {k: (min(v, 256) if k == spec.dynamic_dim else v) for k, v in wl["dims"].items()}
    return wl


def workload_impls(name, wl, device, against, adapters, copies=None, schedule=None):
    """What timing one workload needs: its label, bytes, op count, first input set and params, and per
    implementation (one callable per rotated input set, or None, note). `copies=None` rotates enough
    input sets on CUDA that the working set exceeds the L2 cache."""
    from ..driver import load_catalog
    cat = load_catalog(registry.specs_dir())
    spec = cat.op(name)
    pkg = registry.op_package(name)
    ref_mod = importlib.import_module(pkg.__name__ + ".reference")
    wl = sized_for(device, spec, wl)
    probe, params = workload_inputs(pkg, wl, device, 1)
    dims = check(pkg.OP, probe[0], params)
    launch, outs = prepare(pkg.OP, probe[0], params, schedule=schedule, dims=dims)
    nbytes = sum(t.numel() * t.element_size() for t in probe[0].values() if t is not None) + \
        sum(o.numel() * o.element_size() for o in outs)
    if copies is None:
        copies = max(1, min(16, -(-2 * L2_BYTES // max(nbytes, 1)))) if device.type == "cuda" else 1
    sets = probe + (workload_inputs(pkg, wl, device, copies)[0][1:] if copies > 1 else [])
    present = {f"?{n}": probe[0][n] is not None for n in spec.optional_inputs}
    public = getattr(pkg, name)
    impls = {"tkgen": Impl([launch] + [prepare(pkg.OP, s, params, schedule=schedule)[0] for s in sets[1:]],
                           eager=[(lambda s=s: public(**s, **params)) for s in sets])}
    ref = ref_mod.VARIANTS[variant_of(pkg.OP, params, probe[0])]
    statics = [params[p.name] for p in pkg.OP.params if not p.structural]
    args_of = lambda s: [s[i.name] for i in pkg.OP.inputs] + statics  # noqa: E731
    if "torch" in against:
        impls["torch"] = Impl([(lambda s=s: ref(*args_of(s))) for s in sets])
    if "compile" in against:
        try:
            cref = torch.compile(ref, dynamic=False)
            cref(*args_of(sets[0]))
            impls["compile"] = Impl([(lambda s=s: cref(*args_of(s))) for s in sets])
        except Exception as e:  # noqa: BLE001
            impls["compile"] = Impl(None, f"torch.compile failed: {type(e).__name__}: {str(e)[:120]}")
    for comp in against:
        if comp in ("torch", "compile", "tkgen"):
            continue
        adapter = adapters.get(comp, {}).get(name)
        if adapter is None:
            impls[comp] = Impl(None, f"no {comp} adapter for {name}")
            continue
        try:
            fn = adapter(params, dims)
            fn(*[sets[0][i.name] for i in pkg.OP.inputs])
            impls[comp] = Impl([(lambda s=s: fn(*[s[i.name] for i in pkg.OP.inputs])) for s in sets])
        except Exception as e:  # noqa: BLE001
            impls[comp] = Impl(None, f"{comp} unavailable: {type(e).__name__}: {str(e)[:160]}")
    return dict(label=wl["name"] + " " + ",".join(f"{k}={v}" for k, v in wl["dims"].items()),
                nbytes=nbytes, ops=op_count(spec, cat, {**dims, **params, **present}),
                inputs=probe[0], params=params, impls=impls)


def _warm_one(job):
    """In a worker process: build every implementation of one workload once, which fills the disk caches
    (TileLang's kernels, Inductor's graphs) that the timing process then reads."""
    name, index, device_type, against, adapters_path = job
    registry.use_generated()
    from ..driver import load_catalog
    t = time.time()
    try:
        wl = load_catalog(registry.specs_dir()).op(name).workloads[index]
        workload_impls(name, wl, torch.device(device_type), against, _load_adapters(adapters_path), copies=1)
        return f"{name}[{index}] built in {time.time() - t:.0f} s"
    except Exception as e:  # noqa: BLE001  (the timing process meets it again and reports it)
        return f"{name}[{index}] failed to build: {type(e).__name__}: {str(e)[:200]}"


def warm_caches(names, device, against, adapters_path, jobs, log=print):
    """Build every workload's implementations in `jobs` worker processes at once (compiling is most of a
    bench's time; timing then runs alone in one process)."""
    import concurrent.futures as cf
    import multiprocessing as mp
    import os
    from ..driver import load_catalog
    cat = load_catalog(registry.specs_dir())
    work = [(n, i, device.type, tuple(against), adapters_path) for n in names for i in range(len(cat.op(n).workloads))]
    saved = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"     # the workers are the parallelism
    t = time.time()
    try:
        with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            for k, msg in enumerate(pool.map(_warm_one, work)):
                log(f"  warm {k + 1}/{len(work)} {msg}")
    except Exception as e:  # noqa: BLE001  (a worker died: warming only saves time, the timing builds the rest)
        log(f"  warm-up stopped ({type(e).__name__}: {str(e)[:200]}); timing builds what is left")
    finally:
        if saved is None:
            os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS")
        else:
            os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = saved
    log(f"built {len(work)} workloads in {time.time() - t:.0f} s with {jobs} workers")


def bench_op(name, device, against, adapters, reps=30, log=print, schedule=None, workloads=None):
    """All results for one operator's workloads (or those named in `workloads`); the generated kernel's
    outputs on the first input set are checked against the reference (as the spec declares) before it is
    timed."""
    from ..driver import load_catalog
    from ..testing.check import check_tensors
    results = []
    for wl in load_catalog(registry.specs_dir()).op(name).workloads:
        if workloads is not None and wl["name"] not in workloads:
            continue
        w = workload_impls(name, wl, device, against, adapters, schedule=schedule)
        label, impls = w["label"], w["impls"]
        try:
            check_tensors(name, w["inputs"], dict(w["params"]), schedule=schedule)
            checked = "matches the reference"
        except AssertionError as e:
            checked = f"MISMATCH: {str(e)[:300]}"
            log(f"  {name} [{label}] tkgen output MISMATCH: {str(e)[:300]}")
        timed = {impl: x for impl, x in impls.items() if x.fns is not None}
        rounds = {impl: {"kernel": [], "eager": [], "host": []} for impl in timed}
        graphs = {}
        per_round = max(3, reps // ROUNDS)
        for _ in range(ROUNDS):   # alternate: slow drifts (clocks, heat) spread over every implementation
            for impl, x in timed.items():
                r = rounds[impl]
                t, _, graphs[impl] = time_fn(x.fns, device, reps=per_round)
                r["kernel"].append(t)
                r["eager"].append(time_fn(x.eager, device, reps=per_round, graph=False, host=r["host"])[0])
        for impl, x in impls.items():
            extra = {"ops": w["ops"], **({"checked": checked} if impl == "tkgen" else {})}
            if x.fns is None:
                log(f"  {name} [{label}] {impl}: skipped ({x.note})")
                results.append(Result(name, label, impl, None, w["nbytes"], note=x.note, extra=extra))
                continue
            r = rounds[impl]
            t = statistics.median(r["kernel"])
            results.append(Result(name, label, impl, t, w["nbytes"], gbps=w["nbytes"] / (t * 1e-6) / 1e9,
                                  spread_us=max(r["kernel"]) - min(r["kernel"]),
                                  note="" if graphs[impl] or device.type == "cpu" else "timed without CUDA graph",
                                  extra=extra, eager_us=statistics.median(r["eager"]),
                                  host_us=statistics.median(r["host"])))
            log(f"  {name} [{label}] {impl}: {t:.1f} µs ({results[-1].gbps:.0f} GB/s); eager "
                f"{results[-1].eager_us:.1f} µs, host {results[-1].host_us:.1f} µs per call")
    return results


def report(results, copy_gbps, device_name, out_dir, plot=True):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for r in results:
        if r.gbps:
            r.pct_copy = 100 * r.gbps / copy_gbps
    rows = ["| op | workload | impl | kernel (µs) | eager (µs) | host (µs/call) | GB/s | % of copy | "
            "tkgen ratio, kernel | tkgen ratio, eager | note |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in results:
        by.setdefault((r.op, r.workload), {})[r.impl] = r
    show = lambda v: "–" if v is None else f"{v:.1f}"  # noqa: E731
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else ""  # noqa: E731
    for (op, wl), impls in by.items():
        mine = impls.get("tkgen")
        for impl, r in impls.items():
            kernel_ratio = ratio(mine.time_us, r.time_us) if mine and impl != "tkgen" else ""
            eager_ratio = ratio(mine.eager_us, r.eager_us) if mine and impl != "tkgen" else ""
            note = r.note
            if impl == "tkgen" and r.extra.get("checked", "").startswith("MISMATCH"):
                note = (note + "; " if note else "") + "output does NOT match the reference"
            rows.append(f"| {op} | {wl} | {impl} | {r.time_us:.1f} | {show(r.eager_us)} | {show(r.host_us)} | "
                        f"{r.gbps:.0f} | {r.pct_copy:.0f}% | {kernel_ratio} | {eager_ratio} | {note} |"
                        if r.time_us else f"| {op} | {wl} | {impl} | – | – | – | – | – | | | {note} |")
    table = "\n".join(rows)
    meta = {"device": device_name, "copy_gbps": copy_gbps, "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"), "cuda": torch.version.cuda}
    try:
        import tilelang
        meta["tilelang"] = tilelang.__version__
    except ImportError:
        pass
    tmp = out_dir / "bench.json.tmp"      # renamed into place: a run killed while writing leaves the last one
    tmp.write_text(json.dumps({"meta": meta, "results": [asdict(r) for r in results]}, indent=1))
    tmp.replace(out_dir / "bench.json")
    (out_dir / "bench.md").write_text(f"{meta}\n\ncopy bandwidth: {copy_gbps:.0f} GB/s\n\n{table}\n")
    if plot:
        _plot(results, copy_gbps, out_dir / "roofline.png")
    return table


def _plot(results, copy_gbps, path):
    """Roofline: achieved GB/s against operations per byte (counted from the spec's stages, see cost.py),
    one mark per op, workload and implementation (colour: op, marker: implementation), under the copy
    bandwidth measured in the same run. No compute ceiling is drawn: none was measured, and at these
    intensities (below 4 ops per byte) every op is far below any compute peak."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(10, 5.2))
    markers = {"tkgen": "o", "tilekernels": "s", "compile": "^", "torch": "v"}
    ops = sorted({r.op for r in results})
    colours = {op: plt.cm.tab20(i % 20) for i, op in enumerate(ops)}
    shown = [r for r in results if r.gbps and r.extra.get("ops")]
    for r in shown:
        ax.scatter(r.extra["ops"] / r.bytes, r.gbps, marker=markers.get(r.impl, "x"), color=colours[r.op],
                   edgecolors="k" if r.impl == "tkgen" else "none", s=42)
    ax.axhline(copy_gbps, color="k", linestyle="--")
    ax.text(0.01, copy_gbps * 1.05, f"measured copy {copy_gbps:.0f} GB/s", transform=ax.get_yaxis_transform(),
            fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=copy_gbps * 1.6)
    ax.set_xlabel("arithmetic intensity (operations per byte, counted from the spec)")
    ax.set_ylabel("GB/s (inputs read once + outputs written once) / time")
    by_op = [Line2D([], [], marker="o", linestyle="", color=colours[o], label=o) for o in ops]
    impls = [i for i in markers if any(r.impl == i for r in shown)]
    by_impl = [Line2D([], [], marker=markers[i], linestyle="", color="grey", label=i) for i in impls]
    # beside the axes, not over the marks
    first = ax.legend(handles=by_op, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), title="op",
                      title_fontsize=7)
    ax.add_artist(first)
    second = ax.legend(handles=by_impl, fontsize=7, loc="lower left", bbox_to_anchor=(1.01, 0),
                       title="implementation", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight", bbox_extra_artists=[first, second])
    plt.close(fig)
