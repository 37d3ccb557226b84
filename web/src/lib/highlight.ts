// Syntax highlighting for code blocks with Shiki, loaded on first use: the chat's first paint
// never waits for it, and each language's grammar is its own chunk, fetched when a code
// block first needs it. Shiki's JavaScript regex engine is used (no WebAssembly).

import type { HighlighterCore, ThemedToken } from 'shiki/core';

export const THEMES = { light: 'github-light-default', dark: 'github-dark-default' } as const;

/** The grammars we ship, by the names and aliases a fence may give. */
const LANGS: Record<string, () => Promise<unknown>> = {
  javascript: () => import('@shikijs/langs/javascript'),
  typescript: () => import('@shikijs/langs/typescript'),
  jsx: () => import('@shikijs/langs/jsx'),
  tsx: () => import('@shikijs/langs/tsx'),
  json: () => import('@shikijs/langs/json'),
  shellscript: () => import('@shikijs/langs/shellscript'),
  python: () => import('@shikijs/langs/python'),
  go: () => import('@shikijs/langs/go'),
  rust: () => import('@shikijs/langs/rust'),
  sql: () => import('@shikijs/langs/sql'),
  yaml: () => import('@shikijs/langs/yaml'),
  css: () => import('@shikijs/langs/css'),
  html: () => import('@shikijs/langs/html'),
  diff: () => import('@shikijs/langs/diff'),
  toml: () => import('@shikijs/langs/toml'),
  java: () => import('@shikijs/langs/java'),
  c: () => import('@shikijs/langs/c'),
  graphql: () => import('@shikijs/langs/graphql'),
};

const ALIASES: Record<string, string> = {
  js: 'javascript',
  mjs: 'javascript',
  cjs: 'javascript',
  ts: 'typescript',
  mts: 'typescript',
  sh: 'shellscript',
  bash: 'shellscript',
  shell: 'shellscript',
  zsh: 'shellscript',
  console: 'shellscript',
  py: 'python',
  golang: 'go',
  rs: 'rust',
  yml: 'yaml',
  gql: 'graphql',
  h: 'c',
  jsonc: 'json',
};

/** The grammar's name for a fence's info string, or null when we have none for it. */
export function languageOf(info: string | undefined): string | null {
  const name = (info ?? '').trim().toLowerCase();
  if (!name) return null;
  const lang = ALIASES[name] ?? name;
  return lang in LANGS ? lang : null;
}

let highlighter: Promise<HighlighterCore> | null = null;
const loading = new Map<string, Promise<void>>();

function load(): Promise<HighlighterCore> {
  highlighter ??= (async () => {
    const [{ createHighlighterCore }, { createJavaScriptRegexEngine }] = await Promise.all([
      import('shiki/core'),
      import('shiki/engine/javascript'),
    ]);
    return createHighlighterCore({
      themes: [import('@shikijs/themes/github-light-default'), import('@shikijs/themes/github-dark-default')],
      langs: [],
      engine: createJavaScriptRegexEngine(),
    });
  })();
  return highlighter;
}

/**
 * The code's tokens, each with its light colour (`color`) and its dark one (the CSS variable
 * `--shiki-dark`), once Shiki and the grammar are loaded.
 */
export async function highlight(code: string, lang: string): Promise<ThemedToken[][]> {
  const h = await load();
  if (!h.getLoadedLanguages().includes(lang)) {
    let p = loading.get(lang);
    if (!p) {
      p = LANGS[lang]().then((m) => h.loadLanguage((m as { default: Parameters<HighlighterCore['loadLanguage']>[0] }).default));
      loading.set(lang, p);
    }
    await p;
  }
  return h.codeToTokens(code, { lang, themes: THEMES, defaultColor: 'light' }).tokens;
}
