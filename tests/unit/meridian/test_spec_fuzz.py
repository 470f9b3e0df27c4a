"""Fuzzing the spec parser and validator: any text, any YAML data, and any one-field mutation of the
examples either load or raise SpecError whose every issue names its file (and a line or field), never
another exception. Crashes found (a recursive alias, deep nesting: RecursionError) are regression
tests in test_spec_limits.py."""

from __future__ import annotations

import copy
import pathlib

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meridian import spec

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = [d for p in sorted((ROOT / "examples").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["L4", "H100", "aws", "na-east", "us-east-1", "-1", ""]))
DATA = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=20)


def check(text: str) -> None:
    try:
        spec.load_text(text, "fuzz.yaml")
    except spec.SpecError as exc:
        assert exc.issues and all(i.file == "fuzz.yaml" for i in exc.issues)
        assert all(i.message for i in exc.issues)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_any_text_loads_or_raises_spec_error(text):
    """Arbitrary text (broken YAML included) never raises anything but SpecError."""
    check(text)


@settings(max_examples=300, deadline=None)
@given(data=DATA)
def test_any_yaml_data_loads_or_raises_spec_error(data):
    """Any YAML document (of any shape) never raises anything but SpecError."""
    check(yaml.safe_dump(data))


def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_one_field_mutations_of_the_examples_are_reported_by_field(data):
    """Replacing any one value of an example document with anything gives SpecError issues that each
    name a file and a line or a field path (or the document still validates)."""
    doc = copy.deepcopy(data.draw(st.sampled_from(EXAMPLES)))
    path = data.draw(st.sampled_from(list(paths(doc))[1:]))
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = data.draw(DATA)
    try:
        spec.load_text(yaml.safe_dump(doc), "mutant.yaml")
    except spec.SpecError as exc:
        assert all(i.file == "mutant.yaml" and (i.line or i.path) for i in exc.issues), exc.issues
