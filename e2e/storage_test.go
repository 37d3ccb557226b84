package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/app"
)

// TestFullStorageGivesClearErrorsAndFailsReadiness fills a size-capped SQLite database:
// the client gets UNAVAILABLE with a plain reason, /readyz turns red, the process goes on,
// and everything accepted before is kept.
func TestFullStorageGivesClearErrorsAndFailsReadiness(t *testing.T) {
	a := startApp(t, "sqlite", func(c *app.Config) { c.SQLiteMaxBytes = 400 << 10 })
	c := guest(t, a)
	sid := c.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
	big := strings.Repeat("x", 30<<10)
	accepted := 0
	var last []string
	for i := 0; i < 100; i++ {
		r := c.Do(`mutation($s: ID!, $c: String!){ addMessage(input:{sessionId:$s, content:$c}){ message { id } } }`, map[string]any{"s": sid, "c": big})
		if len(r.Errors) > 0 {
			last = []string{r.Code(), r.Errors[0].Message}
			break
		}
		accepted++
	}
	if last == nil {
		t.Fatal("the capped database never filled up")
	}
	if last[0] != "UNAVAILABLE" || !strings.Contains(last[1], "full") {
		t.Errorf("error when full = %v, want UNAVAILABLE saying the storage is full", last)
	}
	resp, err := http.Get(a.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d while storage is full", resp.StatusCode)
	}
	if resp, err := http.Get(a.URL + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/healthz: %v %v", err, resp)
	}
	users := 0
	for _, m := range c.Messages(sid) {
		if m.Role == "USER" {
			users++
		}
	}
	if users != accepted {
		t.Errorf("%d user messages kept, %d were accepted", users, accepted)
	}
}
