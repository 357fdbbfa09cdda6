# The PyTorch workload image, ghcr.io/kaliper-dev/kaliper-pytorch: the container of PyTorchJob
# replicas, running `kaliper workload ...`. CPU build of torch (the pin in pyproject.toml, ==2.13.0).
# Build from the repository root:
#   docker build -f docker/pytorch.Dockerfile -t ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0 .
#
# A CUDA build uses a different base instead of this one: a pinned PyTorch CUDA runtime image whose
# torch matches the pin, e.g. pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime (pin its digest too),
# installing only '.[cluster]' on top so that its CUDA torch is kept. Never `latest`.
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

ARG KALIPER_VERSION=0.1.0
# PyTorch's CPU wheel index: without it pip on Linux takes the CUDA wheel and its ~2.5 GB of
# nvidia-* packages. `torch==2.13.0` matches the local version 2.13.0+cpu from this index.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
LABEL org.opencontainers.image.title="kaliper-pytorch" \
      org.opencontainers.image.description="Kaliper benchmark workloads for PyTorch (CPU build)" \
      org.opencontainers.image.source="https://github.com/kaliper-dev/kaliper" \
      org.opencontainers.image.version="${KALIPER_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /tmp/kaliper-src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX_URL}" '.[torch,cluster]' \
    && rm -rf /tmp/kaliper-src

# Non-root, numeric so that `runAsNonRoot: true` can verify it; /kaliper-results is the PVC mount.
RUN groupadd --gid 1000 kaliper \
    && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin kaliper \
    && mkdir -p /kaliper-results \
    && chown 1000:1000 /kaliper-results
USER 1000:1000
WORKDIR /home/kaliper

CMD ["kaliper", "--help"]
