// The server names the place where an answer or edited arguments do not fit their JSON
// Schema: "the answer does not fit the question's form: at /age: must be >= 0 but found -1".
// These helpers put such a message at its field.

/** The JSON Pointer and the message of "… at /a/b: message", or null. */
export function schemaErrorPlace(message: string): { path: string[]; message: string } | null {
  const m = /\bat (\/[^:]*): (.+)$/s.exec(message);
  if (!m) return null;
  const path = m[1]
    .split('/')
    .slice(1)
    .filter((p) => p !== '')
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  return { path, message: m[2] };
}

/** An error schema (as @rjsf/core's extraErrors) putting the message at its field. */
export type ErrorTree = { __errors?: string[]; [key: string]: ErrorTree | string[] | undefined };

export function errorTreeFor(message: string | null): ErrorTree | undefined {
  if (!message) return undefined;
  const place = schemaErrorPlace(message);
  if (!place) return undefined;
  const root: ErrorTree = {};
  let node = root;
  for (const key of place.path) {
    const child: ErrorTree = {};
    node[key] = child;
    node = child;
  }
  node.__errors = [place.message];
  return root;
}
