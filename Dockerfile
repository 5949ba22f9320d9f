# The worker image used by docker-compose.yml.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/processor ./cmd/processor && mkdir -p /out/state

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
