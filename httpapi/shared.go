package httpapi

import (
	"bytes"
	"context"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/talkgraph/talkgraph/graph"
)

// Shared reads at the edge: what every operation's context carries for them (the client's
// address, which reads without a sign-in count against, and the base of share links'
// URLs), and the page at /s/<token>, which no search engine is to index.

// noindex is the X-Robots-Tag of every answer of /query and of shared pages: what they
// hold is no search engine's to keep.
const noindex = "noindex, nofollow"

// operationValues puts into each /query request's context its client's address and the
// base of share links' URLs, and marks its answer noindex.
func operationValues(addrs clientAddresses, publicURL string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Robots-Tag", noindex)
		ctx := context.WithValue(r.Context(), clientAddrKey{}, addrs.of(r))
		ctx = graph.WithPublicURL(ctx, publicBase(r, publicURL))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// publicBase is where the client reached the server: publicURL when set, else the
// request's scheme and host.
func publicBase(r *http.Request, publicURL string) string {
	if publicURL != "" {
		return publicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// robotsMeta is what a shared page's head gets, for crawlers that read the page and not
// its headers.
var robotsMeta = []byte(`<meta name="robots" content="noindex, nofollow">`)

// sharedPage serves the web app's page for /s/<token> (its index.html, whose router
// shows the shared conversation) with X-Robots-Tag and the robots meta, and the app's
// files the page names relative to itself (/s/assets/…) as spa serves them.
func sharedPage(files fs.FS) http.Handler {
	app := spa(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page names its assets relative to itself (./assets/…): /s/assets/… is
		// the app's /assets/….
		if rest := strings.TrimPrefix(r.URL.Path, "/s/"); rest != "" {
			if st, err := fs.Stat(files, rest); err == nil && !st.IsDir() {
				r2 := r.Clone(r.Context())
				r2.URL.Path = "/" + rest
				app.ServeHTTP(w, r2)
				return
			}
		}
		w.Header().Set("X-Robots-Tag", noindex)
		w.Header().Set("Referrer-Policy", "no-referrer") // the token is in the path
		index, err := fs.ReadFile(files, "index.html")
		if err != nil {
			app.ServeHTTP(w, r)
			return
		}
		if i := bytes.Index(index, []byte("<head>")); i >= 0 {
			at := i + len("<head>")
			index = append(append(append([]byte{}, index[:at]...), robotsMeta...), index[at:]...)
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		http.ServeContent(w, r, "index.html", time.Time{}, strings.NewReader(string(index)))
	})
}
