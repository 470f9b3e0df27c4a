# syntax=docker/dockerfile:1
# The replica image: SGLang from its official image plus Meridian's runtime adapter, which the
# kubernetes replica backend runs as `python3 -m runtime_adapter serve` (SGLang's flags from the
# RuntimeSpec, /drain for the preStop hook, start-up phases logged). Build from the repository root:
#   docker build -f deploy/images/replica.Dockerfile -t REGISTRY/meridian-replica:0.2.0-sglang0.5.23 .
# Weights are never baked in: they live on the model cache volume (MERIDIAN_CACHE_DIR, mounted by
# the pod; the adapter points SGLang's --download-dir and the Hugging Face cache there).
#
# The adapter goes into SGLang's own Python (the engine command `python -m sglang.launch_server`
# is the adapter's interpreter), with the `replica` extra at constraints.txt's versions; the build
# fails if that breaks a requirement of SGLang's environment that held before (pip check, before
# and after). tests/deploy/test_images.py installs the same extra and constraints in a fresh
# virtualenv and runs the entry point's --help.

# SGLang 0.5.23, the CUDA 13 "runtime" variant (inference dependencies, fewer development tools);
# the full image is lmsysorg/sglang:v0.5.23. An exact tag; pin its digest in your registry mirror.
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23-runtime
ARG PYTHON_IMAGE=python:3.11.15-slim-trixie

# --- build: the project's wheel (pure Python, so any Python 3.11+ builds it) -------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY meridian ./meridian
COPY scheduler ./scheduler
COPY router ./router
COPY agents ./agents
COPY runtime_adapter ./runtime_adapter
RUN python -m pip wheel --no-deps --wheel-dir /wheels .

# --- runtime: SGLang's image + the adapter, a numeric non-root user ----------------------------
FROM ${SGLANG_IMAGE}
LABEL org.opencontainers.image.title="meridian-replica" \
      org.opencontainers.image.description="SGLang 0.5.23 with the Meridian runtime adapter" \
      org.opencontainers.image.source="https://github.com/meridian/meridian" \
      org.opencontainers.image.licenses="Apache-2.0"
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_BREAK_SYSTEM_PACKAGES=1
COPY constraints.txt /tmp/meridian/constraints.txt
COPY --from=build /wheels /tmp/meridian/wheels
# Exactly the set tests/deploy/test_images.py installs: the wheel with the replica extra, constraints.txt.
RUN python3 -m pip check > /tmp/meridian/check-before.txt 2>&1 || true; \
    python3 -m pip install -c /tmp/meridian/constraints.txt "$(ls /tmp/meridian/wheels/meridian-*.whl)[replica]" \
 && { python3 -m pip check > /tmp/meridian/check-after.txt 2>&1 || true; } \
 && if grep -vxF -f /tmp/meridian/check-before.txt /tmp/meridian/check-after.txt | grep -v '^No broken requirements'; then \
      echo "installing the runtime adapter broke a requirement of SGLang's environment (above)" >&2; exit 1; fi \
 && python3 -m runtime_adapter serve --help > /dev/null \
 && rm -rf /tmp/meridian
RUN groupadd --system --gid 10001 meridian \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/meridian --no-create-home \
      --shell /usr/sbin/nologin meridian \
 && mkdir -p /var/lib/meridian/models /var/lib/meridian/home \
 && chown -R 10001:10001 /var/lib/meridian
# HOME for the JIT caches (FlashInfer, Triton) of a non-root engine; the model cache is a volume.
ENV HOME=/var/lib/meridian/home \
    MERIDIAN_CACHE_DIR=/var/lib/meridian/models \
    PYTHONUNBUFFERED=1
VOLUME ["/var/lib/meridian/models"]
WORKDIR /var/lib/meridian
USER 10001:10001
# engine (SGLang's OpenAI API, /health, /metrics), adapter (/drain, /healthz, /metrics)
EXPOSE 30000 30001
# The adapter's /healthz is 200 while the engine runs (docker run); Kubernetes ignores HEALTHCHECK:
# the backend's pods probe SGLang's /health and drain through the adapter's /drain instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
  CMD ["python3", "-c", "import os, sys, urllib.request; port = os.environ.get('MERIDIAN_ADAPTER_PORT', '30001'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["python3", "-m", "runtime_adapter"]
CMD ["serve"]
