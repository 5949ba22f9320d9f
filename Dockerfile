# The worker image used by docker-compose.yml.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# .git stays out of the image (.dockerignore), so Go records no commit; name
# the build for `processor version` and dedup_build_info as `make build` does:
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" --build-arg COMMIT="$(git describe --always --dirty --abbrev=40 --exclude='*')" .
# Without them it reports version (devel) and commit unknown.
ARG VERSION=
ARG COMMIT=
RUN BUILDINFO=github.com/dedupkit/dedup/internal/buildinfo && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-X $BUILDINFO.version=${VERSION} -X $BUILDINFO.commit=${COMMIT} \
      -X $BUILDINFO.buildTime=$(date -u +%Y-%m-%dT%H:%M:%SZ)" -o /out/processor ./cmd/processor && \
    mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/processor /processor
# Owned by the nonroot user so a fresh named volume is writable.
COPY --from=build --chown=65532:65532 /out/state /state
# The LevelDB tables live here; losing them only costs a restore from Kafka.
VOLUME /state
ENV PROCESSOR_STATE_DIR=/state PROCESSOR_HTTP_ADDR=:8080
EXPOSE 8080
ENTRYPOINT ["/processor"]
CMD ["run"]
