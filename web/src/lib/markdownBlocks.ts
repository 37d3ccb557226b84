// Splits a Markdown reply that is still being written into its finished blocks and the one
// still open, so that a long streamed reply is parsed block by block: a finished block is
// parsed once (the components memoise it by its text) and only the open one is parsed again
// as chunks arrive. Splitting is incremental too: each call scans only the open block.
//
// A block ends at a blank line outside a fenced code block, unless what follows may belong
// to it: an indented line (a list item's continuation, indented code) or a list item after
// a block with a list in it (a loose list). Splitting a document this way renders it as a
// whole would be rendered, with one exception the splitter avoids: link reference and
// footnote definitions apply to the whole document, so a text that has one is not split.

export interface Blocks {
  /** Finished blocks, in order: no chunk can change them any more. */
  done: string[];
  /** The last block, still growing (may be ""). */
  open: string;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})/;
const LIST_ITEM = /^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)/;
const DEFINITION = /^ {0,3}\[[^\]\n]+\]:/m;
const BLANK = /^[ \t]*$/;

export class BlockSplitter {
  private text = '';
  private done: string[] = [];
  /** Where the open block starts in `text`. */
  private start = 0;
  /** The result of the last call, handed out again while nothing changed. */
  private last: Blocks = { done: [], open: '' };

  split(text: string): Blocks {
    if (text === this.text) return this.last;
    // Chunks only add to the end; anything else (a corrected message) starts over.
    if (text.length < this.start || !text.startsWith(this.text.slice(0, this.start))) this.reset();
    this.text = text;
    if (DEFINITION.test(text)) {
      // Definitions anywhere apply everywhere: parse the text whole.
      this.reset();
      this.text = text;
      this.last = { done: [], open: text };
      return this.last;
    }
    const before = this.done.length;
    this.scan();
    const done = this.done.length === before && this.last.done.length === before ? this.last.done : this.done.slice();
    this.last = { done, open: text.slice(this.start) };
    return this.last;
  }

  private reset() {
    this.text = '';
    this.done = [];
    this.start = 0;
    this.last = { done: [], open: '' };
  }

  /** Moves every finished block of the open region into `done`. */
  private scan() {
    const text = this.text;
    let fence: { char: string; len: number } | null = null;
    let hasList = false;
    let pos = this.start;
    // Lines of the open region; the last one may be incomplete.
    while (pos < text.length) {
      const nl = text.indexOf('\n', pos);
      if (nl < 0) return; // an incomplete last line decides nothing yet
      const line = text.slice(pos, nl);
      const next = nl + 1;
      if (fence) {
        const m = FENCE.exec(line);
        if (m && m[1][0] === fence.char && m[1].length >= fence.len && BLANK.test(line.slice(m[0].length))) fence = null;
        pos = next;
        continue;
      }
      const open = FENCE.exec(line);
      if (open) {
        fence = { char: open[1][0], len: open[1].length };
        pos = next;
        continue;
      }
      if (LIST_ITEM.test(line)) hasList = true;
      if (BLANK.test(line) && pos > this.start) {
        // A blank line: the block before it ends here if the next line, once there, starts
        // something new.
        let after = next;
        while (after < text.length) {
          const end = text.indexOf('\n', after);
          const candidate = text.slice(after, end < 0 ? text.length : end);
          if (!BLANK.test(candidate)) break;
          if (end < 0) return; // only blanks so far
          after = end + 1;
        }
        if (after >= text.length) return;
        const first = text[after];
        const lineEnd = text.indexOf('\n', after);
        const nextLine = text.slice(after, lineEnd < 0 ? text.length : lineEnd);
        if (lineEnd < 0 && nextLine.length < 4 && /^[ \t\d*+\-.)]*$/.test(nextLine)) return; // too little to tell
        const continues = first === ' ' || first === '\t' || (hasList && LIST_ITEM.test(nextLine));
        if (!continues) {
          this.done.push(text.slice(this.start, pos));
          this.start = after;
          hasList = false;
          pos = after;
          continue;
        }
        pos = after;
        continue;
      }
      pos = next;
    }
  }
}

/** The blocks of a whole text at once (for tests and finished messages). */
export function splitBlocks(text: string): Blocks {
  return new BlockSplitter().split(text);
}
