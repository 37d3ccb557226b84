// The conversation is a tree: each message has a parent (null for the first), and the
// messages with the same parent are versions of one another (an edited message, a
// regenerated reply). The page shows one branch, the session's current one, from its first
// message down to its leaf; these are the pure rules for finding it from parent links.

/** A message's parent: its ID, null for a first message, undefined when the page does not know it. */
export type ParentOf = (id: string) => string | null | undefined;

export interface Branch {
  /** The branch's messages, oldest first. */
  ids: string[];
  /**
   * How many messages of the branch shown before are kept in front (its shared start);
   * -1 when the branch was found all the way up to its first message without meeting it.
   */
  kept: number;
}

/**
 * The branch that ends with `leafId`, from what the page has: walking up the parent links
 * from the leaf until a message of the branch shown now (whose messages before it stay, as
 * loaded, earlier pages included) or the first message. Null when a link is missing: the
 * page has to ask the server.
 */
export function branchTo(leafId: string, shown: readonly string[], parentOf: ParentOf): Branch | null {
  const index = new Map(shown.map((id, i) => [id, i]));
  const chain: string[] = [];
  const seen = new Set<string>();
  let id: string | null = leafId;
  while (id !== null) {
    const at = index.get(id);
    if (at !== undefined) return { ids: [...shown.slice(0, at + 1), ...chain.reverse()], kept: at + 1 };
    if (seen.has(id)) return null; // a loop: no tree to trust
    seen.add(id);
    const parent = parentOf(id);
    if (parent === undefined) return null;
    chain.push(id);
    id = parent;
  }
  return { ids: chain.reverse(), kept: -1 };
}

export interface SiblingPosition {
  /** 1-based place among the versions, oldest first. */
  index: number;
  count: number;
  previousId: string | null;
  nextId: string | null;
}

/** Where a message is among its versions; null when it has none besides itself. */
export function siblingPosition(id: string, siblingIds: readonly string[] | null | undefined): SiblingPosition | null {
  if (!siblingIds || siblingIds.length < 2) return null;
  const i = siblingIds.indexOf(id);
  if (i < 0) return null;
  return {
    index: i + 1,
    count: siblingIds.length,
    previousId: i > 0 ? siblingIds[i - 1] : null,
    nextId: i < siblingIds.length - 1 ? siblingIds[i + 1] : null,
  };
}

/**
 * Two copies of one sibling list (oldest first): versions are only ever added, so a copy
 * that lacks what the other has is older. The longer list wins; of two that disagree, the
 * incoming one, with what only the known one has after it.
 */
export function mergeSiblingIds(existing: readonly string[] | undefined, incoming: readonly string[]): string[] {
  if (!existing || existing.length === 0) return [...incoming];
  const have = new Set(incoming);
  const missing = existing.filter((id) => !have.has(id));
  return missing.length === 0 ? [...incoming] : [...incoming, ...missing];
}

/**
 * A message's text only grows (chunks are placed at offsets): an older copy (an answer
 * taken before chunks the page has already shown) does not cut it back.
 */
export function longerText(existing: string | undefined, incoming: string): string {
  if (existing !== undefined && existing.length > incoming.length && existing.startsWith(incoming)) return existing;
  return incoming;
}
