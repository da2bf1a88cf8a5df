// Pieces shared by the tokens, role bindings and audit sections of the settings page.
import { useInfiniteQuery, useQueryClient } from '@tanstack/react-query';
import type { Schemas } from '../../api/client';
import { Field } from '../../components/Field';

export type Role = Schemas['Role'];
export const ROLES: Role[] = ['viewer', 'editor', 'admin'];

/** A cursor-paged list with "Load more". */
export function usePaged<T>(key: unknown[], load: (cursor?: string) => Promise<{ items: T[]; nextCursor?: string | null }>) {
  return useInfiniteQuery({
    queryKey: key,
    queryFn: ({ pageParam }) => load(pageParam),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last) => last.nextCursor ?? undefined,
  });
}

/** After a change to `list`: refetch it and the audit log, which records the change. */
export function useRefresh(list: string, project: string) {
  const client = useQueryClient();
  return () => {
    void client.invalidateQueries({ queryKey: [list, project] });
    void client.invalidateQueries({ queryKey: ['audit', project] });
  };
}

export function LoadMore({ query }: { query: { hasNextPage: boolean; isFetchingNextPage: boolean; fetchNextPage: () => unknown } }) {
  if (!query.hasNextPage) return null;
  return (
    <button type="button" className="btn" onClick={() => query.fetchNextPage()} disabled={query.isFetchingNextPage}>
      {query.isFetchingNextPage ? 'Loading…' : 'Load more'}
    </button>
  );
}

export function RoleField(props: { label: string; error?: string; value: Role; onChange: (role: Role) => void }) {
  return (
    <Field label={props.label} error={props.error}>
      {(a) => (
        <select {...a} value={props.value} onChange={(e) => props.onChange(e.target.value as Role)}>
          {ROLES.map((r) => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
      )}
    </Field>
  );
}
