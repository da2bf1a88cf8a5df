-- What the worker last applied, so an unchanged record costs no Kubernetes write.
alter table model_deployment add column applied_digest text;
-- When the worker last saw the record's objects, for orphan collection and metrics.
alter table model_deployment add column reconciled_at timestamptz;
-- Which claim of a work item a worker holds: a re-enqueue during processing changes it.
alter table reconcile_work add column claim_token uuid;
