"""Stage 1 of the pipeline: read spec files safely and check them against the JSON Schemas.

Every YAML node keeps its source position, so that any later error (schema, expression, semantics) can
name the file, the line and column, and the field path.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import jsonschema
import yaml

SCHEMA_DIR = Path(__file__).parent / "schema"
KINDS = ("op", "format", "arch")


class SpecError(ValueError):
    """An error in a spec file that a person can act on: where it is, which field, what was expected."""

    def __init__(self, path, line, col, field_path, message):
        self.path, self.line, self.col, self.field_path, self.message = path, line, col, field_path, message
        fp = "/".join(str(p) for p in field_path) or "(top level)"
        super().__init__(f"{path}:{line}:{col}: {fp}: {message}")


@dataclass
class Document:
    """A parsed spec file: its data, its kind, its hash, and the position of every node."""

    path: Path
    kind: str
    data: dict
    sha256: str
    marks: dict = field(repr=False)

    def error(self, field_path, message, col_offset: int = 0) -> SpecError:
        """Build a SpecError pointing at the deepest node of `field_path` that exists in the file."""
        fp = tuple(field_path)
        for n in range(len(fp), -1, -1):
            if fp[:n] in self.marks:
                line, col = self.marks[fp[:n]]
                return SpecError(self.path, line, col + (col_offset if n == len(fp) else 0), fp, message)
        return SpecError(self.path, 1, 1, fp, message)


def _collect_marks(node, path, marks):
    """Record the (line, column) of every node, 1-based, keyed by its field path."""
    marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for k, v in node.value:
            key = str(k.value)
            if key in seen:
                raise SpecError("", k.start_mark.line + 1, k.start_mark.column + 1, path + (key,), "duplicate key")
            seen.add(key)
            _collect_marks(v, path + (key,), marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _collect_marks(v, path + (i,), marks)


@lru_cache(maxsize=None)
def schema(kind: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text())


def kind_of(data) -> str:
    for kind in KINDS:
        if isinstance(data, dict) and kind in data:
            return kind
    raise KeyError


def read(path) -> Document:
    """Parse and schema-check one spec file. Raises SpecError."""
    path = Path(path)
    text = path.read_text()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise SpecError(path, line, col, (), f"not valid YAML: {getattr(e, 'problem', e)}") from None
    if node is None:
        raise SpecError(path, 1, 1, (), "empty file; expected a mapping with `op:`, `format:` or `arch:`")
    marks: dict = {}
    try:
        _collect_marks(node, (), marks)
    except SpecError as e:
        raise SpecError(path, e.line, e.col, e.field_path, e.message) from None
    data = yaml.safe_load(text)
    try:
        kind = kind_of(data)
    except KeyError:
        raise SpecError(path, 1, 1, (), "expected a mapping with one of the keys `op`, `format`, `arch`") from None
    doc = Document(path, kind, data, hashlib.sha256(text.encode()).hexdigest(), marks)
    validator = jsonschema.Draft202012Validator(schema(kind))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        raise doc.error(tuple(err.absolute_path), _explain(err))
    return doc


def _explain(err) -> str:
    """Turn a jsonschema error into the sentence 'expected ..., found ...'."""
    v = err.validator
    if v == "required":
        return f"missing field; expected {err.message.split(' is a required')[0]}"
    if v == "additionalProperties":
        return f"unknown field: {err.message.split('(')[1].rstrip(')') if '(' in err.message else err.message}"
    if v == "enum":
        return f"expected one of {err.validator_value}, found {err.instance!r}"
    if v == "type":
        return f"expected {err.validator_value}, found {type(err.instance).__name__} {err.instance!r}"
    if v == "pattern":
        return f"expected a name matching {err.validator_value}, found {err.instance!r}"
    if v == "oneOf" and all(set(alt) == {"required"} and len(alt["required"]) == 1 for alt in err.validator_value):
        fields = [alt["required"][0] for alt in err.validator_value]
        given = [f for f in fields if isinstance(err.instance, dict) and f in err.instance]
        return f"expected exactly one of the fields {', '.join(fields)}, found " + (", ".join(given) or "none")
    desc = err.schema.get("description")
    return f"{err.message}" + (f" (expected: {desc})" if desc else "")
