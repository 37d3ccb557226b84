package app_test

import (
	"os"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/app"
)

// TestReadmeListsEverySetting keeps the README's configuration table true: every setting
// appears with its flag, environment variable and default.
func TestReadmeListsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range app.Settings() {
		row := "| `" + s.Env + "` | `-" + s.Flag + "` | "
		if s.Default != "" {
			row += "`" + s.Default + "`"
		}
		if !strings.Contains(string(readme), row) {
			t.Errorf("README lacks the row for %s; want a line starting %q\n%s", s.Env, row, tableRow(s))
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
	for env, val := range map[string]string{"PORT": "eighty", "WORKERS": "-1", "FLUSH_INTERVAL": "soon", "LOG_FORMAT": "xml", "GUEST_SIGNIN": "maybe"} {
		_, err := app.LoadConfig(nil, func(k string) string {
			if k == env {
				return val
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%s=%s: error %v, want one naming the variable", env, val, err)
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
