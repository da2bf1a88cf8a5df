-- The change feed: one row for every committed change to a deployment (spec, status, the
-- restart marker, deletion, a new timeline event), numbered in commit order, announced with
-- NOTIFY. Subscribers (SSE, GraphQL) resume from a sequence number; rows carry ids only.
--
-- Rows are written by deferred constraint triggers, which run at COMMIT: the advisory lock
-- they take is held only from there to the end of the commit, so sequence numbers follow
-- commit order (a reader that has seen `seq` N has seen every change committed before it)
-- without serialising the transactions themselves.
create table deployment_change (
    seq           bigint generated always as identity primary key,
    project_id    uuid not null,
    deployment_id uuid not null,
    -- created | spec | status | restart | deleting | deleted | event
    kind          text not null,
    -- For `event`: the timeline entry.
    event_id      bigint,
    created_at    timestamptz not null default now()
);
create index deployment_change_project_idx on deployment_change (project_id, seq);
create index deployment_change_created_idx on deployment_change (created_at);

create function record_deployment_change() returns trigger language plpgsql as $$
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

create constraint trigger deployment_changed
    after insert or update or delete on model_deployment
    deferrable initially deferred
    for each row execute function record_deployment_change();

create constraint trigger deployment_event_added
    after insert on deployment_event
    deferrable initially deferred
    for each row execute function record_deployment_change();
