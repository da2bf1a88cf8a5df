//! What every GraphQL operation passes before it runs, whichever way it came (a POST, a GET
//! or a message on a WebSocket):
//!
//! - on a WebSocket, the caller is authenticated again, as of now, for every operation: a
//!   revoked or expired credential (API token or OIDC) runs nothing more, and the socket is
//!   closed with `4403` (see [`SocketSession`]);
//! - the caller's rate budget is charged per operation on a socket and per mutation field
//!   in a document (300 aliased mutations cost 300 requests, not one), and a document may
//!   hold at most [`GraphqlLimits::max_mutations`] mutation fields;
//! - a document may use at most [`GraphqlLimits::max_aliases`] aliases (each field that reads
//!   the database also costs [`super::DB_COST`] in the complexity limit).

use std::sync::{Arc, Mutex, OnceLock};

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextPrepareRequest,
};
use async_graphql::parser::types::{
    DocumentOperations, ExecutableDocument, Field, OperationType, Selection, SelectionSet,
};
use async_graphql::{Pos, Request, ServerError, ServerResult, Variables};
use tokio_util::sync::CancellationToken;

use super::GraphqlLimits;
use crate::api::AppState;
use crate::api::error::ApiError;
use crate::auth::AuthError;
use crate::domain::FieldErrors;
use crate::service::Actor;

/// The WebSocket close code for a connection whose credential stopped holding: 4403, the
/// `graphql-transport-ws` protocol's "Forbidden".
pub const CLOSE_FORBIDDEN: u16 = 4403;

/// One WebSocket connection's credential, kept to authenticate every operation again, and
/// the switch that closes the socket when the credential dies.
#[derive(Default)]
pub struct SocketSession {
    /// The `Authorization` value `connection_init` authenticated with.
    credential: OnceLock<String>,
    closed: CancellationToken,
    /// The close code and reason, once closed.
    reason: Mutex<Option<(u16, String)>>,
}

impl SocketSession {
    pub fn set_credential(&self, credential: String) {
        let _ = self.credential.set(credential);
    }

    pub fn credential(&self) -> Option<&str> {
        self.credential.get().map(String::as_str)
    }

    /// Ends the connection: its socket is closed with [`CLOSE_FORBIDDEN`] and `reason`.
    pub fn close(&self, reason: String) {
        self.close_with(CLOSE_FORBIDDEN, reason);
    }

    /// Ends the connection with the close `code` and `reason` (the first one given stays).
    pub fn close_with(&self, code: u16, reason: impl Into<String>) {
        let mut slot = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some((code, reason.into()));
        }
        self.closed.cancel();
    }

    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    /// The close code and reason, if the connection was closed.
    pub fn close_reason(&self) -> Option<(u16, String)> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Authenticates the connection's credential as of now; with `close`, closes the socket
    /// when it no longer holds. `Ok(None)`: the database could not answer (nothing closed).
    pub async fn authenticate(
        &self,
        state: &AppState,
        close: bool,
    ) -> Result<Option<Actor>, String> {
        match state.auth.authenticate(self.credential()).await {
            Ok(actor) => Ok(Some(actor)),
            Err(AuthError::Internal(err)) => {
                tracing::warn!(error = %err, "cannot check a WebSocket's credential");
                Ok(None)
            }
            Err(err) => {
                let reason = err.to_string();
                if close {
                    tracing::info!(reason = %reason, "a GraphQL WebSocket's credential no longer holds; closing it");
                    self.close(reason.clone());
                }
                Err(reason)
            }
        }
    }
}

/// The extension, installed on the schema.
pub struct Guard(pub GraphqlLimits);

impl ExtensionFactory for Guard {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(GuardExtension(self.0))
    }
}

struct GuardExtension(GraphqlLimits);

fn refused(err: ApiError) -> ServerError {
    super::errors::api_error(err).into_server_error(Pos::default())
}

#[async_graphql::async_trait::async_trait]
impl Extension for GuardExtension {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        mut request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        // Over HTTP the `Actor` extractor authenticated and charged this request already.
        if let Some(session) = ctx.data_opt::<Arc<SocketSession>>() {
            let state = ctx
                .data::<AppState>()
                .map_err(|e| e.into_server_error(Pos::default()))?;
            // Refused now; the watchdog closes the socket within seconds (closing here
            // would cut off this refusal's answer).
            let actor = match session.authenticate(state, false).await {
                Ok(Some(actor)) => actor,
                Ok(None) => {
                    return Err(refused(ApiError::Internal(
                        "the credential could not be checked".into(),
                    )));
                }
                Err(reason) => return Err(refused(ApiError::Unauthorized(reason))),
            };
            state
                .limiter
                .check(&actor.key())
                .map_err(|wait| refused(ApiError::RateLimited(wait)))?;
            request.data.insert(actor);
        }
        next.run(ctx, request).await
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let document = next.run(ctx, query, variables).await?;
        let limits = self.0;
        let aliases = count_aliases(&document, limits.max_aliases);
        if aliases > limits.max_aliases {
            return Err(refused(ApiError::Invalid(FieldErrors::single(
                "query",
                format!(
                    "the document uses more than {} aliases; split it into several requests",
                    limits.max_aliases
                ),
            ))));
        }
        let mutations = count_mutation_fields(&document, limits.max_mutations);
        if mutations > limits.max_mutations {
            return Err(refused(ApiError::Invalid(FieldErrors::single(
                "query",
                format!(
                    "a document may hold at most {} mutations; send the rest in further requests",
                    limits.max_mutations
                ),
            ))));
        }
        // The request itself was charged once; each further mutation is charged too.
        if mutations > 1
            && let (Some(state), Some(actor)) =
                (ctx.data_opt::<AppState>(), ctx.data_opt::<Actor>())
        {
            state
                .limiter
                .check_n(&actor.key(), (mutations - 1) as u32)
                .map_err(|wait| refused(ApiError::RateLimited(wait)))?;
        }
        Ok(document)
    }
}

