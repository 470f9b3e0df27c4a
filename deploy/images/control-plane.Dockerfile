# syntax=docker/dockerfile:1
# The control-plane image: `meridian scheduler`, `meridian router` and `meridian agent` (console
# script `meridian`). Build from the repository root:
#   docker build -f deploy/images/control-plane.Dockerfile -t REGISTRY/meridian-control-plane:0.2.0 .
# MERIDIAN_EXTRAS picks the components and cloud SDKs it installs (pyproject.toml's extras). The
# default holds every entry point and every cloud's SDK, so one image serves every control-plane
# Deployment and every cloud's agent; a slimmer image per part (docs/kubernetes.md, "Images"):
#   --build-arg MERIDIAN_EXTRAS=router                  (no OR-Tools, no cloud SDK)
#   --build-arg MERIDIAN_EXTRAS=scheduler
#   --build-arg MERIDIAN_EXTRAS=agent,aws,kubernetes    (an EKS agent; gcp / azure likewise)
# Every install uses constraints.txt: the versions the test suite ran. tests/deploy/ reads the
# MERIDIAN_EXTRAS default and the install line below and installs the same set in a fresh virtualenv.

ARG PYTHON_IMAGE=python:3.11.15-slim-trixie

# --- build: the project's wheel, then a virtualenv with it and its extras ---------------------
FROM ${PYTHON_IMAGE} AS build
ARG MERIDIAN_EXTRAS=scheduler,router,agent,aws,gcp,azure,kubernetes
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY meridian ./meridian
COPY scheduler ./scheduler
COPY router ./router
COPY agents ./agents
COPY runtime_adapter ./runtime_adapter
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/meridian
# Exactly the set tests/deploy/test_images.py installs: the wheel with MERIDIAN_EXTRAS, constraints.txt.
RUN /opt/meridian/bin/pip install -c constraints.txt "$(ls /wheels/meridian-*.whl)[${MERIDIAN_EXTRAS}]" \
 && /opt/meridian/bin/pip check \
 && /opt/meridian/bin/pip uninstall --yes pip

# --- runtime: the virtualenv on a clean base, a numeric non-root user --------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="meridian-control-plane" \
      org.opencontainers.image.description="Meridian scheduler, router and agent (meridian CLI)" \
      org.opencontainers.image.source="https://github.com/meridian/meridian" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 meridian \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/meridian --no-create-home \
      --shell /usr/sbin/nologin meridian \
 && mkdir -p /var/lib/meridian \
 && chown 10001:10001 /var/lib/meridian
COPY --from=build /opt/meridian /opt/meridian
ENV PATH=/opt/meridian/bin:$PATH \
    HOME=/var/lib/meridian \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/meridian
USER 10001:10001
# scheduler gRPC, scheduler admin API + /metrics, router, agent status (conventions' defaults)
EXPOSE 7070 7071 8080 9090
# One image runs three programs, each with its own health endpoint and port, so the check asks
# the URL in MERIDIAN_HEALTHCHECK_URL (set it with `docker run -e`; the default fits the
# scheduler's admin port). With TLS on that port give an https:// URL and the CA that signed its
# certificate in MERIDIAN_HEALTHCHECK_CA_FILE (the admin certificate names 127.0.0.1 and localhost).
# Kubernetes ignores HEALTHCHECK: the manifests' probes do this there.
ENV MERIDIAN_HEALTHCHECK_URL=http://127.0.0.1:7071/healthz
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, ssl, sys, urllib.request; ca = os.environ.get('MERIDIAN_HEALTHCHECK_CA_FILE'); ctx = ssl.create_default_context(cafile=ca) if ca else None; sys.exit(0 if urllib.request.urlopen(os.environ['MERIDIAN_HEALTHCHECK_URL'], timeout=4, context=ctx).status == 200 else 1)"]
ENTRYPOINT ["meridian"]
CMD ["--help"]
