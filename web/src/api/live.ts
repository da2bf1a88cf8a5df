// Live views built on the SSE watch streams (`GET …/watch`): the first events are the
// current state, then every change arrives as it is committed. The results also refresh
// the TanStack Query cache, so every screen showing a deployment follows it. Both watches
// ask for `load` events (`?load=true`): each new serving-metrics reading is merged into the
// deployment's `status.load` (and its canary's), so the current figures follow too.
import { useEffect, useState } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import type { Deployment, TimelineEvent } from './client';
import { withLoad, type LoadUpdate } from './metrics';
import { follow } from './sse';

export interface LiveStatus {
  /** The stream is open. */
  connected: boolean;
  /** The first state has arrived. */
  loaded: boolean;
  error?: string;
}

const enc = encodeURIComponent;

/** Every deployment of a project, live, by name. */
export function useProjectDeployments(project: string | undefined) {
  const client = useQueryClient();
  const [items, setItems] = useState<Map<string, Deployment>>(new Map());
  const [status, setStatus] = useState<LiveStatus>({ connected: false, loaded: false });

  useEffect(() => {
    if (!project) return;
    const abort = new AbortController();
    let current = new Map<string, Deployment>();
    setItems(current);
    setStatus({ connected: false, loaded: false });
    // The initial `state` events come in a burst: publish them together.
    let flush: ReturnType<typeof setTimeout> | undefined;
    const publish = () => {
      flush = undefined;
      setItems(new Map(current));
    };
    void follow(`/api/v1/projects/${enc(project)}/watch?load=true`, {
      signal: abort.signal,
      onStatus: (connected, error) => setStatus((s) => ({ ...s, connected, error: connected ? undefined : error })),
      onEvent: (event) => {
        if (event.event === 'synced') {
          // The starting state is complete: show it at once; an empty map now means an
          // empty project.
          if (flush) clearTimeout(flush);
          publish();
          setStatus((s) => ({ ...s, loaded: true }));
          return;
        } else if (event.event === 'reset') {
          current = new Map();
        } else if (event.event === 'deleted') {
          const { id } = JSON.parse(event.data) as { id: string };
          for (const [name, d] of current) if (d.id === id) current.delete(name);
        } else if (event.event === 'load') {
          const update = JSON.parse(event.data) as LoadUpdate;
          const d = current.get(update.name);
          if (!d || d.id !== update.id) return;
          const next = withLoad(d, update);
          current.set(d.name, next);
          client.setQueryData(['deployment', project, d.name], next);
        } else if (event.event !== 'event') {
          const d = JSON.parse(event.data) as Deployment;
          current.set(d.name, d);
          client.setQueryData(['deployment', project, d.name], d);
        }
        if (!flush) flush = setTimeout(publish, 50);
      },
    });
    return () => {
      abort.abort();
      if (flush) clearTimeout(flush);
    };
  }, [project, client]);

  return { items, status };
}

/** One deployment and its new timeline entries, live. `deleted` once it is gone. */
export function useDeploymentWatch(project: string, name: string) {
  const client = useQueryClient();
  const [deployment, setDeployment] = useState<Deployment | undefined>();
  const [events, setEvents] = useState<TimelineEvent[]>([]);
  const [deleted, setDeleted] = useState(false);
  const [status, setStatus] = useState<LiveStatus>({ connected: false, loaded: false });

  useEffect(() => {
    const abort = new AbortController();
    let current: Deployment | undefined;
    const show = (d: Deployment) => {
      current = d;
      setDeployment(d);
      client.setQueryData(['deployment', project, name], d);
    };
    setDeployment(undefined);
    setEvents([]);
    setDeleted(false);
    void follow(`/api/v1/projects/${enc(project)}/deployments/${enc(name)}/watch?load=true`, {
      signal: abort.signal,
      onStatus: (connected, error) => setStatus((s) => ({ ...s, connected, error: connected ? undefined : error })),
      onEvent: (event) => {
        if (event.event === 'synced') return;
        if (event.event === 'deleted') {
          setDeleted(true);
          client.removeQueries({ queryKey: ['deployment', project, name] });
        } else if (event.event === 'event') {
          const e = JSON.parse(event.data) as TimelineEvent;
          setEvents((list) => (list.some((x) => x.id === e.id) ? list : [...list, e]));
          void client.invalidateQueries({ queryKey: ['revisions', project, name] });
        } else if (event.event === 'load') {
          const update = JSON.parse(event.data) as LoadUpdate;
          if (current?.id === update.id) show(withLoad(current, update));
        } else if (event.event !== 'reset') {
          show(JSON.parse(event.data) as Deployment);
        }
        setStatus((s) => (s.loaded ? s : { ...s, loaded: true }));
      },
    });
    return () => abort.abort();
  }, [project, name, client]);

  return { deployment, events, deleted, status };
}
