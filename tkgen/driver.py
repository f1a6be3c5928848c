"""The driver: specs in, a checked catalog out, the one path that `validate`, `generate`, `bench` and the
tests take to read specs.

`load_catalog` reads a specs directory (tkgen/spec) and checks that every operator's stages mean something
(tkgen/lower/stages); `validate_files` checks single files against a catalog as `generate` reads them:
each variant lowered once (tkgen/lower), scheduled, and its modules rendered and audited in memory
(tkgen/codegen). So a file that validates generates, and its modules import.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from .lower.stages import typecheck
from .lower.stages.base import STAGES
from .spec import expr as E
from .spec import formats as F
from .spec import model as M
from .spec.autograd import plan
from .spec.checks import check_profiles
from .spec.loader import Document, SpecError, read
from .spec.safety import short


def check_stages(spec, elements, scales, layouts):
    """The stage library checks what the compute stages mean. Each variant is lowered later, once, by
    `generate` or `validate` (tkgen/lower/lowering.py: lower_variants), which report a stage the lowering
    refuses at its line."""
    typecheck(spec, elements, scales)
    check_unused_values(spec.doc_ref, spec)


def check_unused_values(doc, spec):
    """A statement none of whose values is stored or read later (a top-k result never used) is an error:
    nothing of it would be generated, so it is most likely a mistake. Checked after the stage library's
    type rules (check_stages), whose errors say more about a statement that also goes unused."""
    used = set(spec.outputs)
    for st in reversed(spec.stages):
        acts = isinstance(st.value, E.Call) and getattr(STAGES.get(st.value.fn), "acts", False)
        if not acts and not any(t in used for t in st.targets):
            names = ", ".join(st.targets)
            raise doc.error(("compute", st.index), f"{names} {'is' if len(st.targets) == 1 else 'are'} computed "
                                                   "but never stored nor read by a later statement")
        used |= E.names(st.value)


def load_catalog(root, lenient=False) -> M.Catalog:
    """Every spec file under `root`, read and checked (`lenient`:
    operator files that fail are left out; tkgen/spec/model.py: load_catalog)."""
    return M.load_catalog(root, check_op=check_stages, lenient=lenient)


def build_op(doc: Document, elements, scales, arch_names, layouts=None):
    """One operator of a read document, built and checked as `load_catalog` does."""
    return M.build_op(doc, elements, scales, arch_names, layouts, check_stages)


def validate_files(paths, root=None, progress=None):
    """Check spec files; returns a list of SpecErrors (empty when all are valid), the first of each file.

    A file is checked as `generate` reads it, against the catalog of `root` (formats, archs and the other
    operators): an operator is built, its backward block planned, and its modules rendered in memory and
    audited; a format or profile is checked with the catalog's other files and its generated shared
    modules are rendered and audited. So a file that validates generates, and its modules import.
    `progress`: called with (files checked, path) after each file."""
    errors = []
    root = Path(root) if root else None
    # the context each file is checked in: the other files of `root`, those that are valid (an error of
    # another operator file is that file's, reported when it is validated itself)
    base = load_catalog(root, lenient=True) if root else None
    for i, p in enumerate(paths, 1):
        try:
            validate_document(read(p), base)
        except SpecError as e:
            errors.append(e)
        if progress is not None:
            progress(i, str(p))
    return errors


def validate_document(doc: Document, base: Optional[M.Catalog]):
    """Raise the SpecError of one read document, checked in the context of the catalog `base`."""
    if doc.kind == "format":
        fmt = M.build_format(doc)
        if base is not None:
            _render_checked(doc, _with_format(base, fmt, doc), ops=())
        return
    if doc.kind == "arch":
        arch = M.build_arch(doc)
        _check_passes(doc, arch)
        if base is not None:
            catalog = dataclasses.replace(base, archs={**base.archs, arch.name: arch},
                                          documents={**base.documents, arch.path: doc})
            check_profiles(catalog)
            _render_checked(doc, catalog, ops=())
        return
    if base is None:
        raise SpecError(doc.path, 1, 1, (), "operator specs need the formats and archs of a specs directory")
    spec = build_op(doc, base.elements, base.scales, set(base.archs), base.layouts)
    # the file stands for its op: it replaces the catalog's op of that name (an edited copy of a spec)
    others = {n: o for n, o in base.ops.items() if o.path.resolve() != doc.path.resolve() and n != spec.name}
    catalog = dataclasses.replace(base, ops={**others, spec.name: spec},
                                  documents={**base.documents, doc.path: doc})
    plan(catalog, spec)
    _render_checked(doc, catalog, ops=(spec.name,))


def _check_passes(doc, arch):
    """A profile's `passes:` names registered passes with parameters they take."""
    from .schedule.passes import pipeline_for
    try:
        pipeline_for(arch)
    except ValueError as e:
        raise doc.error(("passes",), str(e)) from None


def _with_format(base, fmt, doc):
    kind = "elements" if isinstance(fmt, F.ElementFormat) else "layouts" if isinstance(fmt, F.Layout) else "scales"
    documents = {**base.documents, doc.path: doc}
    tables = {"elements": base.elements, "scales": base.scales, "layouts": base.layouts}
    tables[kind] = {**tables[kind], fmt.name: fmt}
    tables["scales"] = M.link_scales(tables["scales"], tables["elements"], documents)     # against this file too
    return dataclasses.replace(base, **tables, documents=documents)


def _render_checked(doc, catalog, ops):
    """Render the shared modules and those of `ops` in memory and audit them, as `generate` would. A failure
    that no check above caught is reported against the file rather than as a traceback."""
    from .codegen.generate import render_modules
    from .schedule.pipeline import verifying
    from .spec.safety import AuditError, audit_all
    try:
        with verifying():       # the kernel IR checked after every schedule pass (tkgen/ir/verify.py)
            audit_all(render_modules(catalog, ops))
    except SpecError:
        raise
    except AuditError as e:
        raise SpecError(doc.path, 1, 1, (), f"the generated code would be rejected: {e}") from None
    except Exception as e:   # noqa: BLE001 - what generate would raise, reported as an error of this file
        raise SpecError(doc.path, 1, 1, (), f"generating code from this file fails: {type(e).__name__}: "
                                            f"{short(str(e), 200)}") from None
