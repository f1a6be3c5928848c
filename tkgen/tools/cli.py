"""The `tkgen` command: list, show, validate, generate, fuzz (and bench, tune where they exist)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .. import registry
from ..spec.loader import SpecError
from ..spec.safety import AuditError
from .console import UsageError, did_you_mean, existing_path, known_op, progress_printer  # noqa: F401


def _catalog(args):
    from ..driver import load_catalog
    return load_catalog(args.specs)


def cmd_list(args):
    cat = _catalog(args)
    width = max((len(n) for n in cat.ops), default=4)
    for name in sorted(cat.ops):
        spec = cat.ops[name]
        variants = sum(1 for _ in spec.variants())
        print(f"{name:<{width}}  {spec.family:<6} {variants} variant(s)  {' '.join(spec.doc.split())[:70]}")
    print(f"\nformats: {', '.join(sorted(cat.elements))} (element); {', '.join(sorted(cat.scales))} (scale)")
    print(f"archs:   {', '.join(sorted(cat.archs))}")
    print(f"\nspecs:     {Path(args.specs).resolve()}\ngenerated: {registry.generated_dir().resolve()}")
    return 0


def cmd_show(args):
    from ..spec.pyexpr import py_expr
    cat = _catalog(args)
    if args.op not in cat.ops:
        raise UsageError(f"unknown op {args.op!r}{did_you_mean(args.op, cat.ops)}")
    spec = cat.op(args.op)
    if args.passes:
        return _show_passes(cat, spec, args)
    print(f"{spec.name} ({spec.family}) — {spec.path}")
    print("  " + " ".join(spec.doc.split()))
    print("params:")
    for p in spec.params.values():
        if p.kind == "float":
            allowed = "float or None" if p.optional else "float"
        else:
            allowed = list(p.choices) if p.choices else f"[{', '.join(py_expr(r) for r in p.range)}]"
        default = "required" if p.default is None and not p.optional else f"default {p.default!r}"
        print(f"  {p.name}: {allowed}, {default} — {p.doc}")
    print("dims:")
    for d in spec.dims.values():
        rules = "; ".join(t for t, _ in d.require)
        print(f"  {d.name}: {'dynamic' if d.dynamic else 'static'}{', ' + rules if rules else ''} — {d.doc}")
    for role, tensors in (("inputs", spec.inputs), ("outputs", spec.outputs)):
        print(f"{role}:")
        for t in tensors.values():
            kind = (" | ".join(t.dtypes) or f"format {t.format_ref or t.scale_ref}") + (f", at {t.at}" if t.at else "")
            exact = f", exact {t.exact}" if role == "outputs" else ""
            print(f"  {t.name}: [{', '.join(t.shape_text)}] {kind}{exact}")
    print("compute:")
    for st in spec.stages:
        print(f"  {st.text}")
    gen = registry.generated_dir() / spec.family / spec.name
    print(f"generated ({gen}):")
    for f in sorted(gen.glob("*.py")):
        print(f"  {f.name}")
    return 0


def _show_passes(cat, spec, args):
    """The kernel IR of one variant on one profile: naive, then after each pass of the profile's pipeline."""
    from ..codegen.generate import naive_modules
    from ..ir import show
    from ..schedule import passes as PS
    from ..schedule import pipeline as S
    arch_name = args.arch or ("sm90" if "sm90" in cat.archs else sorted(cat.archs)[0])
    if arch_name not in cat.archs:
        raise UsageError(f"unknown arch {arch_name!r}{did_you_mean(arch_name, cat.archs)}")
    arch = cat.archs[arch_name]
    naive = naive_modules(cat, spec)
    names = [spec.variant_name(v) for v, _, _ in naive]
    want = args.variant or names[0]
    if want not in names:
        raise UsageError(f"unknown variant {want!r} of {spec.name} (variants: {', '.join(names)})")
    variant, program, module = naive[names.index(want)]
    trace = PS.Trace()
    S.apply(module, cat, arch, S.resolve(spec, arch), verify=True, trace=trace)
    print(f"# {spec.name}, variant {want}, profile {arch.name}: {len(trace.steps)} passes")
    last = show.module(module)
    print("\n== naive\n" + last)
    for name, params, m in trace.steps:
        args_ = "".join(f" {k}={v!r}" for k, v in params.items())
        text = show.module(m)           # a pass that rewrote nothing the text form shows is left out
        print(f"\n== {name}{args_}" + (" (unchanged)" if text == last else "\n" + text))
        last = text
    return 0


