//! GraphQL at `/graphql`: queries, mutations and subscriptions over the same service layer
//! and authorisation as REST. Resolvers are thin: each is one service call.
//!
//! POST and GET run queries and mutations (GET: queries only); a WebSocket speaking
//! `graphql-transport-ws` runs subscriptions, authenticated by the upgrade's
//! `Authorization` header or the `connection_init` payload's `Authorization`, and again for
//! every operation and every few seconds while it is open ([`guard`]).

mod autoscaling;
mod capacity;
mod errors;
mod graphiql;
pub mod guard;
mod keys;
mod load;
mod loaders;
mod mutation;
mod query;
mod subscription;
mod types;

use async_graphql::http::ALL_WEBSOCKET_PROTOCOLS;
use async_graphql::{Context, Data, Result, Schema};
use async_graphql_axum::{GraphQLProtocol, GraphQLRequest, GraphQLResponse, GraphQLWebSocket};
use axum::extract::ws::{CloseFrame, Message};
use axum::extract::{State, WebSocketUpgrade};
use axum::http::{HeaderMap, Method, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use std::sync::Arc;

pub use graphiql::graphiql_asset;

use super::AppState;
use crate::service::Actor;

pub type ModelplaneSchema = Schema<query::Query, mutation::Mutation, subscription::Subscription>;

/// Limits on one GraphQL document. A list field's complexity is its page size times its
/// items' (so 200 deployments with 200 revisions each is refused before it runs), and a
/// field that reads the database costs [`DB_COST`].
#[derive(Debug, Clone, Copy)]
pub struct GraphqlLimits {
    pub max_depth: usize,
    pub max_complexity: usize,
    pub introspection: bool,
    /// Aliases one document may use (`MODELPLANE_GRAPHQL_MAX_ALIASES`).
    pub max_aliases: usize,
    /// Mutation fields one document may hold (`MODELPLANE_GRAPHQL_MAX_MUTATIONS`); each is
    /// charged to the caller's rate budget.
    pub max_mutations: usize,
}

impl Default for GraphqlLimits {
    fn default() -> Self {
        Self {
            max_depth: 12,
            max_complexity: 5000,
            introspection: true,
            max_aliases: 50,
            max_mutations: 20,
        }
    }
}

/// The complexity of a field that reads the database (a plain field costs 1): with the
/// default limit a document reaches the database at most a few hundred times.
pub const DB_COST: usize = 20;

/// The schema; request data (the caller) is added per request. With introspection off,
/// error messages stop suggesting field names too.
pub fn schema(limits: GraphqlLimits) -> ModelplaneSchema {
    let builder = Schema::build(query::Query, mutation::Mutation, subscription::Subscription)
        .limit_depth(limits.max_depth)
        .limit_complexity(limits.max_complexity)
        .extension(guard::Guard(limits));
    if limits.introspection {
        builder.finish()
    } else {
        builder
            .disable_introspection()
            .disable_suggestions()
            .finish()
    }
}

/// The schema in SDL, as committed in `openapi/schema.graphql`.
pub fn sdl() -> String {
    schema(GraphqlLimits::default()).sdl()
}

/// The application state and the caller, from a resolver's context.
fn state<'a>(ctx: &Context<'a>) -> Result<(&'a AppState, &'a Actor)> {
    let state = ctx.data::<AppState>()?;
    let actor = ctx.data::<Actor>()?;
    Ok((state, actor))
}

/// `POST /graphql` (and `GET /graphql?query=…`, queries only). A request that is not
/// authenticated (or is rate limited) gets the HTTP status REST would give, with a GraphQL
/// error body carrying `extensions.code`.
pub async fn graphql_http(
    State(state): State<AppState>,
    actor: Result<Actor, crate::api::error::ApiError>,
    method: Method,
    request: GraphQLRequest,
) -> Response {
    let actor = match actor {
        Ok(actor) => actor,
        Err(err) => return refused(err),
    };
    execute(state, actor, method, request).await.into_response()
}

