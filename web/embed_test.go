package web

import (
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The embedded build has an index.html whose scripts and styles are all embedded too.
func TestDistHasTheApp(t *testing.T) {
	index, err := fs.ReadFile(Dist, "dist/index.html")
	if err != nil {
		t.Fatalf("dist/index.html: %v (run npm run build in web/)", err)
	}
	if !strings.Contains(string(index), `id="root"`) {
		t.Fatal("dist/index.html has no root element")
	}
	refs := regexp.MustCompile(`(?:src|href)="\./(assets/[^"]+)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) < 2 {
		t.Fatalf("dist/index.html references %d assets, want a script and a stylesheet", len(refs))
	}
	for _, r := range refs {
		if _, err := fs.Stat(Dist, "dist/"+r[1]); err != nil {
			t.Errorf("index.html references %s, which is not embedded: %v", r[1], err)
		}
	}
}

// The GraphQL playground is built into the embedded bundle (no CDN): playground.html and
// the assets it loads, directly or through other assets (chunks, editor workers, fonts).
func TestDistHasThePlayground(t *testing.T) {
	page, err := fs.ReadFile(Dist, "dist/playground.html")
	if err != nil {
		t.Fatalf("dist/playground.html: %v (run npm run build in web/)", err)
	}
	if !strings.Contains(string(page), `id="playground"`) {
		t.Fatal("dist/playground.html has no playground element")
	}
	files := playgroundFiles(t)
	var scripts, styles, workers int
	for _, f := range files {
		switch {
		case strings.Contains(f, ".worker-") && strings.HasSuffix(f, ".js"):
			workers++
		case strings.HasSuffix(f, ".js"):
			scripts++
		case strings.HasSuffix(f, ".css"):
			styles++
		}
	}
	if scripts == 0 || styles == 0 || workers == 0 {
		t.Errorf("the playground loads %d scripts, %d stylesheets and %d editor workers; want some of each: %v", scripts, styles, workers, files)
	}
}

// playgroundFiles returns dist/playground.html and every embedded asset it references,
// following references from asset to asset.
func playgroundFiles(t *testing.T) []string {
	t.Helper()
	// An asset's file name as it appears in HTML (./assets/x.js), in a chunk's imports
	// (./x.js, assets/x.js) or in CSS (url(./x.ttf)).
	name := regexp.MustCompile(`[A-Za-z0-9_.-]+\.(?:js|css|ttf|woff2?|svg|png|wasm)\b`)
	seen := map[string]bool{"dist/playground.html": true}
	queue := []string{"dist/playground.html"}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		b, err := fs.ReadFile(Dist, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllString(string(b), -1) {
			p := "dist/assets/" + m
			if seen[p] {
				continue
			}
			if _, err := fs.Stat(Dist, p); err == nil {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// Neither the playground page nor anything it loads refers to another host, so it works
// offline (an air-gapped deployment).
//
// Two checks on every http:// or https:// URL in those files:
//
//  1. No URL at all where a browser would fetch it: a src or href attribute in the page, a
//     CSS url() or @import, and in scripts import(), import … from, importScripts(),
//     fetch(), new Worker(), new EventSource() or new WebSocket() with a literal URL.
//  2. Every other URL is text that is never fetched, and its host must be one of
//     notFetched, each with its reason. A CDN (unpkg, jsDelivr, esm.sh, Google Fonts…)
//     is in neither list and fails the test wherever it appears.
func TestPlaygroundNeedsNoOtherHost(t *testing.T) {
	notFetched := map[string]string{
		"www.w3.org":            "XML namespace names (SVG, MathML, XLink, XHTML) for createElementNS and inline SVG",
		"json-schema.org":       "$schema identifiers that Monaco's JSON support compares as strings to pick a draft",
		"github.com":            "links in GraphiQL's logo and help texts, and in Monaco and GraphiQL warnings",
		"code.visualstudio.com": "links in Monaco's messages and GraphiQL's keyboard-shortcut help",
		"prettier.io":           "a link in a Prettier error message",
		"en.wikipedia.org":      "a link in a built-in scalar's description (graphql-js)",
		"commonmark.org":        "a link in a built-in directive's description (graphql-js)",
		"microsoft.com":         "a placeholder link target in Monaco's markdown helpers",
		"react.dev":             "the error-decoder link in React's production error messages",
		"yarnpkg.com":           "a link in graphql-js's duplicate-module error message",
	}
	fetched := []struct {
		ext string
		re  *regexp.Regexp
	}{
		{".html", regexp.MustCompile(`(?i)\b(?:src|href|srcset|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//`)},
		{".css", regexp.MustCompile(`(?i)(?:url\(\s*["']?\s*|@import\s+["']?)(?:https?:)?//`)},
		{".js", regexp.MustCompile("(?:\\bimport\\s*\\(\\s*|\\bfrom\\s*|\\bimportScripts\\s*\\(\\s*|\\bfetch\\s*\\(\\s*|\\bWorker\\s*\\(\\s*|\\bEventSource\\s*\\(\\s*|\\bWebSocket\\s*\\(\\s*)[\"'`](?:https?:|wss?:)?//")},
	}
	url := regexp.MustCompile(`(?i)\bhttps?://([^/\s"'` + "`" + `<>()\\,;{}$]*)`)
	for _, f := range playgroundFiles(t) {
		b, err := fs.ReadFile(Dist, f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, c := range fetched {
			if strings.HasSuffix(f, c.ext) {
				for _, loc := range c.re.FindAllStringIndex(text, -1) {
					t.Errorf("%s fetches from another host: %q", f, excerpt(text, loc[0], loc[1]))
				}
			}
		}
		if !strings.HasSuffix(f, ".html") && !strings.HasSuffix(f, ".js") && !strings.HasSuffix(f, ".css") {
			continue // fonts and images: binary, nothing to load
		}
		for _, loc := range url.FindAllStringSubmatchIndex(text, -1) {
			host := strings.ToLower(text[loc[2]:loc[3]])
			if host == "" {
				// "http://${…}": a link built from text at run time (markdown-it's linkify).
				continue
			}
			if _, ok := notFetched[host]; !ok {
				t.Errorf("%s refers to host %s: %q", f, host, excerpt(text, loc[0], loc[1]))
			}
		}
	}
}

func excerpt(s string, from, to int) string {
	from, to = max(0, from-40), min(len(s), to+60)
	return s[from:to]
}