def cmd_validate(args):
    from ..driver import validate_files
    paths = []
    for p in args.paths:
        p = existing_path(p, "spec file or directory", args.specs)
        paths += sorted(p.rglob("*.yaml")) if p.is_dir() else [p]
    try:
        errors = validate_files(paths, args.specs, progress=progress_printer("validated", len(paths)))
    except SpecError as e:
        errors = [e]
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print(f"{len(paths)} spec file(s) valid")
    return 1 if errors else 0


def cmd_generate(args):
    from ..codegen.generate import write
    if args.out is None:
        if args.specs_given and "generated" not in registry.project_settings(Path.cwd().resolve()) \
                and not os.environ.get("TKGEN_GENERATED"):
            print("tkgen --specs DIR generate: say where the code goes (--out DIR, $TKGEN_GENERATED or "
                  "`generated` under [tool.tkgen] in pyproject.toml)", file=sys.stderr)
            return 2
        args.out = str(registry.generated_dir())
    try:
        cat = _catalog(args)
    except SpecError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        changed, stale = write(cat, args.out, check_only=args.check,
                               progress=progress_printer("rendered", len(cat.ops)))
    except AuditError as e:
        print(f"{e}\nnothing was written", file=sys.stderr)
        return 1
    if args.check:
        if changed or stale:
            for p in changed:
                print(f"out of date: {p}", file=sys.stderr)
            for p in stale:
                print(f"stale (no spec): {p}", file=sys.stderr)
            print("generated/ disagrees with specs/: run `tkgen generate`", file=sys.stderr)
            return 1
        print("generated/ is in sync with specs/")
        return 0
    for p in changed:
        print(f"wrote {p}")
    for p in stale:
        print(f"removed {p}")
    print(f"{len(changed)} file(s) written, {len(stale)} removed")
    return 0


def cmd_lower(args):
    """The device source one CUDA profile's kernel lowers to, for one case, without a GPU: the case given
    (`--case`, as a fuzz failure prints it), else the simplest case the op's strategy draws."""
    import importlib

    from hypothesis import HealthCheck, find, settings

    from ..testing import check as C

    known_op(args.op)
    archs = C.cuda_archs()
    if args.arch not in archs:
        raise UsageError(f"unknown CUDA arch {args.arch!r}{did_you_mean(args.arch, archs)} "
                         f"(CUDA archs: {', '.join(archs)})")
    if args.case:
        case = json.loads(args.case)
    else:
        strategies = importlib.import_module(registry.op_package(args.op).__name__ + ".strategies")
        case = find(strategies.cases(), lambda c: True,
                    settings=settings(database=None, suppress_health_check=list(HealthCheck)))
    source = C.lower_cuda(args.op, case, archs=(args.arch,))[args.arch]
    text = f"// tkgen lower {args.op} --arch {args.arch} --case '{json.dumps(case, sort_keys=True)}'\n{source}"
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out} ({len(source.splitlines())} lines of {args.arch} source)")
    else:
        print(text)
    return 0


