"""Stage 1 of the pipeline: read spec files safely and check them against the JSON Schemas.

A spec is data. The file is parsed once, into YAML events, and the data is built from those events here,
iteratively and within bounds (tkgen/spec/safety.py): no tags (`!!python/...` or any other), a file of at most
MAX_FILE_BYTES, nesting of at most MAX_YAML_DEPTH, at most MAX_ALIAS_NODES nodes reached through aliases
(which are shared, never copied, so a billion laughs stops after a few events), numbers of at most
MAX_NUMBER_CHARS characters, no NaN and no overflow to infinity. Each is a SpecError at its line and column.

Every node and every mapping key keeps its source position, so that any later error (schema, expression,
semantics) can name the file, the line and column, and the field path.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import jsonschema
import yaml

from . import safety
from .safety import short, listing

SCHEMA_DIR = Path(__file__).parent / "schema"
KINDS = ("op", "format", "arch")


class SpecError(ValueError):
    """An error in a spec file that a person can act on: where it is, which field, what was expected."""

    def __init__(self, path, line, col, field_path, message):
        self.path, self.line, self.col, self.field_path, self.message = path, line, col, field_path, message
        fp = "/".join(safety.comment(p) for p in field_path) or "(top level)"   # keys are data too
        super().__init__(f"{path}:{line}:{col}: {fp}: {message}")


@dataclass
class Document:
    """A parsed spec file: its data, its kind, its hash, and the position of every node."""

    path: Path
    kind: str
    data: dict
    sha256: str
    marks: dict = field(repr=False)
    key_marks: dict = field(repr=False, default_factory=dict)   # field path -> position of its key

    def key_error(self, field_path, message) -> SpecError:
        """A SpecError at the key of `field_path` (a bad or unknown key), else at its value."""
        fp = tuple(field_path)
        if fp in self.key_marks:
            line, col = self.key_marks[fp]
            return SpecError(self.path, line, col, fp, message)
        return self.error(fp, message)

    def error(self, field_path, message, col_offset: int = 0) -> SpecError:
        """Build a SpecError pointing at the deepest node of `field_path` that exists in the file."""
        fp = tuple(field_path)
        for n in range(len(fp), -1, -1):
            if fp[:n] in self.marks:
                line, col = self.marks[fp[:n]]
                return SpecError(self.path, line, col + (col_offset if n == len(fp) else 0), fp, message)
        return SpecError(self.path, 1, 1, fp, message)


@lru_cache(maxsize=None)
def schema(kind: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text())


@lru_cache(maxsize=None)
def _schemas():
    """The three schemas by their $id, so that one may refer to another (a profile's tuned schedules)."""
    from referencing import Registry, Resource
    return Registry().with_resources((schema(k)["$id"], Resource.from_contents(schema(k))) for k in KINDS)


def kind_of(data) -> str:
    for kind in KINDS:
        if isinstance(data, dict) and kind in data:
            return kind
    raise KeyError




_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_TAG = "tag:yaml.org,2002:"
_INFINITIES = {".inf", "+.inf", "-.inf"}


class _Fail(Exception):
    """An error at an event's position, turned into a SpecError by `read`."""

    def __init__(self, mark, path, message):
        self.line, self.col = mark.line + 1, mark.column + 1
        self.path, self.message = path, message


class _Frame:
    """A mapping or sequence being built: its value, path, pending key, anchor and node count."""

    def __init__(self, value, path, anchor):
        self.value, self.path, self.anchor, self.nodes = value, path, anchor, 1
        self.key = None                 # mappings: the key whose value comes next (None: a key comes next)


class _Builder:
    """Plain data (dicts, lists, str, int, float, bool, None) and positions from a YAML event stream."""

    def __init__(self):
        self.marks, self.key_marks = {}, {}
        self.anchors = {}               # anchor -> (value, node count)
        self.open_anchors = set()
        self.nodes = self.alias_nodes = 0
        self.stack = []
        self.documents = 0
        self.root = None

    def build(self, events):
        for event in events:
            kind = type(event)
            if kind is yaml.DocumentStartEvent:
                self.documents += 1
                if self.documents > 1:
                    raise _Fail(event.start_mark, (), "one document per file; found a second `---`")
            elif kind in (yaml.MappingStartEvent, yaml.SequenceStartEvent):
                self.start(event, {} if kind is yaml.MappingStartEvent else [])
            elif kind in (yaml.MappingEndEvent, yaml.SequenceEndEvent):
                self.end()
            elif kind is yaml.ScalarEvent:
                self.scalar(event)
            elif kind is yaml.AliasEvent:
                self.alias(event)
        return self.root

    # where a node goes ---------------------------------------------------------------------------------
    def place(self, event):
        """The path of the node that `event` starts, or None when it is a mapping key."""
        if not self.stack:
            return ()
        top = self.stack[-1]
        if isinstance(top.value, list):
            return top.path + (len(top.value),)
        return None if top.key is None else top.path + (top.key,)

    def count(self, event, n, path):
        self.nodes += n
        if self.nodes > safety.MAX_YAML_NODES:
            raise _Fail(event.start_mark, path, f"more than {safety.MAX_YAML_NODES} YAML nodes in one file")

    def attach(self, value, nodes):
        """Put a finished node into its parent (or make it the document)."""
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        top.nodes += nodes
        if isinstance(top.value, list):
            top.value.append(value)
        else:
            top.value[top.key] = value
            top.key = None

    @staticmethod
    def check_tag(event, path):
        if event.tag is not None:
            raise _Fail(event.start_mark, path or (), f"YAML tags are not part of the spec language; found "
                                                      f"{short(event.tag)}")

    # events --------------------------------------------------------------------------------------------
    def start(self, event, value):
        path = self.place(event)
        if path is None:
            raise _Fail(event.start_mark, self.stack[-1].path, "a key must be a plain name, not a mapping or list")
        self.check_tag(event, path)
        if len(self.stack) >= safety.MAX_YAML_DEPTH:
            raise _Fail(event.start_mark, path, f"nested deeper than {safety.MAX_YAML_DEPTH} levels")
        self.count(event, 1, path)
        self.marks[path] = (event.start_mark.line + 1, event.start_mark.column + 1)
        if event.anchor is not None:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Frame(value, path, event.anchor))

    def end(self):
        frame = self.stack.pop()
        if frame.anchor is not None:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = (frame.value, frame.nodes)
        self.attach(frame.value, frame.nodes)

    def scalar(self, event):
        path = self.place(event)
        mark = (event.start_mark.line + 1, event.start_mark.column + 1)
        self.check_tag(event, path if path is not None else self.stack[-1].path)
        value = _scalar_value(event, path if path is not None else self.stack[-1].path)
        if path is None:                 # a mapping key
            self.key(event, value, mark)
            return
        self.count(event, 1, path)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, 1)
        self.marks[path] = mark
        self.attach(value, 1)

    def key(self, event, value, mark):
        top = self.stack[-1]
        if not isinstance(value, str):
            raise _Fail(event.start_mark, top.path, f"a key must be a name; found {type(value).__name__} "
                                                    f"{short(value)} (quote it if it is meant as text)")
        if value in top.value:
            raise _Fail(event.start_mark, top.path + (value,), "duplicate key")
        top.key = value
        self.key_marks[top.path + (value,)] = mark

    def alias(self, event):
        path = self.place(event)
        if path is None:
            raise _Fail(event.start_mark, self.stack[-1].path, "a key must be a plain name, not an alias")
        if event.anchor in self.open_anchors:
            raise _Fail(event.start_mark, path, f"alias *{event.anchor} inside its own anchor (a recursive structure)")
        if event.anchor not in self.anchors:
            raise _Fail(event.start_mark, path, f"unknown anchor {short(event.anchor)}")
        value, nodes = self.anchors[event.anchor]
        self.alias_nodes += nodes
        if self.alias_nodes > safety.MAX_ALIAS_NODES:
            raise _Fail(event.start_mark, path, f"aliases expand to more than {safety.MAX_ALIAS_NODES} nodes")
        self.count(event, nodes, path)
        mark = (event.start_mark.line + 1, event.start_mark.column + 1)
        self.marks[path] = mark
        self.attach(value, nodes)     # shared, not copied: the bound above is the whole cost


