# syntax=docker/dockerfile:1
#
# tailgate container image: multi-stage, multi-arch (linux/amd64, linux/arm64).
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t registry.example.com/tailgate:0.1.0 --push .
#
# The builder runs on each target platform (under emulation for the foreign one), so the
# binary is always native to the image's architecture; TARGETARCH only keys the caches.
# Cross-compiling from the build platform would need a cross C toolchain for ring.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
ARG TARGETARCH
WORKDIR /src
# The crate: manifest, lockfile, sources (and whatever else .dockerignore lets through:
# rust-toolchain.toml, build.rs, proto/, benches/).
COPY . .
# Cache mounts keep the registry and target dir between builds, per architecture.
RUN --mount=type=cache,target=/usr/local/cargo/registry,id=cargo-registry-${TARGETARCH} \
    --mount=type=cache,target=/src/target,id=tailgate-target-${TARGETARCH} \
    cargo build --release --locked --bin tailgate \
    && install -D -m 0755 target/release/tailgate /out/tailgate

# glibc, libgcc and CA certificates, no shell, user 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.0.0-dev
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="tailgate" \
      org.opencontainers.image.description="Tail-sampling OTLP gateway, configured in the OpenTelemetry Collector's YAML" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"
COPY --from=build --chown=0:0 /out/tailgate /usr/local/bin/tailgate
USER 65532:65532
# OTLP gRPC, OTLP HTTP, self-metrics, health_check.
EXPOSE 4317 4318 8888 13133
# Health is checked by Kubernetes probes on :13133 (deploy/base/deployment.yaml); the
# distroless image has no shell or HTTP client to run a HEALTHCHECK command with.
# checkov:skip=CKV_DOCKER_2: health is probed by Kubernetes on :13133; distroless has no client for HEALTHCHECK
ENTRYPOINT ["/usr/local/bin/tailgate"]
CMD ["--config", "/etc/tailgate/config.yaml"]
