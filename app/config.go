package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/talkgraph/talkgraph/httpapi"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// Config is everything the server can be told. Each setting is a flag and an
// environment variable (the flag wins); see settings for names and defaults.
type Config struct {
	Addr            string
	DataDir         string
	DatabaseURL     string
	AuthSecret      string
	AuthIssuer      string
	AuthAudience    string
	AuthJWKSURL     string
	AuthJWKSRefresh time.Duration
	TokenTTL        time.Duration
	GuestSignIn     bool
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
	LogFormat       string
	DemoChunkDelay  time.Duration

	SQLiteBusyTimeout time.Duration
	SQLiteFullSync    bool
	SQLiteMaxBytes    int64

	OpenAI OpenAIConfig

	Service service.Config
	HTTP    httpapi.HandlerConfig

	// Agents, when set, registers more agents (or replaces built-in ones) for a program
	// that embeds talkgraph.
	Agents func(*service.Agents)
}

// OpenAIConfig configures the openai agent; it is registered when a base URL or key is set.
type OpenAIConfig struct {
	BaseURL      string
	APIKey       string
	Model        string
	Temperature  string
	SystemPrompt string
	Shell        bool
	ShellDir     string
	ShellTimeout time.Duration
	// Tools are more tools offered to the model, for a program that embeds talkgraph.
	Tools []openai.Tool
}

// Setting is one configuration entry: a flag, its environment variable, its default and
// what it means. The README's configuration table lists the same (a test checks it).
type Setting struct {
	Flag, Env, Default, Help string
	set                      func(c *Config, v string) error
}

