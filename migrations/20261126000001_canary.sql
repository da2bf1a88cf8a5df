-- A deployment's canary track (`…/canary`): its spec, weight and header, while it exists.
-- It lives beside the spec, like the restart marker: changing it is no new generation (the
-- stable track's objects and ETag stay as they are), but the change feed reports it.
alter table model_deployment add column canary jsonb;

create or replace function record_deployment_change() returns trigger language plpgsql as $$
declare
    change_kind text;
    row_project uuid;
    row_deployment uuid;
    row_event bigint;
    new_seq bigint;
begin
    if TG_TABLE_NAME = 'deployment_event' then
        change_kind := 'event';
        row_project := NEW.project_id;
        row_deployment := NEW.deployment_id;
        row_event := NEW.id;
    elsif TG_OP = 'INSERT' then
        change_kind := 'created';
        row_project := NEW.project_id;
        row_deployment := NEW.id;
    elsif TG_OP = 'DELETE' then
        change_kind := 'deleted';
        row_project := OLD.project_id;
        row_deployment := OLD.id;
    else
        row_project := NEW.project_id;
        row_deployment := NEW.id;
        change_kind := case
            when NEW.deletion_requested_at is distinct from OLD.deletion_requested_at then 'deleting'
            when NEW.generation is distinct from OLD.generation then 'spec'
            -- A canary is not part of the spec (no new generation), but what a deployment
            -- is asked to be: subscribers hear of it as a spec change.
            when NEW.canary is distinct from OLD.canary then 'spec'
            when NEW.restarted_at is distinct from OLD.restarted_at then 'restart'
            when NEW.status is distinct from OLD.status then 'status'
        end;
        if change_kind is null then
            -- Bookkeeping only (the applied digest): nothing a subscriber sees.
            return null;
        end if;
    end if;
    -- Held until the commit completes: sequence order is commit order.
    perform pg_advisory_xact_lock(7254017193841);
    insert into deployment_change (project_id, deployment_id, kind, event_id)
    values (row_project, row_deployment, change_kind, row_event)
    returning seq into new_seq;
    perform pg_notify('modelplane_changes', new_seq::text);
    return null;
end
$$;
