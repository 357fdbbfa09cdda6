# The TensorFlow workload image, ghcr.io/kaliper-dev/kaliper-tensorflow: the container (named
# `tensorflow`) of TFJob replicas, running `kaliper workload ...`. tensorflow and tf-keras are pinned
# in pyproject.toml (==2.21.0). The plain tensorflow wheel runs on CPU; a GPU image would install
# tensorflow[and-cuda] at the same pin, or start from a pinned CUDA base.
# Build from the repository root:
#   docker build -f docker/tensorflow.Dockerfile -t ghcr.io/kaliper-dev/kaliper-tensorflow:0.1.0 .
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

ARG KALIPER_VERSION=0.1.0
LABEL org.opencontainers.image.title="kaliper-tensorflow" \
      org.opencontainers.image.description="Kaliper benchmark workloads for TensorFlow" \
      org.opencontainers.image.source="https://github.com/kaliper-dev/kaliper" \
      org.opencontainers.image.version="${KALIPER_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /tmp/kaliper-src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir '.[tensorflow,cluster]' \
    && rm -rf /tmp/kaliper-src

# Non-root, numeric so that `runAsNonRoot: true` can verify it; /kaliper-results is the PVC mount.
RUN groupadd --gid 1000 kaliper \
    && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin kaliper \
    && mkdir -p /kaliper-results \
    && chown 1000:1000 /kaliper-results
USER 1000:1000
WORKDIR /home/kaliper

CMD ["kaliper", "--help"]