// Settings lists every setting: flag, environment variable, default and meaning.
func Settings() []Setting {
	str := func(p func(*Config) *string) func(*Config, string) error {
		return func(c *Config, v string) error { *p(c) = v; return nil }
	}
	num := func(p func(*Config) *int) func(*Config, string) error {
		return func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("want a whole number ≥ 0, got %q", v)
			}
			*p(c) = n
			return nil
		}
	}
	num64 := func(p func(*Config) *int64) func(*Config, string) error {
		return func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("want a whole number ≥ 0, got %q", v)
			}
			*p(c) = n
			return nil
		}
	}
	dur := func(p func(*Config) *time.Duration) func(*Config, string) error {
		return func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("want a duration like 500ms or 2s, got %q", v)
			}
			*p(c) = d
			return nil
		}
	}
	positive := func(p func(*Config) *int) func(*Config, string) error {
		return func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("want a whole number > 0, got %q", v)
			}
			*p(c) = n
			return nil
		}
	}
	rate := func(p func(*Config) *float64) func(*Config, string) error {
		return func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 || math.IsInf(f, 0) {
				return fmt.Errorf("want a number > 0, got %q", v)
			}
			*p(c) = f
			return nil
		}
	}
	boolean := func(p func(*Config) *bool) func(*Config, string) error {
		return func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			*p(c) = b
			return nil
		}
	}
	return []Setting{
		{"port", "PORT", "8080", "TCP port to listen on", func(c *Config, v string) error {
			if _, err := strconv.ParseUint(v, 10, 16); err != nil {
				return fmt.Errorf("want a port number, got %q", v)
			}
			c.Addr = ":" + v
			return nil
		}},
		{"host", "HOST", "", "interface to listen on (empty: all)", func(c *Config, v string) error {
			c.Addr = joinHost(v, c.Addr)
			return nil
		}},
		{"data-dir", "DATA_DIR", "./data", "directory for the default SQLite file (and the auth secret with memory: storage)", str(func(c *Config) *string { return &c.DataDir })},
		{"database-url", "DATABASE_URL", "", "storage: sqlite:///path/to/file.db (default: talkgraph.db in DATA_DIR) or memory: (nothing kept)", str(func(c *Config) *string { return &c.DatabaseURL })},
		{"sqlite-busy-timeout", "SQLITE_BUSY_TIMEOUT", "5s", "how long a write waits for a locked database before failing", dur(func(c *Config) *time.Duration { return &c.SQLiteBusyTimeout })},
		{"sqlite-full-sync", "SQLITE_FULL_SYNC", "false", "wait for the disk on every commit (survives power loss, not only crashes)", boolean(func(c *Config) *bool { return &c.SQLiteFullSync })},
		{"sqlite-max-bytes", "SQLITE_MAX_BYTES", "0", "cap on the database size; writes beyond it fail as on a full disk (0: none)", num64(func(c *Config) *int64 { return &c.SQLiteMaxBytes })},
		{"auth-secret", "AUTH_SECRET", "", "HS256 secret for tokens, at least 16 characters (default: generated once, kept in the SQLite file or DATA_DIR/auth_secret)", str(func(c *Config) *string { return &c.AuthSecret })},
		{"auth-issuer", "AUTH_ISSUER", "", "required iss claim (and set on issued tokens)", str(func(c *Config) *string { return &c.AuthIssuer })},
		{"auth-audience", "AUTH_AUDIENCE", "", "required aud claim (and set on issued tokens)", str(func(c *Config) *string { return &c.AuthAudience })},
		{"auth-jwks-url", "AUTH_JWKS_URL", "", "identity provider's JSON Web Key Set: accept its RS256/384/512, PS256, ES256 and ES384 tokens (HS256 and guest sign-in then only with AUTH_SECRET)", func(c *Config, v string) error {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return fmt.Errorf("want an http(s) URL, got %q", v)
			}
			c.AuthJWKSURL = v
			return nil
		}},
		{"auth-jwks-refresh", "AUTH_JWKS_REFRESH", "15m", "how long the identity provider's keys are used before they are fetched again", func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("want a duration > 0 like 15m, got %q", v)
			}
			c.AuthJWKSRefresh = d
			return nil
		}},
		{"token-ttl", "TOKEN_TTL", "720h", "lifetime of tokens issued by /auth/guest", dur(func(c *Config) *time.Duration { return &c.TokenTTL })},
		{"guest-signin", "GUEST_SIGNIN", "true", "allow POST /auth/guest", boolean(func(c *Config) *bool { return &c.GuestSignIn })},
		{"allowed-origins", "ALLOWED_ORIGINS", "", "comma-separated origins allowed to open websockets besides the server's own (* for any)", func(c *Config, v string) error {
			c.HTTP.AllowedOrigins = nil
			for _, o := range strings.Split(v, ",") {
				if o = strings.TrimSpace(o); o != "" {
					c.HTTP.AllowedOrigins = append(c.HTTP.AllowedOrigins, o)
				}
			}
			return nil
		}},
		{"introspection", "INTROSPECTION", "on", "who may introspect the schema: on (anyone; the playground needs it), signed-in or off (true and false mean on and off)", func(c *Config, v string) error {
			switch strings.ToLower(v) {
			case "on", "true":
				c.HTTP.Introspection = httpapi.IntrospectionOn
			case "signed-in":
				c.HTTP.Introspection = httpapi.IntrospectionSignedIn
			case "off", "false":
				c.HTTP.Introspection = httpapi.IntrospectionOff
			default:
				return fmt.Errorf("want on, signed-in or off, got %q", v)
			}
			c.HTTP.DisableIntrospection = false
			return nil
		}},
		{"max-message-bytes", "MAX_MESSAGE_BYTES", "32768", "largest user message or answer", num(func(c *Config) *int { return &c.Service.MaxMessageBytes })},
		{"max-reply-bytes", "MAX_REPLY_BYTES", "1048576", "largest assistant message or tool output", num(func(c *Config) *int { return &c.Service.MaxReplyBytes })},
		{"max-body-bytes", "MAX_BODY_BYTES", "1048576", "largest HTTP request body and websocket message", num64(func(c *Config) *int64 { return &c.HTTP.MaxBodyBytes })},
		{"max-complexity", "MAX_QUERY_COMPLEXITY", "1000", "highest query cost: 1 a field, 100 a __schema or __type field, fragments counted at every use, a document's operations added up", num(func(c *Config) *int { return &c.HTTP.MaxComplexity })},
		{"max-depth", "MAX_QUERY_DEPTH", "12", "deepest query nesting", num(func(c *Config) *int { return &c.HTTP.MaxDepth })},
		{"max-query-bytes", "MAX_QUERY_BYTES", "32768", "largest query text, refused before it is parsed", positive(func(c *Config) *int { return &c.HTTP.MaxQueryBytes })},
		{"max-query-tokens", "MAX_QUERY_TOKENS", "4000", "most tokens in a query; parsing stops there", positive(func(c *Config) *int { return &c.HTTP.MaxQueryTokens })},
		{"max-aliases", "MAX_ALIASES", "30", "most aliased fields in a query, fragments counted at every use", positive(func(c *Config) *int { return &c.HTTP.MaxAliases })},
		{"rate-limit", "RATE_LIMIT", "20", "operations per user per second", func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				return fmt.Errorf("want a number > 0, got %q", v)
			}
			c.HTTP.OpsPerSecond = f
			return nil
		}},
		{"rate-burst", "RATE_BURST", "40", "operations a user may make at once above the rate", num(func(c *Config) *int { return &c.HTTP.OpsBurst })},
		{"subscribe-rate", "SUBSCRIBE_RATE", "100", "subscriptions per user per second (a budget apart from RATE_LIMIT, for clients resubscribing after a reconnect)", rate(func(c *Config) *float64 { return &c.HTTP.SubscribePerSecond })},
		{"subscribe-burst", "SUBSCRIBE_BURST", "1000", "subscriptions a user may start at once above the rate", positive(func(c *Config) *int { return &c.HTTP.SubscribeBurst })},
		{"anon-rate-limit", "ANON_RATE_LIMIT", "10", "requests without a valid token per client address per second (websocket upgrades included)", rate(func(c *Config) *float64 { return &c.HTTP.AnonPerSecond })},
		{"anon-rate-burst", "ANON_RATE_BURST", "50", "requests without a valid token a client address may make at once above the rate", positive(func(c *Config) *int { return &c.HTTP.AnonBurst })},
		{"guest-signin-rate", "GUEST_SIGNIN_RATE", "10", "guest sign-ins per client address per minute", rate(func(c *Config) *float64 { return &c.HTTP.GuestPerMinute })},
		{"guest-signin-burst", "GUEST_SIGNIN_BURST", "20", "guest sign-ins a client address may make at once above the rate", positive(func(c *Config) *int { return &c.HTTP.GuestBurst })},
		{"trusted-proxies", "TRUSTED_PROXIES", "", "comma-separated CIDRs of reverse proxies: behind them the client address is the last X-Forwarded-For hop not among them", func(c *Config, v string) error {
			p, err := httpapi.ParseTrustedProxies(v)
			if err != nil {
				return fmt.Errorf("want comma-separated CIDRs like 10.0.0.0/8,192.168.0.1/32: %w", err)
			}
			c.HTTP.TrustedProxies = p
			return nil
		}},
		{"max-subscriptions-per-connection", "MAX_SUBSCRIPTIONS_PER_CONNECTION", "100", "subscriptions on one websocket", num(func(c *Config) *int { return &c.HTTP.SubsPerConnection })},
		{"max-subscriptions", "MAX_SUBSCRIPTIONS", "100000", "subscriptions on the whole server", num(func(c *Config) *int { return &c.Service.MaxSubscriptions })},
		{"ws-keepalive", "WS_KEEPALIVE", "15s", "websocket keep-alive interval (both protocols)", dur(func(c *Config) *time.Duration { return &c.HTTP.KeepAlive })},
		{"ws-init-timeout", "WS_INIT_TIMEOUT", "10s", "time a websocket has to send connection_init", dur(func(c *Config) *time.Duration { return &c.HTTP.InitTimeout })},
		{"workers", "WORKERS", "16", "runs executing at once", num(func(c *Config) *int { return &c.Service.Workers })},
		{"runs-per-user", "RUNS_PER_USER", "2", "runs executing at once for one user", num(func(c *Config) *int { return &c.Service.RunsPerUser })},
		{"max-queued-runs", "MAX_QUEUED_RUNS", "20", "messages waiting in one session (busy policy ENQUEUE)", num(func(c *Config) *int { return &c.Service.MaxQueuedRuns })},
		{"flush-interval", "FLUSH_INTERVAL", "20ms", "longest time streamed text waits before it is written and sent (0: every chunk at once)", func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("want a duration, got %q", v)
			}
			if d == 0 {
				d = -1 // the service's "write at once"
			}
			c.Service.FlushInterval = d
			return nil
		}},
		{"demo-chunk-delay", "DEMO_CHUNK_DELAY", "40ms", "pause before each word the demo agent streams", dur(func(c *Config) *time.Duration { return &c.DemoChunkDelay })},
		{"shutdown-timeout", "SHUTDOWN_TIMEOUT", "5s", "longest graceful shutdown", dur(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
		{"log-level", "LOG_LEVEL", "info", "debug, info, warn or error", func(c *Config, v string) error { return c.LogLevel.UnmarshalText([]byte(v)) }},
		{"log-format", "LOG_FORMAT", "json", "json or text", func(c *Config, v string) error {
			if v != "json" && v != "text" {
				return fmt.Errorf("want json or text, got %q", v)
			}
			c.LogFormat = v
			return nil
		}},
		{"openai-base-url", "OPENAI_BASE_URL", "", "OpenAI-compatible endpoint, e.g. https://api.openai.com/v1 or http://localhost:11434/v1 (enables the openai agent)", str(func(c *Config) *string { return &c.OpenAI.BaseURL })},
		{"openai-api-key", "OPENAI_API_KEY", "", "API key for the endpoint (enables the openai agent; never shown)", str(func(c *Config) *string { return &c.OpenAI.APIKey })},
		{"openai-model", "OPENAI_MODEL", "gpt-4o-mini", "default model; a session's settings can override it", str(func(c *Config) *string { return &c.OpenAI.Model })},
		{"openai-temperature", "OPENAI_TEMPERATURE", "", "default temperature (empty: the provider's)", str(func(c *Config) *string { return &c.OpenAI.Temperature })},
		{"openai-system-prompt", "OPENAI_SYSTEM_PROMPT", "", "default system prompt", str(func(c *Config) *string { return &c.OpenAI.SystemPrompt })},
		{"shell-tool", "SHELL_TOOL", "false", "offer the openai agent a shell tool (runs commands on this machine!)", boolean(func(c *Config) *bool { return &c.OpenAI.Shell })},
		{"shell-dir", "SHELL_DIR", ".", "working directory of the shell tool", str(func(c *Config) *string { return &c.OpenAI.ShellDir })},
		{"shell-timeout", "SHELL_TIMEOUT", "60s", "longest shell tool command", dur(func(c *Config) *time.Duration { return &c.OpenAI.ShellTimeout })},
	}
}

