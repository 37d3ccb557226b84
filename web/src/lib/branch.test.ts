import { describe, expect, it } from 'vitest';
import { branchTo, longerText, mergeSiblingIds, siblingPosition, type ParentOf } from './branch';

/** Parent links of a small tree:  a - b - c - d  with  b' (beside b) - c'  and  d' (beside d). */
const PARENTS: Record<string, string | null> = { a: null, b: 'a', c: 'b', d: 'c', "b'": 'a', "c'": "b'", "d'": 'c' };
const parentOf: ParentOf = (id) => (id in PARENTS ? PARENTS[id] : undefined);

describe('branchTo', () => {
  it('keeps the shared start and adds the new branch below it', () => {
    expect(branchTo("d'", ['a', 'b', 'c', 'd'], parentOf)).toEqual({ ids: ['a', 'b', 'c', "d'"], kept: 3 });
    expect(branchTo("c'", ['a', 'b', 'c', 'd'], parentOf)).toEqual({ ids: ['a', "b'", "c'"], kept: 1 });
  });

  it('a leaf already shown cuts the branch after it', () => {
    expect(branchTo('b', ['a', 'b', 'c', 'd'], parentOf)).toEqual({ ids: ['a', 'b'], kept: 2 });
    expect(branchTo('d', ['a', 'b', 'c', 'd'], parentOf)).toEqual({ ids: ['a', 'b', 'c', 'd'], kept: 4 });
  });

  it('walks up to the first message when nothing shown is on the way', () => {
    expect(branchTo("c'", [], parentOf)).toEqual({ ids: ['a', "b'", "c'"], kept: -1 });
    // A first message edited: its versions share no parent message.
    const roots: ParentOf = (id) => ({ x: null, "x'": null, y: "x'" })[id];
    expect(branchTo('y', ['x'], roots)).toEqual({ ids: ["x'", 'y'], kept: -1 });
  });

  it('joins a history loaded from the middle (earlier pages not loaded stay so)', () => {
    expect(branchTo("d'", ['c', 'd'], parentOf)).toEqual({ ids: ['c', "d'"], kept: 1 });
  });

  it('is null when a parent link is missing (the page asks the server)', () => {
    expect(branchTo('z', ['a', 'b'], parentOf)).toBeNull();
    const gap: ParentOf = (id) => ({ e: 'unknown' })[id];
    expect(branchTo('e', ['a'], gap)).toBeNull();
  });

  it('is null on a loop rather than walking forever', () => {
    const loop: ParentOf = (id) => ({ p: 'q', q: 'p' })[id];
    expect(branchTo('p', ['a'], loop)).toBeNull();
  });
});

describe('siblingPosition', () => {
  it('places a message among its versions, oldest first', () => {
    expect(siblingPosition('b', ['a', 'b', 'c'])).toEqual({ index: 2, count: 3, previousId: 'a', nextId: 'c' });
    expect(siblingPosition('a', ['a', 'b'])).toEqual({ index: 1, count: 2, previousId: null, nextId: 'b' });
    expect(siblingPosition('b', ['a', 'b'])).toEqual({ index: 2, count: 2, previousId: 'a', nextId: null });
  });

  it('is null for a message without other versions, or missing from the list', () => {
    expect(siblingPosition('a', ['a'])).toBeNull();
    expect(siblingPosition('a', [])).toBeNull();
    expect(siblingPosition('a', null)).toBeNull();
    expect(siblingPosition('z', ['a', 'b'])).toBeNull();
  });
});

describe('mergeSiblingIds', () => {
  it('an older (shorter) copy does not lose a version', () => {
    expect(mergeSiblingIds(['a', 'b', 'c'], ['a', 'b'])).toEqual(['a', 'b', 'c']);
    expect(mergeSiblingIds(['a'], ['a', 'b'])).toEqual(['a', 'b']);
    expect(mergeSiblingIds(undefined, ['a'])).toEqual(['a']);
    expect(mergeSiblingIds(['a', 'b'], ['a', 'c'])).toEqual(['a', 'c', 'b']);
  });
});

describe('longerText', () => {
  it('keeps text that an older copy would cut back', () => {
    expect(longerText('chunk 1. chunk 2. ', 'chunk 1. ')).toBe('chunk 1. chunk 2. ');
    expect(longerText('chunk 1. ', 'chunk 1. chunk 2. ')).toBe('chunk 1. chunk 2. ');
    expect(longerText('abc', 'xy')).toBe('xy');
    expect(longerText(undefined, '')).toBe('');
  });
});
