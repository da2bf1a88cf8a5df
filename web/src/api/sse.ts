// Server-Sent Events over fetch. EventSource cannot send an Authorization header, and the
// token must never go into a URL, so the stream is read by hand (the format is the WHATWG
// "event stream": `id:`, `event:`, `data:` lines, a blank line ends an event).
import { session } from '../auth/session';

export interface SseEvent {
  id: string | null;
  event: string;
  data: string;
}

/** Splits a chunked text stream into events; keeps the unfinished tail between chunks. */
export class SseParser {
  private buffer = '';
  private id: string | null = null;
  private event = '';
  private data: string[] = [];

  push(chunk: string): SseEvent[] {
    this.buffer += chunk;
    const out: SseEvent[] = [];
    let newline: number;
    while ((newline = this.buffer.search(/\r\n|\r|\n/)) >= 0) {
      // A CR that ends the chunk may be the first half of a CRLF: wait for the next chunk.
      if (this.buffer[newline] === '\r' && newline === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, newline);
      const width = this.buffer.startsWith('\r\n', newline) ? 2 : 1;
      this.buffer = this.buffer.slice(newline + width);
      if (line === '') {
        if (this.data.length > 0) out.push({ id: this.id, event: this.event || 'message', data: this.data.join('\n') });
        this.event = '';
        this.data = [];
        continue;
      }
      if (line.startsWith(':')) continue; // a comment (keep-alive)
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') this.data.push(value);
      else if (field === 'event') this.event = value;
      else if (field === 'id') this.id = value;
    }
    return out;
  }
}

export interface StreamOptions {
  onEvent: (event: SseEvent) => void;
  /** Called with `true` when connected, `false` (and the reason) when the stream broke. */
  onStatus?: (connected: boolean, error?: string) => void;
  signal: AbortSignal;
}

/**
 * Follows `url` until `signal` aborts, reconnecting with `Last-Event-ID` after a break, so
 * no change is missed. A 401 ends the session; other HTTP errors are reported and retried.
 */
export async function follow(url: string, { onEvent, onStatus, signal }: StreamOptions): Promise<void> {
  let lastId: string | null = null;
  let delay = 500;
  while (!signal.aborted) {
    try {
      const headers: Record<string, string> = { Accept: 'text/event-stream' };
      const token = session.token();
      if (token) headers.Authorization = `Bearer ${token}`;
      if (lastId) headers['Last-Event-ID'] = lastId;
      const response = await fetch(url, { headers, signal });
      if (response.status === 401) {
        session.expire();
        return;
      }
      if (!response.ok || !response.body) {
        let detail = `HTTP ${response.status}`;
        try {
          const problem = await response.json();
          if (problem?.detail) detail = problem.detail;
        } catch {
          /* not JSON */
        }
        onStatus?.(false, detail);
        if (response.status === 404 || response.status === 403) return;
      } else {
        onStatus?.(true);
        delay = 500;
        const parser = new SseParser();
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          for (const event of parser.push(value)) {
            if (event.id) lastId = event.id;
            onEvent(event);
          }
        }
        onStatus?.(false, 'the live stream ended; reconnecting');
      }
    } catch (e) {
      if (signal.aborted) return;
      onStatus?.(false, e instanceof Error ? e.message : String(e));
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}
