package web

import (
	"io/fs"
	"regexp"
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
