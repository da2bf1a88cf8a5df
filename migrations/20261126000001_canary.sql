-- A deployment's canary track (`…/canary`): its spec, weight and header, while it exists.
-- Every change to it bumps the deployment's generation, so the change feed reports it as a
-- spec change and the ETag moves.
alter table model_deployment add column canary jsonb;