def _scalar_value(event, path):
    """The value of a plain or quoted scalar, as YAML 1.1 (PyYAML's safe loader) reads it, within bounds."""
    text = event.value
    tag = _RESOLVER.resolve(yaml.ScalarNode, text, event.implicit)
    if tag == _TAG + "str":
        return text
    if tag == _TAG + "null":
        return None
    if tag == _TAG + "bool":
        return _CONSTRUCTOR.bool_values[text.lower()]
    if tag in (_TAG + "int", _TAG + "float"):
        if len(text) > safety.MAX_NUMBER_CHARS:
            raise _Fail(event.start_mark, path, f"a number has at most {safety.MAX_NUMBER_CHARS} characters; "
                                                f"found one of {len(text)}")
        node = yaml.ScalarNode(tag, text)
        if tag == _TAG + "int":
            value = _CONSTRUCTOR.construct_yaml_int(node)
            if abs(value) > safety.MAX_INT:
                raise _Fail(event.start_mark, path, f"integer {short(text)} is out of range (|n| <= 2**63 - 1)")
            return value
        value = _CONSTRUCTOR.construct_yaml_float(node)
        if value != value:
            raise _Fail(event.start_mark, path, "NaN is not a value a spec can hold")
        if value in (float("inf"), float("-inf")) and text.lower() not in _INFINITIES:
            raise _Fail(event.start_mark, path, f"{short(text)} is out of a float's range (write .inf for infinity)")
        return value
    if tag == _TAG + "timestamp":
        raise _Fail(event.start_mark, path, f"{short(text)} reads as a date; quote it if it is text")
    raise _Fail(event.start_mark, path, f"{short(text)} is not a plain value (YAML {tag.rsplit(':', 1)[-1]} "
                                        "is not part of the spec language)")


