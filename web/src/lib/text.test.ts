import { describe, expect, it } from 'vitest';
import { placeAt } from './text';

describe('placeAt', () => {
  it('appends a chunk at the end', () => {
    expect(placeAt('Hello', 5, ', world')).toBe('Hello, world');
  });

  it('changes nothing when the same chunk comes twice', () => {
    const once = placeAt('You said: ', 10, 'hi');
    expect(placeAt(once, 10, 'hi')).toBe('You said: hi');
  });

  it('takes a coalesced chunk that covers text already shown', () => {
    // "abc" shown; a replay starts at 1 with "bcdef".
    expect(placeAt('abc', 1, 'bcdef')).toBe('abcdef');
  });

  it('counts offsets in code points, not UTF-16 units', () => {
    // 😀 and 𝄞 are two UTF-16 units each, one code point each.
    const text = 'a😀b𝄞';
    expect([...text].length).toBe(4);
    expect(placeAt(text, 2, 'X')).toBe('a😀X');
    expect(placeAt(text, 4, '!')).toBe('a😀b𝄞!');
    expect(placeAt(text, 3, '𝄞 again')).toBe('a😀b𝄞 again');
  });

  it('keeps joined emoji and flags whole (each code point counts)', () => {
    const coder = '👩‍💻'; // woman, zero-width joiner, laptop: 3 code points
    expect(placeAt(`x${coder}`, 4, 'y')).toBe(`x${coder}y`);
    const flag = '🇫🇷'; // 2 regional indicators
    expect(placeAt(flag, 1, '🇷')).toBe(flag);
  });

  it('keeps what it has when the offset is past the text (a gap cannot be filled)', () => {
    expect(placeAt('abc', 10, 'z')).toBe('abcz');
  });

  it('starts over at offset 0', () => {
    expect(placeAt('old', 0, 'new')).toBe('new');
  });
});
