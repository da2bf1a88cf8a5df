//! What is known of the request being handled, for every layer of the API to read: its id
//! (set by `middleware::observe`) and the client's address. It imports nothing else of the
//! API, so errors, extractors and middleware all use it without importing one another.

tokio::task_local! {
    /// The id of the request being handled (scoped by `middleware::observe`).
    pub static REQUEST_ID: String;
}

/// The id of the request being handled, if called while handling one.
pub fn current_request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// The peer address of the connection, as text (`unknown` when not served over TCP).
pub fn client_address(extensions: &axum::http::Extensions) -> String {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "unknown".into())
}
