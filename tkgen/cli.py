"""The `tkgen` command: list, show, validate, generate, fuzz (and bench, tune where they exist)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import registry
from .loader import SpecError
from .safety import AuditError


def _catalog(args):
    from .model import load_catalog
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
    return 0


def cmd_show(args):
    from .pyexpr import py_expr
    cat = _catalog(args)
    spec = cat.op(args.op)
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


def cmd_validate(args):
    from .model import validate_files
    paths = []
    for p in args.paths:
        p = Path(p)
        paths += sorted(p.rglob("*.yaml")) if p.is_dir() else [p]
    try:
        errors = validate_files(paths, args.specs)
    except SpecError as e:
        errors = [e]
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print(f"{len(paths)} spec file(s) valid")
    return 1 if errors else 0


def cmd_generate(args):
    from .generate import write
    try:
        cat = _catalog(args)
    except SpecError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        changed, stale = write(cat, args.out, check_only=args.check)
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


def cmd_fuzz(args):
    from hypothesis import HealthCheck, given, seed, settings
    from .testing import check as C

    registry.use_generated(args.generated)
    pkg = registry.op_package(args.op)
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("no CUDA device here", file=sys.stderr)
            return 2
    if args.replay:
        case = json.loads(args.replay)
        try:
            C.run_case(args.op, case, args.device)
        except AssertionError as e:
            print(f"FAIL: {e}")
            return 1
        print("replayed case passes")
        return 0
    strategies = __import__(pkg.__name__ + ".strategies", fromlist=["cases"])
    state = {"n": 0, "last_fail": None, "t0": time.time(), "shown": 0.0}
    tty = sys.stdout.isatty()

    @settings(max_examples=args.examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @seed(args.seed if args.seed is not None else int(time.time() * 1000) % (1 << 32))
    @given(strategies.cases())
    def prop(case):
        state["n"] += 1
        now = time.time()
        if now - state["shown"] > (0.5 if tty else 10.0):
            state["shown"] = now
            print(f"{chr(13) if tty else ''}{args.op} on {args.device}: {state['n']} examples, "
                  f"{now - state['t0']:.0f} s", end="" if tty else "\n", flush=True)
        try:
            C.run_case(args.op, case, args.device)
        except Exception:
            state["last_fail"] = case
            raise

    try:
        prop()
    except Exception as e:
        print()
        case = state["last_fail"]
        if case is None:   # the failure is not a case's: the strategy or the harness itself broke
            print(f"FAILED before any case ran: {type(e).__name__}: {e}")
            return 1
        print(f"FAILED after {state['n']} examples. Shrunk counterexample:\n{json.dumps(case, indent=1)}")
        print(f"\n{e}\n\nreplay with:\n  {C.replay_command(args.op, case, args.device)}")
        return 1
    print(f"\n{args.op}: {state['n']} examples on {args.device}, kernel and reference agree")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tkgen", description=__doc__)
    ap.add_argument("--specs", default=str(registry.specs_dir()), help="the specs directory (default: %(default)s)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="operators, formats and architectures").set_defaults(fn=cmd_list)
    p = sub.add_parser("show", help="an operator's spec in brief and its generated files")
    p.add_argument("op")
    p.set_defaults(fn=cmd_show)
    p = sub.add_parser("validate", help="check spec files (schema, names, expressions, stages)")
    p.add_argument("paths", nargs="+")
    p.set_defaults(fn=cmd_validate)
    p = sub.add_parser("generate", help="write generated/ from specs/")
    p.add_argument("--out", default=str(registry.generated_dir()))
    p.add_argument("--check", action="store_true", help="fail, naming files, if generated/ is out of date")
    p.set_defaults(fn=cmd_generate)
    p = sub.add_parser("fuzz", help="property-test one operator's kernel against its reference")
    p.add_argument("op")
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--seed", type=int, default=None, help="seed of the search (the same seed draws the same cases)")
    p.add_argument("--replay", help="a case printed by an earlier failure (JSON)")
    p.add_argument("--generated", default=None, help="generated directory (default: the repository's)")
    p.set_defaults(fn=cmd_fuzz)
    try:
        from . import bench_cli
        bench_cli.register(sub)
    except ImportError:
        pass
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
