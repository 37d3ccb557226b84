/**
 * Places `delta` at `offset` (counted in Unicode code points): the result is the first
 * `offset` code points of `text` followed by `delta`. Applying a chunk twice, or a
 * coalesced chunk that covers text already shown, therefore changes nothing.
 */
export function placeAt(text: string, offset: number, delta: string): string {
  let i = 0; // UTF-16 index
  let cp = 0; // code points passed
  while (cp < offset && i < text.length) {
    const c = text.charCodeAt(i);
    i += c >= 0xd800 && c <= 0xdbff && i + 1 < text.length ? 2 : 1;
    cp++;
  }
  // An offset beyond the text held cannot happen on a gap-free stream; keep what we have.
  return text.slice(0, i) + delta;
}
