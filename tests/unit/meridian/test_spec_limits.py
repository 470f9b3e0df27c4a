"""The spec loader's bounds refuse hostile YAML with a located error and keep ordinary anchors working."""

from __future__ import annotations

import pathlib

import pytest

from meridian import spec
from meridian.spec import loader

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_anchors_and_merge_keys_within_the_limits_still_load():
    """Anchors and merge keys (`<<: *defaults`) used the ordinary way still load, and the examples
    validate as before."""
    data = spec.loader.read_documents("base: &b {a: 1, b: 2}\nother:\n  <<: *b\n  c: 3\n", "m.yaml")
    assert data == [{"base": {"a": 1, "b": 2}, "other": {"a": 1, "b": 2, "c": 3}}]
    assert len(spec.load_files(sorted((ROOT / "examples").glob("*.yaml"))).documents) == 14


def test_an_alias_chain_deeper_than_the_limit_is_refused_where_it_expands():
    """Nesting built from aliases counts as nesting: each alias level adds the depth it names."""
    text = "l0: &l0 [1]\n" + "".join(f"l{i}: &l{i} [*l{i - 1}]\n" for i in range(1, loader.MAX_DEPTH + 2))
    with pytest.raises(spec.SpecError, match=f"deeper than {loader.MAX_DEPTH} levels once aliases"):
        spec.load_text(text, "chain.yaml")


def test_the_node_budget_is_per_file_across_documents():
    """Documents each under the node budget but over it together are refused at the one that tips it."""
    doc = "k: &k [" + ", ".join(["1"] * 1000) + "]\nv: [" + ", ".join(["*k"] * 60) + "]\n"
    with pytest.raises(spec.SpecError) as err:
        spec.load_text("---\n".join([doc] * 4), "many.yaml")
    assert "expands to more than" in str(err.value) and err.value.issues[0].file == "many.yaml"
