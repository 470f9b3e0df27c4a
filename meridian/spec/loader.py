"""Reading spec files: YAML (several documents per file) to validated models, with every error of
a file reported together, each located at its line and field path, with a "did you mean" hint.

Structure: YAML is composed once to keep node positions (path -> line), loaded for data, then each
document is validated by the model its ``kind`` names. LatencyMap documents are validated first,
since the regions they add are valid in every other document of the same set."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic
import yaml

from meridian import yamlread
from meridian.spec import base, rules
from meridian.spec.cluster import Cluster
from meridian.spec.deployment import ModelDeployment
from meridian.spec.errors import SpecError, SpecIssue
from meridian.spec.latencymap import LatencyMap
from meridian.spec.policy import CapacityPolicy
from meridian.spec.policy import in_use as policy_in_use

Document = ModelDeployment | CapacityPolicy | Cluster | LatencyMap
KINDS: dict[str, type[pydantic.BaseModel]] = {
    "ModelDeployment": ModelDeployment,
    "CapacityPolicy": CapacityPolicy,
    "Cluster": Cluster,
    "LatencyMap": LatencyMap,
}


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A validated document and where it came from."""

    doc: Document
    file: str
    index: int
    line: int
    # YAML path (("spec", "sla", "client_regions", 0)) -> line, for findings made after validation
    lines: Mapping[tuple, int] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def line_of(self, *path: str | int) -> int:
        """The line of the deepest part of ``path`` the document has (the document's line at worst)."""
        for end in range(len(path), -1, -1):
            hit = self.lines.get(tuple(path[:end]))
            if hit is not None:
                return hit
        return self.line

    @property
    def kind(self) -> str:
        return self.doc.kind

    @property
    def name(self) -> str:
        return self.doc.metadata.name


@dataclasses.dataclass
class _Raw:
    file: str
    index: int
    data: Any
    lines: dict[tuple, int]
    line: int


@dataclasses.dataclass(frozen=True)
class SpecSet:
    documents: tuple[Loaded, ...]
    context: base.Context

    def of_kind(self, kind: str) -> list[Document]:
        return [d.doc for d in self.documents if d.kind == kind]


