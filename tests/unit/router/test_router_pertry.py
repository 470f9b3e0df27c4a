"""Per-try limits derived from the deployment's targets: clamped, generation time added for answers
that arrive whole, none where the router cannot bound the answer."""

from __future__ import annotations

import pytest

from router import endpoints, pertry

S = pertry.PerTrySettings(ttft_multiplier=3.0, floor_s=1.0, cap_s=30.0, default_tpot_ms=100.0)


@pytest.mark.parametrize("ttft_ms,expected_s", [(800.0, 2.4), (100.0, 1.0), (20_000.0, 30.0), (0.0, 30.0)])
def test_first_byte_limit_is_the_ttft_target_times_the_multiplier_clamped(ttft_ms, expected_s):
    """3 x ttft_p99_ms within [floor, cap]; no target in the table: the cap."""
    assert pertry.first_byte_s(S, ttft_ms) == pytest.approx(expected_s)


def test_per_token_allowance_uses_the_tpot_target_or_the_default():
    """A token may take 3 x tpot_p99_ms; without a target, 3 x the default."""
    assert pertry.per_token_s(S, 50.0) == pytest.approx(0.15)
    assert pertry.per_token_s(S, 0.0) == pytest.approx(0.3)


def test_streams_and_embeddings_get_the_first_byte_limit_alone():
    """A stream's first byte is its first token; an embedding has no output tokens."""
    assert pertry.limit_s(2.4, 0.3, stream=True, max_new_tokens=500) == 2.4
    assert pertry.limit_s(2.4, 0.3, stream=False, max_new_tokens=None, embedding=True) == 2.4


def test_a_non_streaming_answer_gets_time_for_each_token_it_may_have():
    """Bounded by max_tokens, else by what the context leaves after the prompt; unbounded: no limit."""
    assert pertry.limit_s(2.4, 0.3, stream=False, max_new_tokens=10) == pytest.approx(5.4)
    assert pertry.limit_s(2.4, 0.3, stream=False, max_new_tokens=None, context_length=100,
                          prompt_tokens=90) == pytest.approx(5.4)
    assert pertry.limit_s(2.4, 0.3, stream=False, max_new_tokens=None) is None


def test_a_prompt_estimate_past_the_context_leaves_the_whole_context_for_the_answer():
    """The prompt estimate is the body's size over 4: a body carrying an image reads as more tokens
    than the context. That estimate cannot be the prompt, so the answer may take the whole
    context (it used to get one token: a 2.7-s limit that abandoned every such try)."""
    assert pertry.limit_s(2.4, 0.3, stream=False, max_new_tokens=None, context_length=100,
                          prompt_tokens=75_000) == pytest.approx(2.4 + 100 * 0.3)
    assert pertry.limit_s(2.4, 0.3, stream=False, max_new_tokens=None, context_length=100,
                          prompt_tokens=100) == pytest.approx(2.4 + 100 * 0.3)


def test_a_long_prompt_gets_time_for_its_prefill():
    """Every try gets ttft_multiplier x its prompt's prefill on the slowest replica on top: a
    100k-token prompt on an H100 (about 0.04 ms a token for the reference 8B model) has about 12 s
    more before its first byte, where a prompt-blind 2.4-s limit abandoned it mid-prefill."""
    settings = pertry.PerTrySettings()
    per_token = pertry.prefill_s(settings, endpoints.prefill_ms_per_token("H100"))
    assert 0.00005 < per_token < 0.0005
    assert pertry.limit_s(2.4, 0.3, stream=True, max_new_tokens=None, prompt_tokens=100_000,
                          prompt_s=per_token) == pytest.approx(2.4 + 100_000 * per_token)
    assert pertry.limit_s(2.4, 0.3, stream=False, max_new_tokens=10, prompt_tokens=100_000,
                          prompt_s=per_token) == pytest.approx(2.4 + 100_000 * per_token + 3.0)
    assert pertry.limit_s(2.4, 0.3, stream=True, max_new_tokens=None, prompt_tokens=20,
                          prompt_s=per_token) == pytest.approx(2.4, abs=0.01)
