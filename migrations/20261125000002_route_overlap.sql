-- One home for the rule that two route paths on the same Gateway and hostname overlap: one
-- would receive the other's requests (equal, either is the root, or one is a segment-wise
-- prefix of the other). Used by every query that checks a route against the others.
create function route_paths_overlap(a text, b text) returns boolean
    language sql immutable strict parallel safe
as $$
    select a = b or a = '/' or b = '/' or starts_with(a, b || '/') or starts_with(b, a || '/')
$$;
