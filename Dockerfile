# Builds the modelplane binary into a small image. Not exercised by CI (no Docker engine
# there); the binary itself is what the tests cover.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
ENV SQLX_OFFLINE=true
RUN cargo build --release --bin modelplane

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 modelplane
COPY --from=build /src/target/release/modelplane /usr/local/bin/modelplane
USER 10001
EXPOSE 8080
ENV MODELPLANE_LISTEN=0.0.0.0:8080 MODELPLANE_LOG_FORMAT=json
ENTRYPOINT ["modelplane"]
CMD ["serve"]
