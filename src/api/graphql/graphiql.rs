//! GraphiQL, served from this process with no CDN: the page here, its scripts from the npm
//! packages `scripts/graphiql.sh` installs (`graphiql@3`, `react@18`, `react-dom@18`).

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::api::AppState;

/// The files the page loads: name in the URL → path under the packages directory.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "graphiql.min.js",
        "graphiql/graphiql.min.js",
        "text/javascript",
    ),
    ("graphiql.min.css", "graphiql/graphiql.min.css", "text/css"),
    (
        "react.production.min.js",
        "react/umd/react.production.min.js",
        "text/javascript",
    ),
    (
        "react-dom.production.min.js",
        "react-dom/umd/react-dom.production.min.js",
        "text/javascript",
    ),
];

pub fn page(state: &AppState) -> Response {
    let installed = ASSETS
        .iter()
        .all(|(_, path, _)| state.graphiql_assets.join(path).is_file());
    if !installed {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Html(format!(
                "<!doctype html><title>GraphiQL</title><p>GraphiQL's files are not installed in <code>{}</code>: \
                 run <code>scripts/graphiql.sh</code> (the README's run command does). \
                 <code>POST /graphql</code> works without them.</p>",
                state.graphiql_assets.display()
            )),
        )
            .into_response();
    }
    Html(PAGE).into_response()
}

/// `GET /graphql/assets/{file}`: only the files listed above.
pub async fn graphiql_asset(State(state): State<AppState>, Path(file): Path<String>) -> Response {
    let Some((_, path, content_type)) = ASSETS.iter().find(|(name, _, _)| *name == file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match tokio::fs::read(state.graphiql_assets.join(path)).await {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "public, max-age=86400"),
            ],
            bytes,
        )
            .into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>modelplane GraphiQL</title>
<link rel="stylesheet" href="/graphql/assets/graphiql.min.css">
<style>body { margin: 0; height: 100vh; } #graphiql { height: 100vh; }</style>
</head>
<body>
<div id="graphiql">Loading…</div>
<script src="/graphql/assets/react.production.min.js"></script>
<script src="/graphql/assets/react-dom.production.min.js"></script>
<script src="/graphql/assets/graphiql.min.js"></script>
<script>
  // The token is typed into the Headers tab and stays in this tab's storage.
  const fetcher = GraphiQL.createFetcher({ url: '/graphql' });
  ReactDOM.createRoot(document.getElementById('graphiql')).render(
    React.createElement(GraphiQL, {
      fetcher,
      defaultHeaders: '{"Authorization": "Bearer <your token>"}',
      defaultQuery: '{\n  viewer { name roles { project role } }\n}\n',
    }),
  );
</script>
</body>
</html>
"#;
