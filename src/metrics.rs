//! Every metric the process exports: its name, type, labels and meaning, in one place.
//!
//! Code records with the `metrics` crate's macros and a name from here
//! (`metrics::counter!(crate::metrics::RECONCILES, ...)`); [`describe`] gives each its
//! `# HELP` text once the recorder is installed. The README's metrics table is this
//! catalogue (`tests/api/metrics.rs` checks it with [`readme_table`]).

use metrics::Unit;
use sqlx::PgPool;

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric of the catalogue.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<Unit>,
    pub labels: &'static [&'static str],
    /// The `# HELP` text, also the README's "Meaning".
    pub help: &'static str,
}

/// Declares each metric's name constant (documented with its type, labels and meaning) and
/// its entry in [`ALL`], from one text.
macro_rules! catalogue {
    ($(
        $id:ident = $name:literal, $kind:ident $(in $unit:ident)?, [$($label:literal),*], $help:literal;
    )*) => {
        $(
            #[doc = concat!(stringify!($kind), " `", $name, "`",
                $(" in ", stringify!($unit),)? ", labels [", $("`", $label, "` ",)* "]: ", $help)]
            pub const $id: &str = $name;
        )*

        /// Every metric, in the README's order.
        pub const ALL: &[Metric] = &[$(
            Metric {
                name: $name,
                kind: Kind::$kind,
                unit: catalogue!(@unit $($unit)?),
                labels: &[$($label),*],
                help: $help,
            },
        )*];
    };
    (@unit) => { None };
    (@unit $unit:ident) => { Some(Unit::$unit) };
}

catalogue! {
    HTTP_REQUESTS = "modelplane_http_requests_total", Counter,
        ["method", "route", "status"],
        "HTTP requests answered, by method (standard methods, else OTHER), matched route template (or unmatched) and status code.";
    HTTP_REQUEST_DURATION = "modelplane_http_request_duration_seconds", Histogram in Seconds,
        ["method", "route", "status"],
        "HTTP request latency in seconds, by method, route template and status code.";
    HTTP_CONNECTIONS_OPEN = "modelplane_http_connections_open", Gauge,
        [],
        "HTTP connections open on the API's listener (WebSockets and streams included).";
    HTTP_CONNECTIONS_REFUSED = "modelplane_http_connections_refused_total", Counter,
        ["reason"],
        "Connections closed as soon as accepted, by the cap they were over (max_connections, max_connections_per_address).";
    STREAMS_REFUSED = "modelplane_streams_refused_total", Counter,
        ["reason"],
        "Watches and subscriptions refused, by the cap they were over (per_caller, per_address).";
    GRAPHQL_REQUESTS = "modelplane_graphql_requests_total", Counter,
        ["outcome"],
        "GraphQL operations over HTTP, by outcome (ok, error).";
    DB_POOL_CONNECTIONS = "modelplane_db_pool_connections", Gauge,
        ["pool"],
        "Database connections a pool holds open, idle or in use, by pool (api: requests; worker: the reconciler's own, which requests cannot take), read at each scrape and worker loop.";
    DB_POOL_IDLE_CONNECTIONS = "modelplane_db_pool_idle_connections", Gauge,
        ["pool"],
        "Open database connections a pool holds idle, by pool; open minus idle are in use.";
    DB_POOL_MAX_CONNECTIONS = "modelplane_db_pool_max_connections", Gauge,
        ["pool"],
        "The most connections a pool opens, by pool (MODELPLANE_DB_MAX_CONNECTIONS, MODELPLANE_DB_WORKER_CONNECTIONS).";
    DB_LOOKUPS_PER_STATEMENT = "modelplane_db_lookups_per_statement", Histogram in Count,
        [],
        "Deployment gets read from Postgres in one statement: how many per statement (more than 1 only while gets arrive faster than Postgres answers).";
    DB_CREATES_PER_STATEMENT = "modelplane_db_creates_per_statement", Histogram in Count,
        [],
        "Deployment creates committed in one transaction: how many per transaction (more than 1 only while creates arrive faster than Postgres commits them).";
    KUBERNETES_REQUESTS = "modelplane_kubernetes_requests_total", Counter,
        ["verb", "kind"],
        "Kubernetes API requests the reconciler made, by verb and object kind.";
    RECONCILES = "modelplane_reconcile_total", Counter,
        ["outcome"],
        "Reconciles finished, by outcome (ok, error).";
    RECONCILE_ERRORS = "modelplane_reconcile_errors_total", Counter,
        ["kind"],
        "Reconciler failures, by kind (api_refused, forbidden, cluster_unreachable, database, timeout, internal, config); forbidden counts every 403 answer to a write, Kubernetes Events included.";
    RECONCILE_DURATION = "modelplane_reconcile_duration_seconds", Histogram in Seconds,
        ["outcome"],
        "Reconcile duration in seconds, by outcome (ok, error).";
    QUEUE_DEPTH = "modelplane_reconcile_queue_depth", Gauge,
        [],
        "Work items in the reconciler's queue, waiting or leased (set at each scrape, and by the worker when it is idle).";
    QUEUE_OLDEST_AGE = "modelplane_reconcile_oldest_item_age_seconds", Gauge in Seconds,
        [],
        "Seconds since the oldest work item in the queue was enqueued, 0 when empty (set by the worker when it is idle).";
    WATCH_RESTARTS = "modelplane_watch_restarts_total", Counter,
        ["kind"],
        "Kubernetes watches interrupted and restarted (with backoff), by watched kind.";
    CAPACITY_REFUSALS = "modelplane_capacity_refusals_total", Counter,
        ["reason"],
        "Changes refused at write time for GPUs, by reason (quota: past a project's quota; never_fits: a replica no node can hold).";
    GPUS = "modelplane_gpus", Gauge,
        ["resource", "product", "state"],
        "The cluster's GPUs as the worker's inventory last wrote them, by resource name, product (empty: none) and state (allocatable, requested, free).";
    WORKER_HEARTBEAT = "modelplane_worker_heartbeat_timestamp_seconds", Gauge in Seconds,
        [],
        "Unix time of the worker loop's last beat.";
    LOAD_ROUNDS = "modelplane_load_rounds_total", Counter,
        ["outcome"],
        "Rounds of serving-metric readings the collecting worker wrote, by outcome (ok, error: the round could not be written).";
    LOAD_ROUND_DURATION = "modelplane_load_round_duration_seconds", Histogram in Seconds,
        [],
        "How long one round of serving-metric readings took: listing pods, reading them (or Prometheus), writing to Postgres.";
    LOAD_POD_READS = "modelplane_load_pod_reads_total", Counter,
        ["outcome"],
        "Model-server metrics pages read, by outcome (ok; error: unreachable, timed out, too large, not the text format, none of the engine's metrics).";
    AUTOSCALER_DECISIONS = "modelplane_autoscaler_scaled_total", Counter,
        ["direction"],
        "Replica counts the autoscaler changed, by direction (up, down); the activator's scale-ups from zero count as up.";
    ACTIVATOR_HELD = "modelplane_activator_held_requests", Gauge,
        [],
        "Requests the activator holds now, waiting for a deployment at zero to start a replica.";
    ACTIVATOR_REQUESTS = "modelplane_activator_requests_total", Counter,
        ["outcome"],
        "Requests that reached the activator, by outcome (forwarded, too_many, timed_out, not_found, not_serving, unreachable, too_large).";
    ACTIVATOR_WAIT = "modelplane_activator_wait_seconds", Histogram in Seconds,
        [],
        "How long a request waited in the activator for an available replica.";
    KEY_CHECKS = "modelplane_key_checks_total", Counter,
        ["outcome"],
        "Model key checks the Gateway asked for, by outcome (allowed, unauthenticated, forbidden, rate_limited, error).";
    KEY_CHECK_SECONDS = "modelplane_key_check_seconds", Histogram in Seconds,
        [],
        "How long the key check took to answer the Gateway.";
}

