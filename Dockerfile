# syntax=docker/dockerfile:1
# A static binary on distroless, as non-root. Build: docker build -t watchcache-exporter .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=unknown
ARG REVISION=unknown
ARG BRANCH=unknown
ARG BUILD_DATE=unknown
# The same flags as `make build` (a test keeps them in step).
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION} -X github.com/prometheus/common/version.Revision=${REVISION} -X github.com/prometheus/common/version.Branch=${BRANCH} -X github.com/prometheus/common/version.BuildUser=watchcache-exporter -X github.com/prometheus/common/version.BuildDate=${BUILD_DATE}" \
    -o /out/watchcache-exporter ./cmd/watchcache-exporter

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=unknown
ARG REVISION=unknown
# `make image` builds the same image without an engine (hack/image); a test
# keeps its user, entrypoint, port and labels in step with these.
LABEL org.opencontainers.image.title="watchcache-exporter" \
      org.opencontainers.image.description="How long the kube-apiserver's watch cache keeps its history, for Prometheus" \
      org.opencontainers.image.source="https://github.com/watchcache/watchcache-exporter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/watchcache-exporter /watchcache-exporter
USER 65532:65532
EXPOSE 9890
ENTRYPOINT ["/watchcache-exporter"]
