-- The W3C traceparent of the request that queued a reconcile, so the reconcile continues
-- its trace (only when traces are exported).
alter table reconcile_work add column trace_parent text;
