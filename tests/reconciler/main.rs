//! The reconciler against the Kubernetes emulator over HTTP, with a real Postgres. The
//! harness is in `harness.rs`; the tests are grouped by what they look at.

mod activation;
mod adapters;
mod admission;
mod autoscaling;
mod canary;
mod capacity;
mod disaggregation;
mod harness;
mod inference_pool;
mod kube_events;
mod lifecycle;
mod load;
mod model_keys;
mod multinode;
mod nodes;
mod objects;
mod outages;
mod processes;
mod prometheus;
mod rbac;
mod shutdown;
mod traces;

use harness::*;
use modelplane_testkit::server as common;
