"""The `tkgen bench` and `tkgen tune` subcommands."""
from __future__ import annotations

import itertools
import os
import json
import sys
import tempfile

import yaml

from .. import registry

DEFAULT_ADAPTERS = registry.REPO / "benchmarks" / "competitors.py"


def cmd_bench(args):
    import torch
    from .bench import _load_adapters, bench_op, copy_bandwidth, report, warm_caches

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here", file=sys.stderr)
        return 2
    from .console import existing_path, known_op
    ops = [known_op(o) for o in args.ops] or sorted(registry.op_modules())
    existing_path(args.adapters, "adapters file")
    against = [a for a in args.against.split(",") if a]
    adapters = _load_adapters(args.adapters)
    print(f"measuring copy bandwidth on {device} ...", flush=True)
    copy = copy_bandwidth(device)
    print(f"copy: {copy:.0f} GB/s", flush=True)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if args.jobs > 1:
        warm_caches(ops, device, against, args.adapters, args.jobs, log=lambda m: print(m, flush=True))
    results = []
    for name in ops:
        print(f"{name}:", flush=True)
        results += bench_op(name, device, against, adapters, reps=args.reps,
                            log=lambda m: print(m, flush=True))
        report(results, copy, device_name, args.out, plot=False)   # so far: a run cut short keeps its results
    print(report(results, copy, device_name, args.out))
    print(f"\nwrote {args.out}/bench.json, bench.md, roofline.png")
    return 0


def tune_space(arch_doc: dict, knobs, passes=()):
    """Candidate schedules: the profile's `tune_space`, restricted to the factory's knobs and to the
    parameters (`pass.param`) of the passes the op's pipeline runs (`passes`)."""
    space = {k: v for k, v in arch_doc.get("tune_space", {}).items()
             if k in knobs or ("." in k and k.split(".", 1)[0] in passes)}
    names = sorted(space)
    for combo in itertools.product(*(space[n] for n in names)):
        yield dict(zip(names, combo))


def _tune_case(pkg, spec, wl, device, arch):
    """One workload's rotated inputs, params, reference outputs and kernel factory, for `tune`."""
    from .bench import sized_for, workload_inputs
    from ..runtime.kernels import kernel_module
    from ..runtime.ops import check, specialization

    wl = sized_for(device, spec, wl)
    sets, params = workload_inputs(pkg, wl, device, 4 if device.type == "cuda" else 1)
    dims = check(pkg.OP, sets[0], params)
    variant, statics, dtypes = specialization(pkg.OP, sets[0], params, dims)
    return dict(name=wl["name"], sets=sets, params=params, kernels=kernel_module(pkg, arch),
                statics=statics + dtypes, variant=variant)


def _try_candidate(pkg, case, arch, cand, device, reps):
    """Time of `cand` on one workload (µs), after checking its outputs against the reference as the
    property tests do (poisoned outputs, kept rows, outputs checked given others, strided layouts)."""
    from .bench import time_fn
    from ..runtime.fastpath import prepare
    from ..testing.check import check_tensors

    check_tensors(pkg.OP.name, case["sets"][0], dict(case["params"]), arch=arch, schedule=cand)
    launches = [prepare(pkg.OP, s, case["params"], arch=arch, schedule=cand)[0] for s in case["sets"]]
    return time_fn(launches, device, reps=reps)[0]


def _with_tuned(cat, spec, arch_name, cand):
    """The catalog with `cand` written as the op's tuned schedule on the profile, as `tune` would."""
    import dataclasses
    arch = cat.archs[arch_name]
    tuned = dataclasses.replace(arch, tuned={**arch.tuned, spec.name: _as_schedule(cand)})
    return dataclasses.replace(cat, archs={**cat.archs, arch_name: tuned}), tuned


def candidate_kernels(cat, spec, pkg, arch_name, cand, workdir):
    """The op's kernels on the profile generated for a candidate's pass parameters: the kernel module
    written under `workdir` (TileLang reads a factory's source from its file) and imported beside the op's
    package, with a knob table like the profile's. Nothing is written into the package."""
    import importlib.util
    import types
    from pathlib import Path
    from ..codegen.generate import compile_configs, kernel_module as render_kernels
    from ..lower.lowering import lower_variants
    from ..runtime.kernels import Kernels, kernel_module

    cat, arch = _with_tuned(cat, spec, arch_name, cand)
    source = render_kernels(cat, spec, arch, lower_variants(cat, spec))
    tag = "tune_" + "_".join(f"{k}_{v}" for k, v in sorted(cand.items())).replace(".", "_")
    path = Path(workdir) / f"{tag}.py"
    path.write_text(source.text)
    name = f"{pkg.__name__}._{tag}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path))
    module.__spec__.loader.exec_module(module)
    base = kernel_module(pkg, arch_name).table
    table = types.ModuleType(f"{name}.knobs_{arch_name}")
    table.MODULE, table.KNOBS = name, dict(source.knobs)
    table.TARGET, table.COMPILE_FLAGS = base.TARGET, base.COMPILE_FLAGS
    table.PASS_CONFIGS = compile_configs(cat.archs[arch_name], source.pass_configs)
    return Kernels(module, table)


