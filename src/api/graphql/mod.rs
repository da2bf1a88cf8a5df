//! GraphQL at `/graphql`: queries, mutations and subscriptions over the same service layer
//! and authorisation as REST. Resolvers are thin: each is one service call.
//!
//! POST and GET run queries and mutations (GET: queries only); a WebSocket speaking
//! `graphql-transport-ws` runs subscriptions, authenticated by the upgrade's
//! `Authorization` header or the `connection_init` payload's `Authorization`.

mod capacity;
mod errors;
mod graphiql;
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

pub use graphiql::graphiql_asset;

use super::AppState;
use crate::service::Actor;

pub type ModelplaneSchema = Schema<query::Query, mutation::Mutation, subscription::Subscription>;

/// Limits on one GraphQL document. A list field's complexity is its page size times its
/// items' (so 200 deployments with 200 revisions each is refused before it runs).
#[derive(Debug, Clone, Copy)]
pub struct GraphqlLimits {
    pub max_depth: usize,
    pub max_complexity: usize,
    pub introspection: bool,
}

impl Default for GraphqlLimits {
    fn default() -> Self {
        Self {
            max_depth: 12,
            max_complexity: 5000,
            introspection: true,
        }
    }
}

/// The schema; request data (the caller) is added per request.
pub fn schema(limits: GraphqlLimits) -> ModelplaneSchema {
    let builder = Schema::build(query::Query, mutation::Mutation, subscription::Subscription)
        .limit_depth(limits.max_depth)
        .limit_complexity(limits.max_complexity);
    if limits.introspection {
        builder.finish()
    } else {
        builder.disable_introspection().finish()
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

/// `GET /graphql/ws`: subscriptions over `graphql-transport-ws`.
pub async fn graphql_ws(
    State(state): State<AppState>,
    protocol: GraphQLProtocol,
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
            let (mut to_socket, from_socket) = socket.split();
            let (to_client, mut outgoing) = futures::channel::mpsc::unbounded::<Message>();
            let closing = {
                let shutdown = shutdown.clone();
                async move {
                    shutdown.cancelled().await;
                    // Long enough for the subscriptions' `complete` messages to go out.
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                }
            };
            let incoming = from_socket.take_until(Box::pin(closing));
            let forward = async move {
                while let Some(message) = outgoing.next().await {
                    if to_socket.send(message).await.is_err() {
                        return;
                    }
                }
                if shutdown.is_cancelled() {
                    let going_away = Message::Close(Some(CloseFrame {
                        code: 1001,
                        reason: "the server is shutting down".into(),
                    }));
                    let _ = to_socket.send(going_away).await;
                }
                let _ = to_socket.close().await;
            };
            let served = GraphQLWebSocket::new_with_pair(to_client, incoming, schema, protocol)
                .on_connection_init(move |payload| async move {
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
                    // The same per-caller budget as REST.
                    state.limiter.check(&actor.key()).map_err(|wait| {
                        async_graphql::Error::new(format!(
                            "too many requests; retry in {} s",
                            wait.as_secs().max(1)
                        ))
                    })?;
                    let mut data = Data::default();
                    data.insert(loaders::Batch::per_request(state.ctx.clone()));
                    data.insert(state.clone());
                    data.insert(actor);
                    Ok(data)
                })
                .serve();
            sockets.track_future(async move {
                // `served` ends when the client goes or at shutdown; dropping its sender
                // then ends `forward`, which closes the socket.
                tokio::join!(served, forward);
            })
        })
}
