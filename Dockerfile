# Builds the modelplane image: the binary, the portal (web/dist) and GraphiQL's files, so
# `/`, `/graphql` and the API all work with no network at run time. One image for every
# role (`MODELPLANE_ROLE=api|worker|all`, as deploy/helm/modelplane sets it). No Docker
# engine runs in CI: `scripts/lint-dockerfile.sh` lints this file there, and what goes
# into it is built and tested by scripts/test.sh.

# The portal and GraphiQL: npm packages from the registry, locked by package-lock.json.
FROM node:20-bookworm AS web
WORKDIR /src
COPY openapi ./openapi
COPY web ./web
WORKDIR /src/web/graphiql
RUN npm ci --ignore-scripts --no-audit --no-fund
WORKDIR /src/web
RUN npm ci --ignore-scripts --no-audit --no-fund && npm run build

# The Rust build needs no Node.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
ENV SQLX_OFFLINE=true
RUN cargo build --release --locked --bin modelplane

# Debian slim with CA certificates (OIDC JWKS URLs and Postgres over TLS verify against
# them); the binary links only glibc. DL3008: the certificates should follow Debian's
# security updates, not a pinned version.
FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 modelplane \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin modelplane
COPY --from=build /src/target/release/modelplane /usr/local/bin/modelplane
COPY --from=web /src/web/dist /usr/share/modelplane/web
COPY --from=web /src/web/graphiql/node_modules /usr/share/modelplane/graphiql
# Numeric, so Kubernetes can check runAsNonRoot; nothing is written outside /tmp.
USER 10001:10001
EXPOSE 8080
ENV MODELPLANE_LISTEN=0.0.0.0:8080 MODELPLANE_LOG_FORMAT=json \
    MODELPLANE_WEB_DIR=/usr/share/modelplane/web MODELPLANE_GRAPHIQL_DIR=/usr/share/modelplane/graphiql \
    MODELPLANE_CHAT_VIA=cluster
ENTRYPOINT ["modelplane"]
CMD ["serve"]
