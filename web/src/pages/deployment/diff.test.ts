import { describe, expect, it } from 'vitest';
import { canonical, diffLines, mergePatch } from './diff';

describe('diffLines', () => {
  it('marks only the changed lines', () => {
    const diff = diffLines('a\nb\nc\nd', 'a\nB\nc\nd\ne');
    expect(diff).toEqual([
      { kind: 'same', text: 'a' },
      { kind: 'del', text: 'b' },
      { kind: 'add', text: 'B' },
      { kind: 'same', text: 'c' },
      { kind: 'same', text: 'd' },
      { kind: 'add', text: 'e' },
    ]);
  });

  it('compares specs independently of key order', () => {
    const before = canonical({ replicas: 1, model: { source: 'hf://a/b' } });
    const after = canonical({ model: { source: 'hf://a/b' }, replicas: 2 });
    const changed = diffLines(before, after).filter((l) => l.kind !== 'same');
    expect(changed).toEqual([
      { kind: 'del', text: '  "replicas": 1' },
      { kind: 'add', text: '  "replicas": 2' },
    ]);
  });
});

describe('mergePatch', () => {
  it('sends changed members, nulls for removed ones, and nothing for the same', () => {
    const from = { replicas: 1, labels: { team: 'a', tier: 'x' }, engine: { kind: 'sim' } };
    const to = { replicas: 2, labels: { team: 'a' }, engine: { kind: 'sim' } };
    expect(mergePatch(from, to)).toEqual({ replicas: 2, labels: { tier: null } });
  });
});