fn refused(err: crate::api::error::ApiError) -> Response {
    let status = err.status();
    let error = errors::api_error(err).into_server_error(async_graphql::Pos::default());
    let body = async_graphql::Response::from_errors(vec![error]);
    let mut response = (status, axum::Json(body)).into_response();
    if status == axum::http::StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

async fn execute(
    state: AppState,
    actor: Actor,
    method: Method,
    request: GraphQLRequest,
) -> GraphQLResponse {
    let request = request.into_inner();
    if method == Method::GET && is_mutation(&request.query) {
        let error = errors::api_error(crate::api::error::ApiError::Invalid(
            crate::domain::FieldErrors::single("query", "mutations need POST"),
        ));
        return async_graphql::Response::from_errors(vec![
            error.into_server_error(async_graphql::Pos::default()),
        ])
        .into();
    }
    let loader =
        async_graphql::dataloader::DataLoader::new(loaders::Batch(state.ctx.clone()), tokio::spawn);
    let request = request.data(state.clone()).data(actor).data(loader);
    let response = state.graphql.execute(request).await;
    metrics::counter!(crate::metrics::GRAPHQL_REQUESTS,
        "outcome" => if response.errors.is_empty() { "ok" } else { "error" })
    .increment(1);
    response.into()
}

/// Whether the document holds a mutation (any of its operations: `operationName` may pick
/// one that is not first). A document that does not parse is left to the executor to refuse.
fn is_mutation(query: &str) -> bool {
    use async_graphql::parser::types::{DocumentOperations, OperationType};
    let Ok(document) = async_graphql::parser::parse_query(query) else {
        return false;
    };
    let is =
        |op: &async_graphql::parser::types::OperationDefinition| op.ty == OperationType::Mutation;
    match &document.operations {
        DocumentOperations::Single(op) => is(&op.node),
        DocumentOperations::Multiple(ops) => ops.values().any(|op| is(&op.node)),
    }
}

/// `GET /graphql`: GraphiQL for a browser; a query for anything else.
pub async fn graphql_get(
    State(state): State<AppState>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"));
    if wants_html && request.uri().query().is_none() {
        return graphiql::page(&state).into_response();
    }
    let (mut parts, body) = request.into_parts();
    let actor = match <Actor as axum::extract::FromRequestParts<AppState>>::from_request_parts(
        &mut parts, &state,
    )
    .await
    {
        Ok(actor) => actor,
        Err(err) => return refused(err),
    };
    let request = axum::extract::Request::from_parts(parts, body);
    match <GraphQLRequest as axum::extract::FromRequest<AppState>>::from_request(request, &state)
        .await
    {
        Ok(graphql) => execute(state, actor, Method::GET, graphql)
            .await
            .into_response(),
        Err(rejection) => rejection.into_response(),
    }
}

/// How often an open socket's credential is checked again (revoked, expired), besides on
/// every operation.
const SOCKET_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a socket may take to send `connection_init` (the protocol's
/// `connectionInitWaitTimeout`; closed with 4408 after it).
const SOCKET_INIT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Messages queued for one socket; past this the subscriptions wait for the client to read.
const SOCKET_QUEUE: usize = 64;
/// A socket that takes no message for this long is closed (it resumes from its `seq`).
const SOCKET_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `GET /graphql/ws`: subscriptions (and queries and mutations) over `graphql-transport-ws`.
///
/// Close codes: `4403` the credential was revoked, expired or stopped authenticating (every
/// operation is authorised as of now); `4408` no `connection_init` within 10 s; `1001` the
/// server is shutting down. A client that reads nothing for 30 s is disconnected.
pub async fn graphql_ws(
    State(state): State<AppState>,
    protocol: GraphQLProtocol,
    address: crate::api::extract::ClientAddress,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let header_credential = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    upgrade
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        .on_upgrade(move |socket| {
            let schema = state.graphql.clone();
            // At shutdown the subscriptions complete (their watches end), the server stops
            // reading, and the connection is closed with 1001 Going Away.
            let shutdown = state.changes.shutdown().clone();
            let sockets = state.changes.sockets().clone();
            let session = Arc::new(guard::SocketSession::default());
            let (mut to_socket, from_socket) = socket.split();
            let (to_client, mut outgoing) =
                futures::channel::mpsc::channel::<Message>(SOCKET_QUEUE);
            let closing = {
                let shutdown = shutdown.clone();
                let killed = session.closed().clone();
                async move {
                    tokio::select! {
                        () = shutdown.cancelled() => {
                            // Long enough for the subscriptions' `complete` messages to go out.
                            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                        }
                        () = killed.cancelled() => {}
                    }
                }
            };
            let incoming = from_socket.take_until(Box::pin(closing));
            let forward = {
                let session = session.clone();
                async move {
                    while let Some(message) = outgoing.next().await {
                        match tokio::time::timeout(SOCKET_SEND_TIMEOUT, to_socket.send(message))
                            .await
                        {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => return,
                            Err(_) => {
                                tracing::info!(
                                    "a GraphQL WebSocket read nothing for 30 s; disconnected"
                                );
                                session.close_with(1008, "the client read nothing for 30 s");
                                return;
                            }
                        }
                    }
                    let close = if let Some(closed) = session.close_reason() {
                        Some(closed)
                    } else if shutdown.is_cancelled() {
                        Some((1001, "the server is shutting down".to_owned()))
                    } else {
                        None
                    };
                    if let Some((code, reason)) = close {
                        let frame = Message::Close(Some(CloseFrame {
                            code,
                            reason: reason.into(),
                        }));
                        let _ =
                            tokio::time::timeout(SOCKET_SEND_TIMEOUT, to_socket.send(frame)).await;
                    }
                    let _ = tokio::time::timeout(SOCKET_SEND_TIMEOUT, to_socket.close()).await;
                }
            };
            let watchdog = socket_watchdog(state.clone(), session.clone());
            let served = GraphQLWebSocket::new_with_pair(to_client, incoming, schema, protocol)
                .on_connection_init({
                    let session = session.clone();
                    move |payload| async move {
                        // The payload's credential, else the upgrade request's header.
                        let credential = payload
                            .get("Authorization")
                            .or_else(|| payload.get("authorization"))
                            .and_then(|v| v.as_str())
                            .map(str::to_owned)
                            .or(header_credential);
                        let actor = state
                            .auth
                            .authenticate(credential.as_deref())
                            .await
                            .map_err(|err| async_graphql::Error::new(err.to_string()))?;
                        // The same per-caller budget as REST, for the connection and then
                        // for every operation on it.
                        state.limiter.check(&actor.key()).map_err(|wait| {
                            async_graphql::Error::new(format!(
                                "too many requests; retry in {} s",
                                wait.as_secs().max(1)
                            ))
                        })?;
                        // Kept to authenticate every operation again (the actor is not
                        // kept: each operation gets the one its credential is now).
                        session.set_credential(credential.unwrap_or_default());
                        let mut data = Data::default();
                        data.insert(loaders::Batch::per_request(state.ctx.clone()));
                        data.insert(state.clone());
                        data.insert(session);
                        data.insert(address);
                        Ok(data)
                    }
                })
                .serve();
            sockets.track_future(async move {
                // `served` ends when the client goes, at shutdown, or when the watchdog
                // closes the session; dropping its sender then ends `forward`, which closes
                // the socket.
                tokio::select! {
                    ((), ()) = async { tokio::join!(served, forward) } => {}
                    () = watchdog => {}
                }
            })
        })
}

/// Closes the socket when its credential stops holding (checked every [`SOCKET_RECHECK`],
/// so even a socket running no new operation ends), or when it never sends
/// `connection_init`. Runs until then; never returns otherwise.
async fn socket_watchdog(state: AppState, session: Arc<guard::SocketSession>) {
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(SOCKET_RECHECK);
    loop {
        tokio::select! {
            () = session.closed().cancelled() => break,
            _ = tick.tick() => {}
        }
        if session.credential().is_none() {
            if started.elapsed() >= SOCKET_INIT_WAIT {
                session.close_with(4408, "Connection initialisation timeout");
            }
            continue;
        }
        // Closes the session itself when the credential no longer holds.
        let _ = session.authenticate(&state, true).await;
    }
    // Let `served` and `forward` finish the close; they end within the send timeout.
    std::future::pending::<()>().await
}