/// Upper bounds, in seconds, of the buckets of every histogram (all are durations).
pub const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of [`KEY_CHECK_SECONDS`]: the check answers in well under a millisecond, and
/// the Gateway waits on it for every request.
pub const KEY_CHECK_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0,
];

/// Buckets of [`DB_LOOKUPS_PER_STATEMENT`] and [`DB_CREATES_PER_STATEMENT`] (counts, up to
/// `store::lookups::MAX_BATCH` and `store::creates::MAX_BATCH`).
pub const BATCH_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// Gives every metric its description and unit; call once the recorder is installed.
pub fn describe() {
    for metric in ALL {
        let (name, help) = (metric.name, metric.help);
        match (metric.kind, metric.unit) {
            (Kind::Counter, Some(unit)) => metrics::describe_counter!(name, unit, help),
            (Kind::Counter, None) => metrics::describe_counter!(name, help),
            (Kind::Gauge, Some(unit)) => metrics::describe_gauge!(name, unit, help),
            (Kind::Gauge, None) => metrics::describe_gauge!(name, help),
            (Kind::Histogram, Some(unit)) => metrics::describe_histogram!(name, unit, help),
            (Kind::Histogram, None) => metrics::describe_histogram!(name, help),
        }
    }
}

/// Sets the pool gauges from `pool` (cheap: counters the pool keeps, no query).
pub fn record_pool(pool: &PgPool, name: &'static str) {
    let open = pool.size();
    let idle = pool.num_idle();
    metrics::gauge!(DB_POOL_CONNECTIONS, "pool" => name).set(f64::from(open));
    metrics::gauge!(DB_POOL_IDLE_CONNECTIONS, "pool" => name).set(idle as f64);
    metrics::gauge!(DB_POOL_MAX_CONNECTIONS, "pool" => name)
        .set(f64::from(pool.options().get_max_connections()));
}

/// The README's table of metrics, as Markdown (header included).
pub fn readme_table() -> String {
    let mut table = String::from("| Metric | Type | Labels | Meaning |\n|---|---|---|---|\n");
    for metric in ALL {
        let labels = if metric.labels.is_empty() {
            "—".to_owned()
        } else {
            metric
                .labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        table.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            metric.name,
            metric.kind.as_str(),
            labels,
            metric.help
        ));
    }
    table
}
