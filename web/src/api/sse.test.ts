import { describe, expect, it } from 'vitest';
import { SseParser } from './sse';

describe('SseParser', () => {
  it('reads events split anywhere across chunks, skipping comments', () => {
    const parser = new SseParser();
    const text = ': keep-alive\n\nid: 7\nevent: state\ndata: {"a":1}\n\nid: 8\r\nevent: status\r\ndata: line one\r\ndata: line two\r\n\r\n';
    const events = [];
    for (let i = 0; i < text.length; i += 5) events.push(...parser.push(text.slice(i, i + 5)));
    expect(events).toEqual([
      { id: '7', event: 'state', data: '{"a":1}' },
      { id: '8', event: 'status', data: 'line one\nline two' },
    ]);
  });

  it('keeps an unfinished event until its blank line arrives', () => {
    const parser = new SseParser();
    expect(parser.push('event: deleted\ndata: {}\n')).toEqual([]);
    expect(parser.push('\n')).toEqual([{ id: null, event: 'deleted', data: '{}' }]);
  });
});
