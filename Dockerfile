# Builds the modelplane image: the binary, the portal (web/dist) and GraphiQL's files, so
# `/`, `/graphql` and the API all work with no network at run time. Not exercised by CI (no
# Docker engine there); what goes into it is (scripts/test.sh builds and tests all three).

# The portal and GraphiQL: npm packages from the registry, locked by package-lock.json.
FROM node:20-bookworm AS web
WORKDIR /src
COPY openapi ./openapi
COPY web ./web
RUN cd web/graphiql && npm ci --ignore-scripts --no-audit --no-fund \
    && cd .. && npm ci --ignore-scripts --no-audit --no-fund && npm run build

# The Rust build needs no Node.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
ENV SQLX_OFFLINE=true
RUN cargo build --release --bin modelplane

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 modelplane
COPY --from=build /src/target/release/modelplane /usr/local/bin/modelplane
COPY --from=web /src/web/dist /usr/share/modelplane/web
COPY --from=web /src/web/graphiql/node_modules /usr/share/modelplane/graphiql
USER 10001
EXPOSE 8080
ENV MODELPLANE_LISTEN=0.0.0.0:8080 MODELPLANE_LOG_FORMAT=json \
    MODELPLANE_WEB_DIR=/usr/share/modelplane/web MODELPLANE_GRAPHIQL_DIR=/usr/share/modelplane/graphiql \
    MODELPLANE_CHAT_VIA=cluster
ENTRYPOINT ["modelplane"]
CMD ["serve"]