def cmd_fuzz(args):
    from ..testing import check as C

    registry.use_generated(args.generated)
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("no CUDA device here", file=sys.stderr)
            return 2
    if args.all == bool(args.ops):
        print("tkgen fuzz: name ops, or --all", file=sys.stderr)
        return 2
    if args.replay and len(args.ops) != 1:
        print("tkgen fuzz: --replay replays a case of one op; name it", file=sys.stderr)
        return 2
    for op in args.ops:
        known_op(op)
    if args.all:          # the campaign's own progress line says what runs: no line per compiled kernel
        os.environ.setdefault("TKGEN_QUIET", "1")
    if args.replay:
        case = json.loads(args.replay)
        try:
            C.run_case(args.ops[0], case, args.device)
        except AssertionError as e:
            print(f"FAIL: {e}")
            return 1
        print("replayed case passes")
        return 0
    names = sorted(registry.op_modules()) if args.all else list(dict.fromkeys(args.ops))
    for name in names:
        registry.op_package(name)          # an unknown op fails here, before any example runs
    if args.resume and not args.summary:
        print("tkgen fuzz: --resume continues the campaign of a --summary file; name one", file=sys.stderr)
        return 2
    found = resumed(args) if args.resume else (None, {})
    if found is None:
        return 2
    file_seed, done = found
    seed = next(s for s in (args.seed, file_seed, int(time.time() * 1000) % (1 << 32)) if s is not None)
    results = {name: r for name, r in done.items() if name in names}
    todo = [name for name in names if name not in results]
    if results:
        print(f"resuming {args.summary}: {len(results)} op(s) done, {len(todo)} to go (seed {seed})")

    def record(name, result):
        results[name] = result
        if args.summary:            # after every op, so that a campaign cut short resumes where it stopped
            write_summary(args, seed, {n: results[n] for n in names if n in results})

    if args.jobs > 1 and len(todo) > 1:
        fuzz_in_workers(todo, args, seed, record)
    else:
        progress = Progress(len(todo) * args.examples)
        for name in todo:
            record(name, fuzz_op(name, args.examples, args.device, seed, progress))
        progress.done()
    results = {n: results[n] for n in names}
    failed = [n for n, r in results.items() if r["failure"]]
    for name in failed:
        f = results[name]["failure"]
        print(f"\n{name} FAILED after {results[name]['examples']} examples. Shrunk counterexample:\n"
              f"{json.dumps(f['case'], indent=1)}\n\n{f['error']}\n\nreplay with:\n  {f['replay']}")
    total = sum(r["examples"] for r in results.values())
    seconds = sum(r["seconds"] for r in results.values())
    for name, r in results.items():
        if not r["failure"]:
            print(f"{name}: {r['examples']} examples on {args.device}, kernel and reference agree "
                  f"({r['per_second']:.1f} examples/s)")
    print(f"{total} examples of {len(names)} op(s) in {seconds:.0f} s ({total / max(seconds, 1e-9):.1f} examples/s); "
          f"{len(failed)} failed")
    if args.summary:
        write_summary(args, seed, results)
        print(f"summary: {args.summary}")
    return 1 if failed else 0


def write_summary(args, seed, results):
    """The campaign's JSON summary (written whole, then renamed into place: a kill never leaves half a file)."""
    total = sum(r["examples"] for r in results.values())
    seconds = sum(r["seconds"] for r in results.values())
    text = json.dumps({"device": args.device, "seed": seed, "examples_per_op": args.examples, "examples": total,
                       "seconds": seconds, "per_second": total / max(seconds, 1e-9), "ops": results}, indent=1)
    path = Path(args.summary)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def resumed(args):
    """(the summary file's seed, the ops it holds), or (None, {}) when there is no file yet; None (after a
    line on stderr) when the file is another campaign's: another device, number of examples or seed."""
    path = Path(args.summary)
    if not path.exists():
        return None, {}
    data = json.loads(path.read_text())
    for key, mine in (("device", args.device), ("examples_per_op", args.examples)):
        if data.get(key) != mine:
            print(f"tkgen fuzz: {args.summary} is a campaign with {key}={data.get(key)!r}, not {mine!r}: "
                  "resume it with the same options, or name another summary", file=sys.stderr)
            return None
    if args.seed is not None and data.get("seed") != args.seed:
        print(f"tkgen fuzz: {args.summary} was drawn with seed {data.get('seed')}, not {args.seed}",
              file=sys.stderr)
        return None
    return data["seed"], data["ops"]


