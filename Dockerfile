# mcpbridge's container image, for those who build with Docker (or Podman, Buildah):
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t mcpbridge .
#
# `make image` builds the same image without a daemon (deploy/image). Both get their files from
# the same tool (deploy/image, -rootfs here), and deploy/image's TestDockerfileMatchesTool holds
# this file's USER, ENV, WORKDIR, EXPOSE, LABEL keys, ENTRYPOINT and CMD to the tool's.

ARG GO_IMAGE=golang:1.26

# The build runs on the builder's platform and cross-compiles to the target's (TARGETARCH,
# set by BuildKit; empty with the legacy builder, and the tool then builds for the host).
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY deploy/image/go.mod deploy/image/go.sum deploy/image/
RUN go mod download && go -C deploy/image mod download
COPY . .
ARG VERSION=dev
ARG TARGETARCH
# The static binary (CGO_ENABLED=0, -trimpath, the version stamped), /etc/passwd and
# /etc/group with nonroot 65532, the CA certificates and /etc/mcpbridge/config.yaml, all owned
# by root and not writable by nonroot, into /rootfs.
RUN go -C deploy/image run . -src /src -version "${VERSION}" -arch "${TARGETARCH}" -rootfs /rootfs

# Nothing but those files: no shell, no package manager, no C library.
FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
ENV PATH=/usr/local/bin:/usr/bin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
WORKDIR /
# gRPC (MCP, xDS, health) and HTTP (health, readiness, metrics, debug).
EXPOSE 15010/tcp 15014/tcp
ARG VERSION=dev
ARG REVISION=
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="mcpbridge" \
      org.opencontainers.image.description="A bridge for mesh configuration: MCP sink and source, and xDS server, from one store" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/mcpbridge/mcpbridge" \
      org.opencontainers.image.created="${CREATED}"
ENTRYPOINT ["/usr/local/bin/mcpbridge"]
CMD ["serve", "--config", "/etc/mcpbridge/config.yaml"]
