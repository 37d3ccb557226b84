package e2e

// These tests reproduce the second round of findings of the security review against a real
// server (or process) over real sockets: what anyone can read on /metrics, text that is not
// valid UTF-8 or holds nothing to read, what an error answer echoes, the API key's encoded
// forms in the log, the profiler's command line, and smaller checks of keys, cursors and
// numbers. Each says what the server promises instead.

import (
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// getBody fetches url and returns its status and body.
func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: tgtest.Wait}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

var modelLabel = regexp.MustCompile(`^talkgraph_model_tokens_total\{kind="([a-z_]+)",model="([^"]*)"\} (\d+)$`)

// Finding 4: with a provider that takes any model name, what users chose became labels of
// the public /metrics (an e-mail address among them), two series a run, and the service's
// table behind them grew without end. Only the models the operator configured are labels
// now; every other model is counted under "other".
func TestMetricsLabelOnlyConfiguredModels(t *testing.T) {
	const runs = 20
	var script []http.HandlerFunc
	for range runs + 2 {
		script = append(script, fakellm.TextReply("ok"))
	}
	f := fakellm.New(t, script...)
	a := startOpenAI(t, "memory", f, func(c *app.Config) {
		c.OpenAI.Model = "served-model"
		c.OpenAI.Models = []string{"expected-a", "expected-b"}
	})
	c := guest(t, a)
	ws := c.Connect("graphql-transport-ws")
	run := func(settings map[string]any) {
		t.Helper()
		sid := openAISession(c, settings)
		_, evs := ws.Stream(sid, c.Cursor(sid))
		_, id := c.Send(sid, "hi")
		if end := evs.Until("run ends", tgtest.RunEnds(id)); end.Run.Status != "COMPLETED" {
			t.Fatalf("run ended %s: %s", end.Run.Status, end.Run.Error)
		}
	}
	run(nil) // the server's model
	run(map[string]any{"model": "expected-a"})
	for i := range runs {
		model := "chosen-" + string(rune('a'+i))
		if i == 0 {
			model = "someone@example.com"
		}
		run(map[string]any{"model": model})
	}

	_, body := getBody(t, a.URL+"/metrics")
	if strings.Contains(body, "example.com") || strings.Contains(body, "chosen-") {
		t.Error("/metrics shows a model name a user chose")
	}
	got := map[string]map[string]string{} // model → kind → value
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "talkgraph_model_tokens_total{") {
			continue
		}
		m := modelLabel.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("unexpected line %q", line)
			continue
		}
		if got[m[2]] == nil {
			got[m[2]] = map[string]string{}
		}
		got[m[2]][m[1]] = m[3]
	}
	var models []string
	for m := range got {
		models = append(models, m)
	}
	slices.Sort(models)
	if want := []string{"expected-a", "other", "served-model"}; !slices.Equal(models, want) {
		t.Errorf("model labels %q, want %q", models, want)
	}
	// Each run read 20 tokens and wrote 1, as the fake provider reports.
	if o := got["other"]; o["input"] != "400" || o["output"] != "20" {
		t.Errorf(`tokens under "other" = %v, want 400 in and 20 out (the %d runs of models nobody configured)`, o, runs)
	}
	if s := got["served-model"]; s["input"] != "20" {
		t.Errorf("tokens of the server's model = %v, want 20 in", s)
	}
}
