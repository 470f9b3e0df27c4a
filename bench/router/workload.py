"""The prefix-heavy workload of ``bench.router``'s ``prefix`` scenario, built from Mooncake's trace,
and the offline "ideal router" it is compared with.

Prompts: each Mooncake block hash id maps deterministically to ``BLOCK_TOKENS`` (512) emulator
tokens of text (one-token words " xxxx" drawn from a hash of the id), and a request's prompt is its
blocks' text cut to its ``input_length`` tokens, so requests whose hash lists share a leading run
share exactly that prompt prefix, as in the trace, and differ from the first word of the first
block where they differ.

The ideal router replays the same requests, in order, over caches with the emulator's own prefix
cache (``runtime_adapter.emulator.radix``, same capacity, same LRU eviction, same token counts)
and always picks the replica whose cache holds the longest prefix of the prompt. Which replica gets
a request no cache favours is a rule of its own, and the reference is the best of four
(``best_ideal``): equal prefixes go to the replica sent the fewest prompt tokens or the fewest
requests, each with and without the balance the benchmark holds the live routers to (taking the
request keeps the replica within ``IDEAL_SPREAD`` above an even share of the requests so far).
Without that balance a prefix every prompt shares (a system prompt, as in Mooncake's conversation
trace, whose every request starts with block 0) is first cached on one replica, which then always
holds the longest prefix: every request went there and the replay used one cache of four
(conversation trace, first 2,000 requests, 347k-token caches: 3.85% of prompt tokens reused,
against 6.30% balanced, 4.44% round robin, and 5.4-5.8% for both live routers). It has no load,
so every prefill finishes before the next arrival and the cache never shares the KV budget with
running requests: a reference for what a router can reuse on these caches (greedy, not an
optimum: a live router may beat it), not a latency figure."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from collections.abc import Iterable, Sequence

from meridian import traces
from runtime_adapter.emulator import radix, tokens

BLOCK_TOKENS = traces.mooncake.BLOCK_TOKENS
# The ideal router keeps every replica within this share above an even split of the requests so far
# (the prefix scenario's target for the live routers: requests per replica within +-15% of even).
IDEAL_SPREAD = 0.15
_WORDS = tuple(f" {i:04x}" for i in range(1 << 16))  # 65,536 one-token words
# The chat template's tokens around a user message whose first word joins the newline before it.
_HEAD_TEXT, _TAIL_TEXT = tokens.chat_prompt([{"role": "user", "content": ""}]).split("\n", 1)
_HEAD, _TAIL = tuple(tokens.tokenize(_HEAD_TEXT)), tuple(tokens.tokenize(_TAIL_TEXT))


@dataclasses.dataclass(frozen=True)
class TraceRequest:
    """One request of the replay: when to send it (wall seconds from the start), its prompt."""

    index: int
    send_s: float
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...]


class Prompts:
    """Prompt text per request from its block hashes (the most recent blocks' words memoised)."""

    def __init__(self, memo_blocks: int = 8192) -> None:
        self._blocks: collections.OrderedDict[int, list[str]] = collections.OrderedDict()
        self._memo_blocks = memo_blocks

    def block_words(self, hash_id: int) -> list[str]:
        """The 512 one-token words of block ``hash_id`` (the same on every call and every run)."""
        words = self._blocks.get(hash_id)
        if words is None:
            digest = hashlib.shake_128(b"meridian-mooncake-block-%d" % hash_id).digest(2 * BLOCK_TOKENS)
            words = [_WORDS[i] for i in memoryview(digest).cast("H")]
            self._blocks[hash_id] = words
            if len(self._blocks) > self._memo_blocks:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(hash_id)
        return words

    @staticmethod
    def messages(text: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": text}]

    def words(self, req: TraceRequest) -> list[str]:
        out: list[str] = []
        left = req.input_tokens
        for h in req.block_hashes:
            words = self.block_words(h)
            out.extend(words if left >= BLOCK_TOKENS else words[:left])
            left -= BLOCK_TOKENS
        return out

    def text(self, req: TraceRequest) -> str:
        """The user message: ``input_tokens`` one-token words, block by block."""
        return "".join(self.words(req))

    def emulator_tokens(self, req: TraceRequest) -> list[str]:
        """The prompt's tokens exactly as the emulator tokenizes the chat request (template
        included), built from the words without running the tokenizer (a test checks they agree):
        the template's opening tokens, the first word joined to the newline before it, the other
        words one token each, the template's closing tokens."""
        words = self.words(req)
        return [*_HEAD, "\n" + words[0], *words[1:], *_TAIL]


def window(requests: Iterable[traces.Request], count: int, time_scale: float,
           max_input_tokens: int, skip: int = 0) -> list[TraceRequest]:
    """``count`` requests of the trace with at most ``max_input_tokens`` prompt tokens, after the
    first ``skip`` such requests, arrivals from the first one kept divided by ``time_scale`` (4:
    four times the recorded rate)."""
    out: list[TraceRequest] = []
    start_s: float | None = None
    for r in requests:
        if len(out) >= count:
            break
        if r.input_tokens > max_input_tokens:
            continue
        if skip > 0:
            skip -= 1
            continue
        if start_s is None:
            start_s = r.arrival_s
        out.append(TraceRequest(len(out), (r.arrival_s - start_s) / time_scale, r.input_tokens, r.output_tokens,
                                r.block_hashes))
    return out


@dataclasses.dataclass(frozen=True)
class IdealResult:
    cached_tokens: int
    prompt_tokens: int
    requests_per_replica: tuple[int, ...]
    prompt_tokens_per_replica: tuple[int, ...]
    rule: str = ""  # which of ``IDEAL_RULES`` gave it (``best_ideal``)

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _blocks(matched_tokens: int) -> int:
    return matched_tokens if matched_tokens >= BLOCK_TOKENS else 0


class _Replay:
    """One greedy replay's caches and counts (``ideal_replay``), fed one request at a time."""

    def __init__(self, replicas: int, capacity_tokens: int, spread: float | None, tie: str):
        if tie not in ("tokens", "requests"):
            raise ValueError(f"tie={tie!r}: expected 'tokens' or 'requests'")
        self.caches = [radix.PrefixCache(capacity_tokens) for _ in range(replicas)]
        self.sent = [0] * replicas
        self.prompt_per = [0] * replicas
        self.fewest = self.prompt_per if tie == "tokens" else self.sent
        self.spread = spread
        self.cached = self.total = 0
        self.rule = f"{'balanced' if spread is not None else 'unbalanced'}, ties by {tie}"

    def take(self, n: int, toks: list[str]) -> None:
        """Route request number ``n`` (from 0), of tokens ``toks``."""
        caches, sent, fewest = self.caches, self.sent, self.fewest
        everyone = range(len(caches))
        allowed = everyone
        if self.spread is not None:
            limit = max(1.0, (1.0 + self.spread) * (n + 1) / len(caches))
            allowed = [i for i in everyone if sent[i] + 1 <= limit] or everyone
        # A match shorter than a block (the chat template every prompt starts with) is no reason to
        # pick a replica: counting it would send every new conversation to the first one.
        best = max(allowed, key=lambda i: (_blocks(caches[i].peek(toks)), -fewest[i], -i))
        hit = min(caches[best].match(toks), len(toks) - 1)  # the last token is always computed
        caches[best].insert(toks)
        sent[best] += 1
        self.prompt_per[best] += len(toks)
        self.cached += hit
        self.total += len(toks)

    def result(self) -> IdealResult:
        return IdealResult(self.cached, self.total, tuple(self.sent), tuple(self.prompt_per), self.rule)


def ideal_replay(requests: Sequence[TraceRequest], prompts: Prompts, replicas: int,
                 capacity_tokens: int, spread: float | None = IDEAL_SPREAD, tie: str = "tokens") -> IdealResult:
    """Replay ``requests`` over ``replicas`` emulator caches, each to the longest cached prefix
    among the replicas it leaves within ``spread`` above an even share of the requests so far
    (None: any replica); equal prefixes go to the replica sent the fewest prompt tokens (``tie``
    "tokens") or requests ("requests"), then the lowest index."""
    return _replay_all(requests, prompts, [_Replay(replicas, capacity_tokens, spread, tie)])[0]


def _replay_all(requests: Sequence[TraceRequest], prompts: Prompts, replays: list[_Replay]) -> list[IdealResult]:
    """Feed every request to each of ``replays`` in step, tokenizing it once (building the token
    list is most of a replay's time on long prompts)."""
    for n, req in enumerate(requests):
        toks = prompts.emulator_tokens(req)
        for replay in replays:
            replay.take(n, toks)
    return [replay.result() for replay in replays]


# The greedy replays ``best_ideal`` takes the best of: which replica a tie goes to decides which
# histories a cache keeps, and that moves the greedy's hit rate by up to a tenth either way
# (first 2,000 requests at 347k-token caches: Mooncake's synthetic trace 5.03-5.25%, its
# conversation trace 3.85-6.30%), so one rule alone is a weak reference.
IDEAL_RULES: tuple[tuple[float | None, str], ...] = (
    (IDEAL_SPREAD, "tokens"), (IDEAL_SPREAD, "requests"), (None, "tokens"), (None, "requests"))


def best_ideal(requests: Sequence[TraceRequest], prompts: Prompts, replicas: int,
               capacity_tokens: int) -> IdealResult:
    """The highest hit rate of the ``IDEAL_RULES`` replays, run in one pass (the first rule on a tie)."""
    results = _replay_all(requests, prompts,
                          [_Replay(replicas, capacity_tokens, spread, tie) for spread, tie in IDEAL_RULES])
    return results[max(range(len(results)), key=lambda k: (results[k].hit_rate, -k))]
