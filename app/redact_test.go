package app_test

import (
	"slices"
	"testing"

	"github.com/talkgraph/talkgraph/app"
)

// RedactArgs leaves out the values of secret settings however their flags are written, and
// leaves every other argument as it is.
func TestRedactArgs(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"talkgraph", "-auth-secret=s3cret-s3cret-s3cret", "-port", "9000"},
			[]string{"talkgraph", "-auth-secret=[redacted]", "-port", "9000"}},
		{[]string{"talkgraph", "--openai-api-key", "sk-1", "-openai-model", "m"},
			[]string{"talkgraph", "--openai-api-key", "[redacted]", "-openai-model", "m"}},
		{[]string{"talkgraph", "-database-url=postgres://u:pw@db:5432/tg?password=pw2&sslmode=disable"},
			[]string{"talkgraph", "-database-url=postgres://u:xxxxx@db:5432/tg?[redacted]"}},
		{[]string{"talkgraph", "-nats-url", "nats://u:pw@nats:4222"},
			[]string{"talkgraph", "-nats-url", "nats://u:xxxxx@nats:4222"}},
		{[]string{"x", "--", "-openai-api-key=sk-2"}, []string{"x", "--", "-openai-api-key=[redacted]"}},
		{[]string{"x", "-openai-api-key"}, []string{"x", "-openai-api-key"}}, // no value follows
		{[]string{"x", "-unknown=sk-3", "sk-4"}, []string{"x", "-unknown=sk-3", "sk-4"}},
	} {
		if got := app.RedactArgs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("RedactArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