def _index(node: yaml.Node, path: tuple, out: dict[tuple, int]) -> None:
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            k = key.value if isinstance(key, yaml.ScalarNode) else str(key.value)
            out[path + (k,)] = key.start_mark.line + 1
            _index(value, path + (k,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, path + (i,), out)


def yaml_lines(text: str) -> dict[tuple, int]:
    """The line of each YAML path (``("traffic", 0, "peak_rps")``) of a one-document text that
    parses; for files other than specs (scenarios) whose errors should say where."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    out: dict[tuple, int] = {}
    if node is not None:
        _index(node, (), out)
    return out


# Limits on what one spec file may be, so that no input exhausts memory or the stack: YAML's
# anchors and aliases can make a few hundred bytes expand to billions of nodes ("billion laughs"),
# an alias can point at its own ancestor (a cycle), and nesting is parsed recursively. Real specs
# are a few levels deep and a few thousand nodes long; these bounds are far above that.
MAX_FILE_BYTES = 1024 * 1024
MAX_DOCUMENTS = 1000  # per file
MAX_DEPTH = 32  # nesting of mappings and sequences, aliases expanded
MAX_NODES = 200_000  # per file, aliases expanded
MAX_ALIASES = 1000  # per file


def _limit(file: str, line: int | None, message: str) -> tuple[list[_Raw], list[SpecIssue]]:
    return [], [SpecIssue(file, line, "", message)]


def _scan(text: str, file: str) -> list[SpecIssue]:
    """Check size, documents, nesting and aliases on the event stream (which PyYAML parses without
    recursion), before anything is composed."""
    depth = documents = aliases = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                return [SpecIssue(file, line, "", f"nesting deeper than {MAX_DEPTH} levels; no spec field is "
                                                  "nested that deep (an unclosed '[' or '{'?)")]
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > MAX_DOCUMENTS:
                return [SpecIssue(file, line, "", f"more than {MAX_DOCUMENTS} documents in one file; split it")]
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                return [SpecIssue(file, line, "", f"more than {MAX_ALIASES} aliases (*name) in one file")]
    return []


def _expanded(node: yaml.Node, file: str, budget: list[int]) -> SpecIssue | None:
    """Check the composed document with its aliases expanded: at most ``budget[0]`` nodes left in
    the file, at most MAX_DEPTH deep, no alias inside what it names (a cycle). Iterative, and each
    shared node is measured once (memo), so checking costs what the YAML text costs, not what it
    expands to."""
    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        key = id(current)
        if done:
            open_nodes.discard(key)
            children = _children(current)
            count = 1 + sum(memo[id(c)][0] for c in children)
            depth = 1 + max((memo[id(c)][1] for c in children), default=0)
            memo[key] = (min(count, MAX_NODES + 1), depth)
            if depth > MAX_DEPTH:
                return SpecIssue(file, current.start_mark.line + 1, "",
                                 f"nesting deeper than {MAX_DEPTH} levels once aliases (*name) are expanded")
            if count > budget[0]:
                return SpecIssue(file, current.start_mark.line + 1, "",
                                 f"the file expands to more than {MAX_NODES} YAML nodes once aliases (*name) are "
                                 "expanded; anchors and aliases must not multiply the document")
            continue
        if key in memo:
            continue
        if key in open_nodes:
            return SpecIssue(file, current.start_mark.line + 1, "",
                             "an alias (*name) refers to a node that contains it; recursive documents are not specs")
        open_nodes.add(key)
        stack.append((current, True))
        stack.extend((c, False) for c in _children(current) if id(c) not in memo)
    budget[0] -= memo[id(node)][0]
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


# A file with many broken documents is reported up to this many syntax errors (each later
# document is parsed again from its '---', so this also bounds the work a hostile file can cause).
MAX_SYNTAX_ERRORS = 20
_SEPARATOR = re.compile(r"^---(?:[ \t]|$)")


def _resume_line(lines: list[str], after: int, at_least: int) -> int | None:
    """The first 0-based line >= ``at_least`` and > ``after`` that starts a new document ('---')."""
    for number in range(max(after + 1, at_least), len(lines)):
        if _SEPARATOR.match(lines[number]):
            return number
    return None


def _read(text: str, file: str) -> tuple[list[_Raw], list[SpecIssue]]:
    """Every document of a file: a syntax error stops its own document only; parsing resumes at
    the next '---' line, so the documents after it are still validated (and their errors shown).
    Limits (size, nesting, aliases, expansion) stop the whole file."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_FILE_BYTES:
        return _limit(file, None, f"the file is {size} bytes; a spec file may hold at most {MAX_FILE_BYTES} "
                                  "bytes (split it into several files)")
    lines = text.splitlines()
    pairs: list[tuple[yaml.Node | None, Any]] = []  # (None, issue) marks a broken document
    issues: list[SpecIssue] = []
    budget = [MAX_NODES]
    start = 0  # 0-based line where the current segment begins
    while True:
        # earlier lines blanked, not cut, so that marks keep the file's line numbers
        segment = "\n" * start + "\n".join(lines[start:])
        syntax: yaml.YAMLError | None = None
        try:
            problems = _scan(segment, file)
        except yaml.YAMLError:
            problems = []  # met again (at the same place) while composing, after the documents before it
        if problems:
            return [], problems
        loader: yaml.SafeLoader | None = None
        try:
            loader = yaml.SafeLoader(segment)
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                problem = _expanded(node, file, budget)
                if problem is not None:
                    return [], [problem]
                pairs.append((node, loader.construct_document(node)))
        except yaml.YAMLError as exc:
            syntax = exc
        finally:
            if loader is not None:
                loader.dispose()
        if syntax is None:
            break
        found = yamlread.describe(syntax, text)
        pairs.append((None, SpecIssue(file, found.line, "", f"invalid YAML: {found.hint}", 0, found.column,
                                      found.excerpt)))
        mark = getattr(syntax, "problem_mark", None)
        resume = _resume_line(lines, start, mark.line if mark is not None else len(lines))
        if resume is None:
            break
        if sum(1 for n, _ in pairs if n is None) >= MAX_SYNTAX_ERRORS:
            issues.append(SpecIssue(file, resume + 1, "", f"more than {MAX_SYNTAX_ERRORS} YAML syntax errors; "
                                                         "the rest of the file was not read"))
            break
        start = resume
    raws = []
    index = 0
    for node, data in pairs:
        if node is None:
            issues.append(dataclasses.replace(data, document=index))
            index += 1
            continue
        if data is None:
            continue
        lines_of: dict[tuple, int] = {}
        _index(node, (), lines_of)
        for dupe in yamlread.duplicate_keys(node, text):
            issues.append(SpecIssue(file, dupe.line, "", dupe.hint, index, dupe.column, dupe.excerpt))
        raws.append(_Raw(file, index, data, lines_of, node.start_mark.line + 1))
        index += 1
    return raws, issues


def read_documents(text: str, file: str) -> list[Any]:
    """The YAML documents of ``text`` as plain data, under the same limits as validation (for code
    that must look at documents before validating them). Raises SpecError."""
    raws, issues = _read(text, file)
    if issues:
        raise SpecError(issues)
    return [r.data for r in raws]


def _line(raw: _Raw, loc: tuple) -> int:
    for end in range(len(loc), -1, -1):
        hit = raw.lines.get(tuple(loc[:end]))
        if hit is not None:
            return hit
    return raw.line


def _unwrap(annotation: Any) -> Any:
    """The model class inside Optional[...] / Annotated[...], or None."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _unwrap(arg)
            if found is not None:
                return found
        return None
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    if origin in (list, tuple, dict):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]  # tuple[X, ...]: X
        return _unwrap(args[-1]) if args else None
    return None


def _model_at(model: type[pydantic.BaseModel], loc: tuple) -> type[pydantic.BaseModel] | None:
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(part)
        if field is None:
            alias = next((f for f in current.model_fields.values() if f.alias == part), None)
            if alias is None:
                return None
            field = alias
        current = _unwrap(field.annotation)
    return current


def _field_names(model: type[pydantic.BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def unknown_field(model: type[pydantic.BaseModel], loc: tuple) -> str:
    """What to say of a field at ``loc`` that ``model`` does not have: the nearest valid name, or
    the valid names (any pydantic model: the specs, a simulation scenario)."""
    parent = _model_at(model, loc[:-1])
    names = _field_names(parent) if parent else []
    return base.unknown_name("field", str(loc[-1]), names) if names else f"unknown field {loc[-1]!r}"


def _translate(raw: _Raw, model: type[pydantic.BaseModel], err: Mapping[str, Any]) -> list[SpecIssue]:
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return [_issue(raw, loc, unknown_field(model, loc))]
    if kind == "missing":
        return [_issue(raw, loc, f"missing required field {loc[-1]!r}")]
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected", ""))
        given = err.get("input")
        if isinstance(given, str) and expected:
            return [_issue(raw, loc, base.unknown_name("value", given, expected))]
        return [_issue(raw, loc, f"{given!r} is not one of: {', '.join(expected)}")]
    if kind == "value_error":
        text = err["msg"].removeprefix("Value error, ")
        return [_issue(raw, loc + tuple(sub), msg) for sub, msg in rules.split(text)]
    given = err.get("input")
    shown = "" if isinstance(given, (dict, list)) else f" (got {given!r})"
    return [_issue(raw, loc, f"{err['msg']}{shown}")]


def _issue(raw: _Raw, loc: tuple, message: str) -> SpecIssue:
    return SpecIssue(raw.file, _line(raw, loc), ".".join(str(p) for p in loc), message, raw.index)


def _header(raw: _Raw) -> tuple[type[pydantic.BaseModel] | None, list[SpecIssue]]:
    data = raw.data
    if not isinstance(data, dict):
        return None, [SpecIssue(raw.file, raw.line, "", "a document must be a mapping with apiVersion, kind, metadata and spec", raw.index)]
    issues = []
    api = data.get("apiVersion")
    if api != base.API_VERSION:
        msg = "missing apiVersion" if api is None else f"unsupported apiVersion {api!r}"
        issues.append(_issue(raw, ("apiVersion",), f"{msg}; use {base.API_VERSION!r}"))
    kind = data.get("kind")
    if kind is not None and not isinstance(kind, str):
        issues.append(_issue(raw, ("kind",), f"kind must be a string, one of: {', '.join(KINDS)} (got {kind!r})"))
        return None, issues
    if kind not in KINDS:
        msg = "missing kind" if kind is None else base.unknown_name("kind", str(kind), list(KINDS))
        if kind is None:
            msg += f"; one of: {', '.join(KINDS)}"
        issues.append(_issue(raw, ("kind",), msg))
        return None, issues
    return KINDS[kind], issues


def _validate(raw: _Raw, ctx: base.Context) -> tuple[Document | None, list[SpecIssue]]:
    model, issues = _header(raw)
    if model is None:
        return None, issues
    try:
        # model is one of KINDS' values, so the result is a Document.
        doc = typing.cast(Document, model.model_validate(raw.data, context={"meridian": ctx}))
    except pydantic.ValidationError as exc:
        for err in exc.errors(include_url=False):
            issues.extend(_translate(raw, model, err))
        return None, issues
    return (doc if not issues else None), issues


def load_texts(sources: Iterable[tuple[str, str]], context: base.Context | None = None) -> SpecSet:
    """Validate (file name, YAML text) pairs as one set; raise SpecError listing every problem."""
    ctx = context or base.default_context()
    raws: list[_Raw] = []
    issues: list[SpecIssue] = []
    for file, text in sources:
        got, bad = _read(text, file)
        raws.extend(got)
        issues.extend(bad)
    maps = [r for r in raws if isinstance(r.data, dict) and r.data.get("kind") == "LatencyMap"]
    others = [r for r in raws if r not in maps]
    loaded: list[Loaded] = []
    for raw in maps + others:
        doc, bad = _validate(raw, ctx)
        issues.extend(bad)
        if doc is not None:
            loaded.append(Loaded(doc, raw.file, raw.index, raw.line, raw.lines))
            if isinstance(doc, LatencyMap):
                ctx = dataclasses.replace(ctx, latency_map=doc.spec.apply(ctx.latency_map))
    seen: dict[tuple[str, str], Loaded] = {}
    for item in loaded:
        key = (item.kind, item.name)
        if key in seen:
            first = seen[key]
            issues.append(SpecIssue(item.file, item.line, "metadata.name",
                                    f"duplicate {item.kind} {item.name!r} (first at {first.file}:{first.line})",
                                    item.index))
        seen[key] = item
    issues.extend(_references(loaded))
    if issues:
        order = {f: i for i, (f, _) in enumerate(sources)} if isinstance(sources, list) else {}
        issues.sort(key=lambda i: (order.get(i.file, 0), i.file, i.document, i.line or 0))
        raise SpecError(issues)
    loaded.sort(key=lambda d: (d.file, d.index))
    return SpecSet(tuple(loaded), ctx)


def _references(loaded: list[Loaded]) -> list[SpecIssue]:
    """Names one document gives that another of the set must define, where the set has that other
    document (a capacity policy; clusters of the region):

    - a deployment's ``priority_class`` must be one of the policy's classes (a mistyped class used
      to pass and leave the deployment at the default priority, 100, with nothing said);
    - a deployment's ``metadata.team`` must be one of the policy's ``teams`` when it lists any (a
      mistyped team used to pass and escape that team's GPU quotas and budget);
    - a reserved commitment must match a reserved-tier pool of the set's clusters in its cloud and
      region, when the set has clusters there (one matching no pool is paid every hour and serves
      nothing: a mistyped instance type, or a pool declared ``on_demand``)."""
    policy = policy_in_use([item.doc for item in loaded if isinstance(item.doc, CapacityPolicy)])
    classes = sorted(c.name for c in policy.spec.priority_classes) if policy is not None else []
    teams = sorted(t.name for t in policy.spec.teams) if policy is not None else []
    out: list[SpecIssue] = []
    for item in loaded:
        if not isinstance(item.doc, ModelDeployment):
            continue
        if classes and item.doc.spec.priority_class not in classes:
            out.append(SpecIssue(item.file, item.line_of("spec", "priority_class"), "spec.priority_class",
                                 base.unknown_name("priority class", item.doc.spec.priority_class, classes)
                                 + " (the capacity policy's priority_classes)", item.index))
        team = item.doc.metadata.team
        if teams and team is not None and team not in teams:
            out.append(SpecIssue(item.file, item.line_of("metadata", "team"), "metadata.team",
                                 base.unknown_name("team", team, teams)
                                 + " (the capacity policy's teams; a team without limits is listed by name alone)",
                                 item.index))
    out.extend(_commitments(loaded, policy))
    return out


def _commitments(loaded: list[Loaded], policy: CapacityPolicy | None) -> list[SpecIssue]:
    """Reserved commitments of ``policy`` (the one in use; the others are not used) that no
    reserved pool of the set's clusters in their region takes."""
    item = next((i for i in loaded if i.doc is policy), None)
    if item is None or policy is None or not policy.spec.reserved:
        return []
    pools: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for other in loaded:
        if isinstance(other.doc, Cluster):
            s = other.doc.spec
            pools.setdefault((s.cloud, s.region), []).extend(
                (other.name, p.name, p.instance_type) for p in s.pools if p.tier == "reserved")
    out: list[SpecIssue] = []
    for i, r in enumerate(policy.spec.reserved):
        here = pools.get((r.cloud, r.region))
        if here is None or any(t == r.instance_type for _, _, t in here):
            continue
        have = ", ".join(f"{c}/{p} ({t})" for c, p, t in here) or "none"
        out.append(SpecIssue(
            item.file, item.line_of("spec", "reserved", i, "instance_type"), f"spec.reserved.{i}.instance_type",
            f"no reserved-tier pool of {r.instance_type} in {r.cloud}/{r.region} takes this commitment "
            f"({r.nodes} node(s) paid every hour, serving nothing); reserved pools of the clusters there: {have}",
            item.index))
    return out


def load_text(text: str, file: str = "<input>", context: base.Context | None = None) -> SpecSet:
    return load_texts([(file, text)], context)


def expand_paths(paths: Iterable[str | pathlib.Path]) -> list[str]:
    """Paths with each directory replaced by its *.yaml and *.yml files, sorted."""
    out: list[str] = []
    for p in paths:
        path = pathlib.Path(p)
        if path.is_dir():
            out += sorted(str(f) for f in path.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
        else:
            out.append(str(p))
    return out


def load_files(paths: Iterable[str | pathlib.Path], context: base.Context | None = None) -> SpecSet:
    """Read and validate files as one set. Unreadable files are reported like invalid ones."""
    sources: list[tuple[str, str]] = []
    issues: list[SpecIssue] = []
    for path in paths:
        p = pathlib.Path(path)
        try:
            sources.append((str(path), p.read_text()))
        except OSError as exc:
            issues.append(SpecIssue(str(path), None, "", f"cannot read file: {exc.strerror or exc}"))
    try:
        result = load_texts(sources, context)
    except SpecError as exc:
        raise SpecError(issues + exc.issues) from None
    if issues:
        raise SpecError(issues)
    return result


def json_schema() -> dict:
    """JSON Schema for every kind (a discriminated union on ``kind``), for editors."""
    adapter = pydantic.TypeAdapter(typing.Annotated[Document, pydantic.Field(discriminator="kind")])
    schema = adapter.json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Meridian spec (apiVersion meridian/v1)"
    return schema
