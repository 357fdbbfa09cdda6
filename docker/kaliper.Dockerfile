# The steps image, ghcr.io/kaliper-dev/kaliper: runs `kaliper step configure|launch|report` in the Argo
# workflow (and the KFP pipeline). No ML framework in it; the benchmark jobs use the framework images.
# Build from the repository root:
#   docker build -f docker/kaliper.Dockerfile -t ghcr.io/kaliper-dev/kaliper:0.1.0 .
#
# Base: Debian bookworm slim with CPython 3.11.14, pinned by tag and by the digest of its
# multi-architecture index. Bump both together.
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

ARG KALIPER_VERSION=0.1.0
LABEL org.opencontainers.image.title="kaliper" \
      org.opencontainers.image.description="Kaliper workflow steps: configure, launch (TFJob/PyTorchJob), report" \
      org.opencontainers.image.source="https://github.com/kaliper-dev/kaliper" \
      org.opencontainers.image.version="${KALIPER_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Every dependency ships a manylinux wheel (jsonnet included), so no compiler is installed.
WORKDIR /tmp/kaliper-src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir '.[cluster]' \
    && rm -rf /tmp/kaliper-src

# Non-root, numeric so that `runAsNonRoot: true` can verify it. /kaliper-results is where the
# results PVC is mounted; owning it here makes a Docker named volume writable too.
RUN groupadd --gid 1000 kaliper \
    && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin kaliper \
    && mkdir -p /kaliper-results \
    && chown 1000:1000 /kaliper-results
USER 1000:1000
WORKDIR /home/kaliper

CMD ["kaliper", "--help"]
