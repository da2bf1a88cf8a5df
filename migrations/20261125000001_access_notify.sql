-- Announces every change that can take access away (or grant it), so each API process
-- empties its cache of tokens, projects and roles (src/service/access_cache.rs). A token's
-- use (`last_used_at`) is not such a change and is not announced.
create function notify_access_change() returns trigger language plpgsql as $$
begin
    perform pg_notify('modelplane_access', TG_TABLE_NAME);
    return null;
end
$$;

create trigger api_token_access_changed
    after update of revoked_at, expires_at, role, project_id, token_hash or delete on api_token
    for each statement execute function notify_access_change();

create trigger project_access_changed
    after update or delete on project
    for each statement execute function notify_access_change();

create trigger role_binding_access_changed
    after insert or update or delete on role_binding
    for each statement execute function notify_access_change();
