# syntax=docker/dockerfile:1
# The Blockwork image: the `blockwork` binary on a distroless glibc base, non-root, no shell.
#
#   docker build -t registry.example.com/blockwork:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t registry.example.com/blockwork:0.1.0 --push .
#
# Without Docker or a registry, `scripts/build-image` makes the same image as an OCI archive
# from a locally built binary (docs/adr/0005-image-and-webhook-certificates.md says why glibc).

ARG RUST_VERSION=1.95
# Debian 12 (bookworm) on both sides: the binary links the glibc the runtime base ships.
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --locked --release -p blockwork \
 && cp target/release/blockwork /blockwork

# glibc, libgcc, CA certificates, /etc/passwd with `nonroot` (65532); no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://blockwork.dev
LABEL org.opencontainers.image.title="blockwork" \
      org.opencontainers.image.description="Blockwork: Kubernetes operators that turn platform runbooks into custom resources" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /blockwork /usr/local/bin/blockwork
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/blockwork"]
CMD ["run"]