func joinHost(host, addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return host + ":" + port
}

// LoadConfig reads the settings (see Settings): defaults, then the environment through
// getenv, then the flags in args.
func LoadConfig(args []string, getenv func(string) string) (Config, error) {
	var c Config
	c.Service = service.DefaultConfig()
	fs := flag.NewFlagSet("talkgraph", flag.ContinueOnError)
	list := Settings()
	values := make([]*string, len(list))
	for i, s := range list {
		v := s.Default
		if e := getenv(s.Env); e != "" {
			v = e
		}
		values[i] = fs.String(s.Flag, v, s.Help+" (env "+s.Env+")")
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for i, s := range list {
		if *values[i] == "" && s.Default == "" {
			continue
		}
		if err := s.set(&c, *values[i]); err != nil {
			return c, fmt.Errorf("%s (-%s): %w", s.Env, s.Flag, err)
		}
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = "sqlite://" + filepath.ToSlash(filepath.Join(c.DataDir, "talkgraph.db"))
	}
	c.Service.StopTimeout = c.ShutdownTimeout / 2
	return c, nil
}

// RedactedDatabaseURL is the database URL without any password, for logs.
func (c Config) RedactedDatabaseURL() string {
	u, err := url.Parse(c.DatabaseURL)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// secretKeeper is a store that can keep the signing secret with the data it protects.
type secretKeeper interface {
	Secret(ctx context.Context, name string, gen func() ([]byte, error)) ([]byte, error)
}

// authSecret returns AUTH_SECRET, or else the secret kept by the store (SQLite keeps it in
// its file) or in DATA_DIR/auth_secret, created on first start, so that issued tokens stay
// valid across restarts.
func authSecret(ctx context.Context, c Config, store service.Store) ([]byte, error) {
	if c.AuthSecret != "" {
		if len(c.AuthSecret) < 16 {
			return nil, errors.New("AUTH_SECRET must be at least 16 characters")
		}
		return []byte(c.AuthSecret), nil
	}
	if k, ok := store.(secretKeeper); ok {
		return k.Secret(ctx, "auth", func() ([]byte, error) {
			raw := make([]byte, 32)
			_, err := rand.Read(raw)
			return []byte(hex.EncodeToString(raw)), err
		})
	}
	path := filepath.Join(c.DataDir, "auth_secret")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return []byte(strings.TrimSpace(string(b))), nil
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	secret := hex.EncodeToString(raw)
	// Create it exclusively: of two processes starting at once, one writes and both read.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.WriteString(secret + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("write auth secret: %w", err)
		}
		return []byte(secret), nil
	}
	b, rerr := os.ReadFile(path)
	if rerr != nil {
		return nil, fmt.Errorf("auth secret: %w", err)
	}
	return []byte(strings.TrimSpace(string(b))), nil
}
