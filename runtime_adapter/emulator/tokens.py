"""Approximate, consistent tokenization for the emulator.

A token is optional leading whitespace plus up to four non-space characters (about 3-4 characters
per token on English text, like BPE tokenizers). Prompts, prefix-cache keys and usage counts all
use this one function, so the counts the emulator reports agree with each other. Output text is
deterministic filler made of one-token words, so re-tokenizing an answer gives back its count."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

_TOKEN_RE = re.compile(r"\s*\S{1,4}")
# One-token words (leading space + at most four letters).
FILLER_WORDS: tuple[str, ...] = tuple(f" {w}" for w in (
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "as", "with", "was", "by", "at", "this",
    "from", "or", "an", "be", "are", "not", "but", "can", "all", "one", "has", "more", "new", "some", "time",
    "will", "when", "they", "its", "also", "into", "than", "then", "each", "many", "most", "such", "much",
    "work", "data", "load", "path", "node", "cost", "rate", "next", "fast", "slow", "step", "plan", "pool",
    "sure", "well", "here", "very", "just", "good"))
VOCAB_OFFSET = 1000  # output token ids: VOCAB_OFFSET + index into FILLER_WORDS
EOS_TOKEN_ID = 2

Token = str | int


def tokenize(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


def count(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


def message_text(content: Any) -> str:
    """Text of a chat message's content: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return " ".join(parts)


def chat_prompt(messages: Sequence[dict[str, Any]]) -> str:
    """A chat template: each message framed by role markers, then the assistant's turn."""
    out = [f"<|{m.get('role', 'user')}|>\n{message_text(m.get('content'))}<|end|>\n" for m in messages]
    out.append("<|assistant|>\n")
    return "".join(out)


def seed_of(tokens: Sequence[Token]) -> int:
    """A stable seed from the prompt (its last tokens), so an answer is reproducible."""
    tail = "\x00".join(str(t) for t in tokens[-64:])
    return int.from_bytes(hashlib.blake2b(tail.encode(), digest_size=4).digest(), "little")


def natural_length(seed: int, mean_tokens: int) -> int:
    """The answer length when max_tokens does not cut it: 0.5x..1.5x the mean, from the seed."""
    return max(1, int(mean_tokens * (0.5 + (seed % 1000) / 1000.0)))


def output_index(seed: int, i: int) -> int:
    return (seed + i * 7) % len(FILLER_WORDS)


def output_text(seed: int, start: int, end: int) -> str:
    return "".join(FILLER_WORDS[output_index(seed, i)] for i in range(start, end))


def output_ids(seed: int, start: int, end: int) -> list[int]:
    return [VOCAB_OFFSET + output_index(seed, i) for i in range(start, end)]


def embedding(tokens: Sequence[Token], dims: int) -> list[float]:
    """A deterministic unit-length vector for the input."""
    digest = hashlib.blake2b("\x00".join(str(t) for t in tokens).encode(), digest_size=64).digest()
    raw = [((digest[i % 64] ^ (i * 31 % 251)) / 127.5) - 1.0 for i in range(dims)]
    norm = sum(v * v for v in raw) ** 0.5 or 1.0
    return [v / norm for v in raw]
