package app_test

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/app"
)

var update = flag.Bool("update", false, "rewrite the configuration table in docs/CONFIGURATION.md from app.Settings")

// configurationDoc is where every setting is listed.
const configurationDoc = "../docs/CONFIGURATION.md"

// TestConfigurationListsEverySetting keeps the table in docs/CONFIGURATION.md true: every
// setting has its row, with its flag, environment variable, default and meaning. With
// -update it rewrites the table's rows.
func TestConfigurationListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		lines := strings.Split(string(doc), "\n")
		start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| `PORT`") })
		if start < 0 {
			t.Fatal("docs/CONFIGURATION.md has no configuration table (a row starting | `PORT`)")
		}
		end := start
		for end < len(lines) && strings.HasPrefix(lines[end], "| `") {
			end++
		}
		var rows []string
		for _, s := range app.Settings() {
			rows = append(rows, tableRow(s))
		}
		lines = slices.Replace(lines, start, end, rows...)
		doc = []byte(strings.Join(lines, "\n"))
		if err := os.WriteFile(configurationDoc, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range app.Settings() {
		if row := tableRow(s); !strings.Contains(string(doc), row+"\n") {
			t.Errorf("docs/CONFIGURATION.md lacks the row for %s; want the line\n%s", s.Env, row)
		}
	}
}

func tableRow(s app.Setting) string {
	def := ""
	if s.Default != "" {
		def = "`" + s.Default + "`"
	}
	return "| `" + s.Env + "` | `-" + s.Flag + "` | " + def + " | " + s.Help + " |"
}

func TestConfigRejectsBadValuesClearly(t *testing.T) {
	// Each bad value stops the server at start with a message that names the setting and
	// says what it takes.
	for _, tt := range []struct{ env, val, want string }{
		{"PORT", "eighty", "port number"},
		{"WORKERS", "-1", "≥ 1"},
		{"WORKERS", "0", "≥ 1"},
		{"RUNS_PER_USER", "0", "≥ 1"},
		{"FLUSH_INTERVAL", "soon", "duration"},
		{"LOG_FORMAT", "xml", "json or text"},
		{"LOG_LEVEL", "loud", "debug, info, warn or error"},
		{"GUEST_SIGNIN", "maybe", "true or false"},
		{"ALLOWED_ORIGINS", "notaurl", "https://app.example.com"},
		{"ALLOWED_ORIGINS", "https://ok.example.com,ftp://x", "https://app.example.com"},
		{"DATABASE_URL", "sqlite:///nonexistent/dir/x.db", "does not exist"},
		{"DATABASE_URL", "mysql://db", "sqlite:///path/to/file.db or memory:"},
		{"AUTH_SECRET", "short", "at least 16"},
		{"OPENAI_BASE_URL", "localhost:11434", "http(s) URL"},
		{"TOKEN_TTL", "0s", "duration"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318", "http://localhost:4318"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector", "http://localhost:4318"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "http/protobuf or grpc"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp", "http/protobuf or grpc"},
		{"OTEL_TRACES_SAMPLER", "sometimes", "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"},
		{"OTEL_TRACES_SAMPLER_ARG", "2", "from 0 to 1"},
	} {
		_, err := app.LoadConfig(nil, func(k string) string {
			if k == tt.env {
				return tt.val
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), tt.env) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s=%s: error %v, want one naming the variable and saying %q", tt.env, tt.val, err, tt.want)
		}
	}
	c, err := app.LoadConfig([]string{"-port", "9999"}, func(k string) string {
		if k == "PORT" {
			return "7777"
		}
		return ""
	})
	if err != nil || c.Addr != ":9999" {
		t.Errorf("flag over env: %q %v", c.Addr, err)
	}
}

func TestVersionFlagPrintsTheBuild(t *testing.T) {
	var out strings.Builder
	if err := app.Run(t.Context(), []string{"-version"}, func(string) string { return "" }, &out, nil); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "talkgraph ") || !strings.Contains(got, "go1.") {
		t.Errorf("-version printed %q, want talkgraph's version and Go's", got)
	}
}

// The README shows examples/embed/main.go whole, as it is.
func TestReadmeShowsTheEmbedExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../examples/embed/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(example)+"```\n") {
		t.Error("the README's copy of examples/embed/main.go differs from the file; paste the file into the README")
	}
}
