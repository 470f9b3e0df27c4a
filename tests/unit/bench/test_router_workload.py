"""The prefix benchmark's workload: prompts built from Mooncake block hashes share exactly the
prefixes the trace records, token counts agree with the emulator's, and the offline ideal router
reuses the longest cached prefix."""

from __future__ import annotations

from bench.router import prefix, workload
from meridian import traces
from runtime_adapter.emulator import tokens


def _req(index: int, hashes: tuple[int, ...], input_tokens: int | None = None) -> workload.TraceRequest:
    n = input_tokens if input_tokens is not None else 512 * len(hashes)
    return workload.TraceRequest(index, float(index), n, 4, hashes)


def _emulator_count(p: workload.Prompts, r: workload.TraceRequest) -> list[str]:
    return tokens.tokenize(tokens.chat_prompt(p.messages(p.text(r))))


def test_shared_hash_runs_are_shared_prompt_prefixes():
    """Two requests sharing their first two block hashes share exactly 2 x 512 prompt words and
    differ from the first word of the third block on."""
    p = workload.Prompts()
    a, b = _req(0, (7, 8, 9)), _req(1, (7, 8, 10))
    wa, wb = p.words(a), p.words(b)
    assert len(wa) == len(wb) == 3 * 512
    assert wa[:1024] == wb[:1024] and wa[1024] != wb[1024]
    assert p.words(_req(2, (11,)))[0] != wa[0]  # different first block: different from the first word
    assert workload.Prompts().words(a) == wa  # deterministic across instances and runs


def test_prompt_tokens_match_the_emulators_tokenizer():
    """The prompt is the trace's input length in emulator tokens (plus the chat template), and the
    token list the ideal replay uses is exactly the emulator's tokenization of the request."""
    p = workload.Prompts()
    for r in workload.window(traces.read("mooncake"), 25, 1.0, 200_000):
        expected = _emulator_count(p, r)
        assert p.emulator_tokens(r) == expected
        assert len(expected) == r.input_tokens + len(workload._HEAD) + len(workload._TAIL)
    partial = _req(0, (3, 4), input_tokens=600)
    assert p.emulator_tokens(partial) == _emulator_count(p, partial) and len(p.words(partial)) == 600


def test_window_scales_arrivals_and_skips_overlong_requests():
    """The window keeps the first N requests that fit, with arrivals divided by the time scale."""
    recorded = [traces.Request(0.0, 100, 1, (1,)), traces.Request(2.0, 5000, 1, tuple(range(10))),
                traces.Request(4.0, 600, 1, (1, 2)), traces.Request(8.0, 10, 1, (3,))]
    w = workload.window(recorded, 2, 4.0, 1000)
    assert [(r.index, r.send_s, r.input_tokens) for r in w] == [(0, 0.0, 100), (1, 1.0, 600)]


def test_ideal_router_follows_the_longest_cached_prefix():
    """The ideal sends a follow-up to the replica holding its prefix and counts the reused tokens as
    the emulator does (template and shared words; at least the last token computed)."""
    p = workload.Prompts()
    first, other, follow_up = _req(0, (1, 2, 3)), _req(1, (4, 5)), _req(2, (1, 2, 3, 6))
    result = workload.ideal_replay([first, other, follow_up], p, 2, 1_000_000)
    assert result.requests_per_replica in ((2, 1), (1, 2))
    assert result.cached_tokens == len(workload._HEAD) + 3 * 512
    assert result.prompt_tokens == sum(len(p.emulator_tokens(r)) for r in (first, other, follow_up))
    again = workload.ideal_replay([first, first], p, 2, 1_000_000, spread=None)
    assert again.cached_tokens == len(p.emulator_tokens(first)) - 1


def test_ideal_router_spreads_a_prefix_every_prompt_shares():
    """Every prompt opens with the same block (a system prompt, as in Mooncake's conversation
    trace). Following the longest prefix alone sends every request to the replica that cached that
    block first, where four conversations' histories do not fit; the balanced replay spreads them,
    keeps each history, and the reference (``best_ideal``) is the better of the two."""
    p = workload.Prompts()
    first_turns = [_req(i, (0, 10 + i)) for i in range(4)]
    second_turns = [_req(4 + i, (0, 10 + i, 20 + i)) for i in range(4)]
    requests = first_turns + second_turns
    capacity = 3 * 512 + 100  # a cache holds about three blocks
    piled = workload.ideal_replay(requests, p, 4, capacity, spread=None)
    assert piled.requests_per_replica == (8, 0, 0, 0)
    spread = workload.ideal_replay(requests, p, 4, capacity)
    assert spread.requests_per_replica == (2, 2, 2, 2)
    # Each second turn reuses its whole first turn (two blocks and the chat template) there.
    assert spread.cached_tokens == 4 * (len(workload._HEAD) + 2 * 512)
    assert spread.cached_tokens > piled.cached_tokens
    best = workload.best_ideal(requests, p, 4, capacity)
    assert best.cached_tokens == spread.cached_tokens and best.rule.startswith("balanced")


def test_balanced_ideal_keeps_requests_near_even():
    """With every request following one cached prefix, the balanced replay still keeps each replica
    within 15% above an even share."""
    p = workload.Prompts()
    requests = [_req(i, (1, 2, 3)) for i in range(40)]
    result = workload.ideal_replay(requests, p, 4, 1_000_000)
    assert max(result.requests_per_replica) <= 1.15 * 40 / 4
    assert workload.ideal_replay(requests, p, 4, 1_000_000, spread=None).requests_per_replica == (40, 0, 0, 0)


def test_ideal_router_is_bounded_by_cache_capacity():
    """With caches too small to hold a prompt's prefix, the ideal reuses nothing."""
    p = workload.Prompts()
    result = workload.ideal_replay([_req(0, (1, 2, 3)), _req(1, (1, 2, 3, 4))], p, 2, 100)
    assert result.cached_tokens <= 100


def test_spread_is_the_largest_deviation_from_even():
    """Requests per replica 90/110/100/100 are 10% from even."""
    assert prefix.spread([90, 110, 100, 100]) == 0.1
    assert prefix.spread([0, 0]) == 0.0
