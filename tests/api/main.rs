//! Integration tests of the REST API over HTTP, each against a fresh database.

mod access;
mod common;
mod deployments;
mod errors;
mod openapi;
mod paging;
mod projects;
mod validation;