/// How deep fragment spreads are followed while counting (cycles are refused later, by
/// validation; this only stops the count from looping on them).
const MAX_FRAGMENT_DEPTH: usize = 32;

/// The aliases the document would execute (fragments counted where they are spread),
/// counting no further than just past `cap`.
fn count_aliases(document: &ExecutableDocument, cap: usize) -> usize {
    let mut count = 0;
    for (_, operation) in document.operations.iter() {
        let selections = &operation.node.selection_set.node;
        count_fields(
            document,
            selections,
            0,
            cap,
            &mut count,
            &|f| f.alias.is_some(),
            true,
        );
    }
    count
}

/// The most mutation fields any one mutation operation of the document holds at its root
/// (an operation name picks one to run), counting no further than just past `cap`.
fn count_mutation_fields(document: &ExecutableDocument, cap: usize) -> usize {
    let is_field = |f: &Field| !f.name.node.starts_with("__");
    let count_root = |set: &SelectionSet| {
        let mut count = 0;
        count_fields(document, set, 0, cap, &mut count, &is_field, false);
        count
    };
    match &document.operations {
        DocumentOperations::Single(op) if op.node.ty == OperationType::Mutation => {
            count_root(&op.node.selection_set.node)
        }
        DocumentOperations::Single(_) => 0,
        DocumentOperations::Multiple(ops) => ops
            .values()
            .filter(|op| op.node.ty == OperationType::Mutation)
            .map(|op| count_root(&op.node.selection_set.node))
            .max()
            .unwrap_or(0),
    }
}

/// Adds to `count` the fields of `set` that `counts` picks, through fragments (inline and
/// spread, where they are spread) and, with `nested`, through the fields' own selections.
fn count_fields(
    document: &ExecutableDocument,
    set: &SelectionSet,
    depth: usize,
    cap: usize,
    count: &mut usize,
    counts: &dyn Fn(&Field) -> bool,
    nested: bool,
) {
    if depth > MAX_FRAGMENT_DEPTH {
        return;
    }
    for selection in &set.items {
        if *count > cap {
            return;
        }
        let inner = match &selection.node {
            Selection::Field(field) => {
                *count += usize::from(counts(&field.node));
                if !nested {
                    continue;
                }
                (&field.node.selection_set.node, depth)
            }
            Selection::InlineFragment(fragment) => (&fragment.node.selection_set.node, depth + 1),
            Selection::FragmentSpread(spread) => {
                match document.fragments.get(&spread.node.fragment_name.node) {
                    Some(fragment) => (&fragment.node.selection_set.node, depth + 1),
                    None => continue,
                }
            }
        };
        count_fields(document, inner.0, inner.1, cap, count, counts, nested);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> ExecutableDocument {
        async_graphql::parser::parse_query(query).expect("parses")
    }

    #[test]
    fn aliases_are_counted_where_fragments_are_spread() {
        let doc = parse(
            "query { a: viewer { name } b: viewer { name } ...F ...F }
             fragment F on Query { c: viewer { n: name } }",
        );
        assert_eq!(count_aliases(&doc, 100), 6);
        // Counting stops just past the cap.
        assert_eq!(count_aliases(&doc, 2), 3);
    }

    #[test]
    fn mutation_fields_count_aliases_fragments_and_the_largest_operation() {
        let doc = parse(
            "mutation A { a: restartDeployment(project: \"p\", name: \"x\") { id } \
             b: restartDeployment(project: \"p\", name: \"x\") { id } ...M __typename } \
             mutation B { a: restartDeployment(project: \"p\", name: \"x\") { id } } \
             fragment M on Mutation { c: restartDeployment(project: \"p\", name: \"x\") { id } }",
        );
        assert_eq!(count_mutation_fields(&doc, 100), 3);
        assert_eq!(
            count_mutation_fields(&parse("query { viewer { name } }"), 100),
            0
        );
    }

    #[test]
    fn a_fragment_cycle_does_not_loop() {
        let doc = parse(
            "query { ...A } fragment A on Query { x: viewer { name } ...B } \
             fragment B on Query { ...A }",
        );
        assert!(count_aliases(&doc, 10_000) > 0);
    }
}
