//! Integration tests of the REST API over HTTP, each against a fresh database.

mod access;
mod canary;
mod conformance;
mod creates;
mod deployments;
mod errors;
mod graphql;
mod hardening;
mod hot_connections;
mod load;
mod lookups;
mod metrics;
mod model_key_limits;
mod model_keys;
mod openapi;
mod paging;
mod portal;
mod projects;
mod quota;
mod routing;
mod security;
mod sign_in;
mod validation;
mod watch;

use modelplane_testkit::server as common;
