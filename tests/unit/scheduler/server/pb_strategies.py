"""Hypothesis strategies for arbitrary protobuf messages, built from their descriptors: every field
may be set to anything its type allows on the wire (unknown enum numbers, NaN and infinite
doubles, empty and odd strings, extreme integers, out-of-range timestamps), so handlers are fed what
a buggy or hostile peer could send, not only what our own senders produce."""

from __future__ import annotations

from google.protobuf import descriptor as d
from hypothesis import strategies as st

_INT_RANGES = {
    d.FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1), d.FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    d.FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1), d.FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    d.FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1), d.FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    d.FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1), d.FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    d.FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1), d.FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
TEXT = st.one_of(st.just(""), st.text(max_size=24), st.sampled_from(["l4", "c1", "c2", "r1", "a/b", " ", "\x00"]))


def _scalar(field: d.FieldDescriptor) -> st.SearchStrategy:
    t = field.type
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.one_of(st.integers(-3, 100).filter(lambda v: lo <= v <= hi), st.integers(lo, hi))
    if t in (d.FieldDescriptor.TYPE_DOUBLE, d.FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=64 if t == d.FieldDescriptor.TYPE_DOUBLE else 32)
    if t == d.FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == d.FieldDescriptor.TYPE_STRING:
        return TEXT
    if t == d.FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=16)
    if t == d.FieldDescriptor.TYPE_ENUM:
        return st.integers(-2, 12)  # proto3 enums are open: numbers nobody defined arrive too
    raise TypeError(f"no strategy for field type {t}")


def _repeated(field: d.FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == d.FieldDescriptor.LABEL_REPEATED


def message(cls, depth: int = 3) -> st.SearchStrategy:
    """Messages of ``cls`` with any subset of fields (and at most one member of each oneof) set."""
    desc = cls.DESCRIPTOR

    @st.composite
    def build(draw):
        msg = cls()
        oneof_members = {f.name for o in desc.oneofs for f in o.fields}
        chosen = {o.name: draw(st.sampled_from([None, *[f.name for f in o.fields]])) for o in desc.oneofs}
        for field in desc.fields:
            if field.name in oneof_members and field.name not in chosen.values():
                continue
            if field.name not in oneof_members and not draw(st.booleans()):
                continue
            repeated = _repeated(field)
            if field.type == d.FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
                key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
                getattr(msg, field.name).update(draw(st.dictionaries(_scalar(key), _scalar(value), max_size=3)))
            elif field.type == d.FieldDescriptor.TYPE_MESSAGE:
                if depth <= 0:
                    continue
                sub = message(field.message_type._concrete_class, depth - 1)
                if repeated:
                    for item in draw(st.lists(sub, max_size=3)):
                        getattr(msg, field.name).add().CopyFrom(item)
                else:
                    getattr(msg, field.name).CopyFrom(draw(sub))
            elif repeated:
                getattr(msg, field.name).extend(draw(st.lists(_scalar(field), max_size=3)))
            else:
                setattr(msg, field.name, draw(_scalar(field)))
        return msg

    return build()