def cmd_tune(args):
    """Sweep the schedule space over every workload of the op; keep the candidate with the smallest
    geometric mean time among those that match the reference on all of them (one schedule per op and
    profile must serve every shape, so a candidate tuned on one shape alone can be slow on another)."""
    import math
    import torch
    from ..driver import load_catalog
    from ..runtime.compile import knobs as compile_knobs
    from ..runtime.kernels import substituted
    from ..runtime.ops import arch_for

    from .console import known_arch, known_op

    device = torch.device(args.device)
    cat = load_catalog(args.specs)
    known_op(args.op)
    if args.arch is not None:
        known_arch(cat, args.arch)
    spec = cat.op(args.op)
    pkg = registry.op_package(args.op)
    arch = args.arch or arch_for(device)
    arch_path = cat.archs[arch].path
    arch_doc = yaml.safe_load(arch_path.read_text())
    cases = [_tune_case(pkg, spec, wl, device, arch) for wl in spec.workloads]
    if not cases:
        print(f"{args.op} lists no workloads to tune on", file=sys.stderr)
        return 1
    knobs = compile_knobs(cases[0]["kernels"].module, cases[0]["variant"])
    space = {"tune_space": json.loads(args.space)} if args.space else arch_doc
    from ..schedule.passes import pipeline_for
    from ..schedule.pipeline import resolve
    passes = [n for n, _ in pipeline_for(cat.archs[arch], resolve(spec, cat.archs[arch]))]
    cands = [{}] + list(tune_space(space, knobs, passes))
    if device.type == "cuda":   # build every candidate in parallel worker processes first
        from ..runtime.compile import precompile
        # (candidates with pass parameters are generated in this process, and built when first timed)
        jobs = [(pkg.__name__, arch, c["variant"], c["statics"], k) for c in cases for k in cands
                if not any("." in n for n in k)]
        errors = precompile(jobs, workers=max(2, (os.cpu_count() or 4) - 2))
        print(f"precompiled {len(jobs)} kernels ({len(errors)} failed to build)", flush=True)
    best = None
    workdir = tempfile.mkdtemp(prefix="tkgen-tune-")
    for cand in cands:
        try:
            if any("." in n for n in cand):      # pass parameters: the kernels generated for them
                kernels = candidate_kernels(cat, spec, pkg, arch, cand, workdir)
                with substituted(pkg, arch, kernels):
                    times = [_try_candidate(pkg, c, arch, cand, device, args.reps) for c in cases]
            else:
                times = [_try_candidate(pkg, c, arch, cand, device, args.reps) for c in cases]
        except Exception as e:  # noqa: BLE001  (a candidate that fails to build or to match is dropped)
            print(f"  {cand}: rejected ({type(e).__name__}: {str(e).splitlines()[0][:100]})", flush=True)
            continue
        score = math.exp(sum(math.log(t) for t in times) / len(times))
        each = ", ".join(f"{c['name']} {t:.2f}" for c, t in zip(cases, times))
        print(f"  {cand or 'current'}: {score:.2f} µs geomean ({each})", flush=True)
        if best is None or score < best[0]:
            best = (score, cand)
    if best is None:
        print("no candidate passed", file=sys.stderr)
        return 1
    print(f"best: {best[1] or 'current schedule'} at {best[0]:.2f} µs geomean over {len(cases)} workloads")
    if best[1] and not args.dry_run:
        tuned = _as_schedule(best[1])
        text = arch_path.read_text()
        data = yaml.safe_load(text)
        data.setdefault("tuned", {})[args.op] = tuned
        marker = "\ntuned:"
        head = text.split(marker)[0].rstrip("\n")
        arch_path.write_text(head + "\n" + yaml.safe_dump({"tuned": data["tuned"]}, sort_keys=True,
                                                           default_flow_style=None))
        print(f"wrote the schedule into {arch_path}; run `tkgen generate`")
    return 0


def _as_schedule(cand):
    """A candidate as a schedule layer: `block_<axis>` knobs under `block`, `pass.param` under
    `pass_params`, other knobs as they are."""
    sched, block, params = {}, {}, {}
    for k, v in cand.items():
        if k.startswith("block_"):
            block[k[len("block_"):]] = v
        elif "." in k:
            name, param = k.split(".", 1)
            params.setdefault(name, {})[param] = v
        else:
            sched[k] = v
    if block:
        sched["block"] = block
    if params:
        sched["pass_params"] = params
    return sched


def register(sub):
    p = sub.add_parser("bench", help="time generated kernels against torch, torch.compile and competitors")
    p.add_argument("ops", nargs="*")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--against", default="torch,compile,tilekernels")
    p.add_argument("--out", default="bench-out")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--adapters", default=str(DEFAULT_ADAPTERS), help="competitor adapters (a Python file)")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes that build every implementation first (compiles in parallel)")
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser("tune", help="sweep the profile's schedule space; write the fastest correct one back")
    p.add_argument("op")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--arch", default=None)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--space", default=None,
                   help='candidate knobs and pass parameters as JSON, in place of the profile\'s tune_space: '
                        '\'{"threads": [256, 512], "stream.stages": [2, 3]}\'')
    p.set_defaults(fn=cmd_tune)