def _read_text(path: Path) -> str:
    """The file's text, refused past MAX_FILE_BYTES before more than that is read."""
    with open(path, "rb") as f:
        raw = f.read(safety.MAX_FILE_BYTES + 1)
    if len(raw) > safety.MAX_FILE_BYTES:
        raise SpecError(path, 1, 1, (), f"the file is larger than {safety.MAX_FILE_BYTES // 1024} KiB; a spec is "
                                        "a few KB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(path, 1, 1, (), f"not UTF-8 text (byte {e.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")       # as read_text's universal newlines


def parse(path, text):
    """(data, marks, key marks) of one YAML document. Raises SpecError."""
    builder = _Builder()
    try:
        data = builder.build(yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except _Fail as e:
        raise SpecError(path, e.line, e.col, e.path, e.message) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(e, "problem", None) or str(e)
        if "nesting depth" in problem:
            # libyaml 0.2.6 (PyYAML 6.0.4's wheels) limits nesting itself, while it scans ahead of the events
            # the builder counts: the same refusal as the builder's, for a deeper nest
            raise SpecError(path, line, col, (), f"nested deeper than {safety.MAX_YAML_DEPTH} levels") from None
        raise SpecError(path, line, col, (), f"not valid YAML: {problem}") from None
    return data, builder.marks, builder.key_marks


def read(path) -> Document:
    """Parse and schema-check one spec file. Raises SpecError."""
    path = Path(path)
    text = _read_text(path)
    data, marks, key_marks = parse(path, text)
    if data is None:
        raise SpecError(path, 1, 1, (), "empty file; expected a mapping with `op:`, `format:` or `arch:`")
    try:
        kind = kind_of(data)
    except KeyError:
        raise SpecError(path, 1, 1, (), "expected a mapping with one of the keys `op`, `format`, `arch`") from None
    doc = Document(path, kind, data, hashlib.sha256(text.encode()).hexdigest(), marks, key_marks)
    validator = jsonschema.Draft202012Validator(schema(kind), registry=_schemas())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise _schema_error(doc, jsonschema.exceptions.best_match(errors))
    return doc


def _schema_error(doc, err) -> SpecError:
    """A jsonschema error at its own position: an unknown field or a bad key at that key."""
    where = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        props = err.schema.get("properties", {})
        patterns = err.schema.get("patternProperties", {})
        unknown = [k for k in err.instance if k not in props and not any(re.search(p, k) for p in patterns)]
        if unknown:
            expected = f"; expected one of {listing(sorted(props))}" if props else ""
            return doc.key_error(where + (unknown[0],), f"unknown field {unknown[0]!r}{expected}")
    if "propertyNames" in err.relative_schema_path and isinstance(err.instance, str):
        return doc.key_error(where + (err.instance,), f"bad key: {_explain(err)}")
    return doc.error(where, _explain(err))


def _kind(schema) -> str:
    """A schema of one value in words: `an integer >= 1`, `one of auto, all`."""
    if "enum" in schema:
        return f"one of {listing(schema['enum'])}"
    words = {"integer": "an integer", "boolean": "a boolean", "string": "a string", "number": "a number",
             "object": "a mapping", "array": "a list"}
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    text = " or ".join(words.get(k, k) for k in kinds)
    if "minimum" in schema and "maximum" in schema:
        return f"{text} in [{schema['minimum']}, {schema['maximum']}]"
    if "minimum" in schema or "maximum" in schema:
        return f"{text} {'>=' if 'minimum' in schema else '<='} {schema.get('minimum', schema.get('maximum'))}"
    return text


def _explain(err) -> str:
    """Turn a jsonschema error into the sentence 'expected ..., found ...' (values shown cut short)."""
    v = err.validator
    if v == "required":
        return f"missing field {err.message.split(' is a required')[0]}"
    if v == "additionalProperties":
        return f"unknown field: {short(err.message, 200)}"
    if v == "enum":
        return f"expected one of {listing(err.validator_value)}, found {short(err.instance)}"
    if v == "type":
        return f"expected {err.validator_value}, found {type(err.instance).__name__} {short(err.instance)}"
    if v == "pattern":
        return f"expected a name matching {err.validator_value}, found {short(err.instance)}"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[v]
        return f"expected a number {bound} {err.validator_value}, found {short(err.instance)}"
    if v in ("minItems", "maxItems", "minProperties", "maxProperties"):
        what = "entries" if "Items" in v else "fields"
        most = "at least" if v.startswith("min") else "at most"
        return f"expected {most} {err.validator_value} {what}, found {len(err.instance)}"
    if v == "oneOf" and all("type" in alt or "enum" in alt for alt in err.validator_value):
        return f"expected {' or '.join(map(_kind, err.validator_value))}, found {short(err.instance)}"
    if v == "oneOf" and all(set(alt) == {"required"} and len(alt["required"]) == 1 for alt in err.validator_value):
        fields = [alt["required"][0] for alt in err.validator_value]
        given = [f for f in fields if isinstance(err.instance, dict) and f in err.instance]
        return f"expected exactly one of the fields {', '.join(fields)}, found " + (", ".join(given) or "none")
    if v == "anyOf" and all(set(alt) == {"required"} and len(alt["required"]) == 1 for alt in err.validator_value):
        fields = [alt["required"][0] for alt in err.validator_value]     # none of them given
        return f"missing field {fields[0]!r}" + (f" (or {' or '.join(map(repr, fields[1:]))})" if fields[1:] else "")
    desc = err.schema.get("description")
    return short(err.message, 200) + (f" (expected: {desc})" if desc else "")
