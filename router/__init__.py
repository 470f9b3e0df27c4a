"""Meridian router: the global OpenAI-compatible endpoint, latency-aware, failing over, fast.

Package face; the roles live in small modules:
``app`` (wiring, lifecycle), ``proxy`` (hot path), ``upstream`` (HTTP/1.1 client pools), ``table``
(routing state), ``endpoints`` (per-replica state), ``policies`` (routing policies and registry),
``health`` (outlier ejection, active checks, panic mode), ``retry`` (retry budget), ``admission``
(bounded queue per model), ``auth`` / ``ratelimit`` (API keys, token buckets in Redis),
``validation`` / ``errors`` (400s the OpenAI way), ``watch`` / ``store`` (route stream, last known
good), ``traffic`` (reports to the scheduler), ``scheduler_tls`` (TLS on the scheduler link),
``metrics``, ``config``, ``cli``, ``testing``."""

from router.app import Router
from router.config import RouterConfig, load as load_config

__all__ = ["Router", "RouterConfig", "load_config"]