def fuzz_in_workers(names, args, seed, record):
    """Ops fuzzed in `args.jobs` processes, one op at a time each; a line per op as it ends."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    import multiprocessing
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(fuzz_one_in_worker, name, args.examples, args.device, seed, args.generated): name
                   for name in names}
        for i, future in enumerate(as_completed(futures), 1):
            name = futures[future]
            result = future.result()
            record(name, result)
            print(f"[{i}/{len(names)} ops, {time.time() - t0:.0f} s] {name}: {result['examples']} examples, "
                  f"{'FAILED' if result['failure'] else 'agree'}", flush=True)


def fuzz_one_in_worker(name, examples, device, seed, generated):
    os.environ.setdefault("TKGEN_QUIET", "1")
    registry.use_generated(generated)
    return fuzz_op(name, examples, device, seed, Progress(examples, quiet=True))


class Progress:
    """One progress line for a whole campaign: examples done of all, the op, examples per second."""

    def __init__(self, total, quiet=False):
        self.total, self.n, self.t0, self.shown = total, 0, time.time(), 0.0
        self.tty = sys.stdout.isatty()
        self.quiet = quiet

    def step(self, op):
        self.n += 1
        now = time.time()
        if self.quiet:
            return
        if now - self.shown < (0.5 if self.tty else 10.0) and self.n < self.total:
            return
        self.shown = now
        rate = self.n / max(now - self.t0, 1e-9)
        width = 30
        bar = "#" * int(width * self.n / self.total)
        line = (f"[{bar:<{width}}] {self.n}/{self.total} examples, {rate:.1f}/s, "
                f"ETA {(self.total - self.n) / max(rate, 1e-9):.0f} s, {op}")
        print(f"\r{line:<110}" if self.tty else line, end="" if self.tty else "\n", flush=True)

    def done(self):
        if self.tty:
            print()


def fuzz_op(name, examples, device, seed, progress):
    """Property-test one op's kernel against its reference on `examples` drawn cases; the shrunk
    counterexample of a failure. Compiled specializations stay cached in the process for the next op."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as seeded
    from ..testing import check as C
    pkg = registry.op_package(name)
    strategies = __import__(pkg.__name__ + ".strategies", fromlist=["cases"])
    state = {"n": 0, "last_fail": None, "kernels": set(), "reuses": 0}
    from ..runtime.compile import STATS

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @seeded(seed)
    @given(strategies.cases())
    def prop(case):
        state["n"] += 1
        state["kernels"].add(json.dumps(C.specialization(pkg.OP, case)))
        progress.step(name)
        builds = STATS["builds"]
        try:
            C.run_case(name, case, device)
            state["reuses"] += STATS["builds"] == builds
        except Exception:
            state["last_fail"] = case
            raise

    before = dict(STATS)
    t = time.time()
    failure = None
    try:
        prop()
    except Exception as e:  # noqa: BLE001  (reported with its case; the campaign goes on)
        case = state["last_fail"]
        failure = {"case": case, "error": f"{type(e).__name__}: {e}",
                   "replay": C.replay_command(name, case, device) if case is not None else None}
        if case is None:            # the failure is not a case's: the strategy or the harness itself broke
            failure["error"] = f"FAILED before any case ran: {failure['error']}"
    seconds = time.time() - t
    progress.n += max(0, examples - state["n"])      # examples hypothesis skipped (a small search space)
    # `specializations`: the distinct kernels the examples needed; `builds`: those this process built (from
    # TileLang's disk cache or compiled; an earlier op of the campaign may have built some), in `build_seconds`;
    # `cache_hits`: examples that needed no build (every kernel they ran was built already in the process)
    return {"examples": state["n"], "seconds": seconds, "per_second": state["n"] / max(seconds, 1e-9),
            "specializations": len(state["kernels"]), "builds": STATS["builds"] - before["builds"],
            "build_seconds": round(STATS["build_seconds"] - before["build_seconds"], 3),
            "cache_hits": state["reuses"], "failure": failure}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tkgen", description=__doc__)
    ap.add_argument("--debug", action="store_true",
                    help="let errors raise with their traceback (by default: one line on stderr)")
    ap.add_argument("--specs", default=None, help=f"the specs directory (default: {registry.specs_dir()}; see "
                    "tkgen/registry.py for $TKGEN_SPECS and [tool.tkgen] in pyproject.toml)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="operators, formats and architectures").set_defaults(fn=cmd_list)
    p = sub.add_parser("show", help="an operator's spec in brief and its generated files")
    p.add_argument("op")
    p.add_argument("--passes", action="store_true",
                   help="the kernel IR after each schedule pass instead (tkgen/schedule/passes.py)")
    p.add_argument("--arch", default=None, help="with --passes: the profile (default: sm90)")
    p.add_argument("--variant", default=None, help="with --passes: the variant (default: the first)")
    p.set_defaults(fn=cmd_show)
    p = sub.add_parser("validate", help="check spec files (schema, names, expressions, stages)")
    p.add_argument("paths", nargs="+")
    p.set_defaults(fn=cmd_validate)
    p = sub.add_parser("generate", help="write generated/ from specs/")
    p.add_argument("--out", default=None, help=f"where the code goes (default: {registry.generated_dir()})")
    p.add_argument("--check", action="store_true", help="fail, naming files, if generated/ is out of date")
    p.set_defaults(fn=cmd_generate)
    p = sub.add_parser("fuzz", help="property-test operators' kernels (or every one's) against their references")
    p.add_argument("ops", nargs="*", metavar="op")
    p.add_argument("--all", action="store_true", help="a campaign over every op, one progress line")
    p.add_argument("--summary", default=None, help="write a JSON summary (examples, seconds, failures per op); "
                   "rewritten after each op")
    p.add_argument("--resume", action="store_true", help="with --summary: skip the ops the summary already holds, "
                   "drawing with its seed (a campaign cut short goes on where it stopped)")
    p.add_argument("--jobs", type=int, default=1, help="fuzz this many ops at once, each in a process of its own")
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--seed", type=int, default=None, help="seed of the search (the same seed draws the same cases)")
    p.add_argument("--replay", help="a case printed by an earlier failure (JSON)")
    p.add_argument("--generated", default=None, help="generated directory (default: the repository's)")
    p.set_defaults(fn=cmd_fuzz)
    p = sub.add_parser("lower", help="print (or write) the CUDA source of an op's kernel, no GPU needed")
    p.add_argument("op")
    p.add_argument("--arch", default="sm90", help="a CUDA profile (default: sm90)")
    p.add_argument("--case", default=None, help="the case (JSON, as fuzz prints it; default: the simplest one drawn)")
    p.add_argument("--out", default=None, help="write the source to this file instead of printing it")
    p.set_defaults(fn=cmd_lower)
    try:
        from . import bench_cli
        bench_cli.register(sub)
    except ImportError:
        pass
    args = ap.parse_args(argv)
    args.specs_given = args.specs is not None
    args.specs = args.specs or str(registry.specs_dir())
    try:
        if args.specs_given:
            existing_path(args.specs, "specs directory")
        return args.fn(args)
    except BrokenPipeError:           # `tkgen list | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())    # no second error at exit's flush
        return 0
    except Exception as e:
        if args.debug:
            raise
        if isinstance(e, (UsageError, FileNotFoundError)):
            print(f"tkgen {args.cmd}: {e}", file=sys.stderr)
            return 2
        # anything else is a failure of the command, not of its arguments: one line, the traceback on --debug
        print(f"tkgen {args.cmd}: {type(e).__name__}: {e} (tkgen --debug {args.cmd} ... shows the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
