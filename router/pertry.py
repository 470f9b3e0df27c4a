"""Per-try time to first byte (Envoy's ``per_try_timeout``): how long one try of a request may go
without receiving anything from its replica before the router gives up on that replica and retries
the request on another one (within the retry budget).

A replica that hangs (accepts connections, never answers) would otherwise hold every request sent
to it until the client gives up, or until health checks mark it down, seconds to minutes later.
The limit is derived from the deployment's SLA, which the routing table carries per model:

- first byte of a stream (the first SSE event is the first token):
  ``clamp(ttft_multiplier x ttft_p99_ms, floor_s, cap_s)``; ``cap_s`` when the table has no TTFT
  target (a static table without ``ttft_p99_ms``, an older scheduler); plus, for every request,
  ``ttft_multiplier`` x the prompt's prefill on the model's slowest replica (the prompt estimate x
  the GPU's prefill time per token, ``prefill_s``): a 100k-token prompt takes seconds to prefill
  on any GPU, and a limit blind to it abandoned such a try mid-prefill and paid the prefill again
  on the next replica;
- a non-streaming answer arrives whole, after its last token, so its first byte is its last: the
  limit adds ``ttft_multiplier x tpot_p99_ms`` (``default_tpot_ms`` when the table has none) per
  token the answer may have: the request's ``max_tokens`` (``max_completion_tokens``,
  ``sampling_params.max_new_tokens``), else the model's context length less the prompt's estimate
  (the whole context when the estimate, the body's size over 4, reaches it: encoded images);
  without either bound the router cannot tell a hung replica from a long answer, and the try has no
  limit of its own (only the request's deadline). Embeddings have no output tokens.

A try past its limit is abandoned only when a retry is possible (tries left, budget left, another
replica to go to); otherwise it goes on waiting: the last try never times out by this rule, so a
slow answer is late, never failed by it. Streams that have sent their first byte are never retried.

Pure: settings and the model's targets in, seconds out."""

from __future__ import annotations

import dataclasses

__all__ = ["PerTrySettings", "first_byte_s", "limit_s", "per_token_s", "prefill_s"]


@dataclasses.dataclass(frozen=True)
class PerTrySettings:
    enabled: bool = True
    ttft_multiplier: float = 3.0
    floor_s: float = 1.0
    cap_s: float = 30.0
    default_tpot_ms: float = 100.0


def first_byte_s(settings: PerTrySettings, ttft_p99_ms: float) -> float:
    """The limit for a try's first byte of a stream (seconds)."""
    if ttft_p99_ms <= 0:
        return settings.cap_s
    value = settings.ttft_multiplier * ttft_p99_ms / 1000.0
    return min(settings.cap_s, max(settings.floor_s, value))


def per_token_s(settings: PerTrySettings, tpot_p99_ms: float) -> float:
    """Seconds a non-streaming try is allowed per output token it may produce."""
    return settings.ttft_multiplier * (tpot_p99_ms if tpot_p99_ms > 0 else settings.default_tpot_ms) / 1000.0


def prefill_s(settings: PerTrySettings, prefill_ms_per_token: float) -> float:
    """Seconds a try is allowed per prompt token for its prefill (``prefill_ms_per_token``: the
    model's slowest replica's estimate)."""
    return settings.ttft_multiplier * prefill_ms_per_token / 1000.0


def limit_s(first_s: float, token_s: float, *, stream: bool, max_new_tokens: int | None,
            context_length: int = 0, prompt_tokens: int = 0, embedding: bool = False,
            prompt_s: float = 0.0) -> float | None:
    """One try's limit in seconds, or None for no limit of its own.

    ``first_s`` and ``token_s`` come from ``first_byte_s`` and ``per_token_s`` for the model,
    ``prompt_s`` from ``prefill_s`` (0: no allowance for the prompt); ``max_new_tokens`` is the
    request's bound on its answer (None: not given)."""
    first_s += prompt_tokens * prompt_s
    if stream or embedding:
        return first_s
    if max_new_tokens is None:
        if context_length <= 0:
            return None
        # The prompt estimate is the body's size (bytes / 4): a body of images or other encoded
        # content reads as many more tokens than its prompt has. An estimate at or past the context
        # cannot be the prompt (the replica would refuse it), so the whole context bounds the answer.
        max_new_tokens = context_length - prompt_tokens if prompt_tokens < context_length else context_length
    return first_s + max_new_tokens * token_s
