/**
 * The href a link in an agent's reply may have: http(s) and mailto URLs only; anything else
 * (javascript:, data:, relative paths that would act on this app) is dropped and the link
 * shown as plain text.
 */
export function safeHref(url: string): string | null {
  const u = url.trim();
  if (!/^(?:https?:\/\/|mailto:)/i.test(u)) return null;
  try {
    const parsed = new URL(u);
    return parsed.protocol === 'http:' || parsed.protocol === 'https:' || parsed.protocol === 'mailto:' ? u : null;
  } catch {
    return null;
  }
}
