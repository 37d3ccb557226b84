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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/talkgraph/talkgraph/httpapi"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/demo"
	"github.com/talkgraph/talkgraph/service/mcp"
	"github.com/talkgraph/talkgraph/service/openai"
	"github.com/talkgraph/talkgraph/service/sqlite"
	"github.com/talkgraph/talkgraph/service/webhook"
	"go.opentelemetry.io/otel/trace"
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
	// PprofAddr, when set, serves Go's profiler on that address.
	PprofAddr string
	// NatsURL, when set, connects this replica to the others through NATS; Nats holds
	// the rest of the bus's settings.
	NatsURL string
	Nats    NatsConfig

	SQLiteBusyTimeout time.Duration
	SQLiteFullSync    bool
	SQLiteMaxBytes    int64

	OpenAI OpenAIConfig
	// MCP is the MCP servers whose tools the openai agent offers.
	MCP MCPConfig

	Service service.Config
	HTTP    httpapi.HandlerConfig
	// Webhooks is how webhook deliveries are sent (service.Config.Hooks, unless set).
	Webhooks webhook.Options

	// Agents, when set, registers more agents (or replaces built-in ones) for a program
	// that embeds talkgraph.
	Agents func(*service.Agents)

	// Traces says where OpenTelemetry traces go (the OTEL_* settings).
	Traces TracesConfig
	// TracerProvider, when set, makes the spans instead of the exporter Traces describes:
	// for a program that embeds talkgraph and traces already.
	TracerProvider trace.TracerProvider
}

// OpenAIConfig configures the openai agent; it is registered when a base URL or key is set.
type OpenAIConfig struct {
	BaseURL string
	APIKey  string
	Model   string
	// Models are the other models sessions are expected to choose; with Model, their
	// tokens are counted by name in the metrics (see service.Config.Models).
	Models       []string
	Temperature  string
	SystemPrompt string
	Shell        bool
	ShellDir     string
	ShellTimeout time.Duration
	// Tools are more tools offered to the model, for a program that embeds talkgraph.
	Tools []openai.Tool
}

// MCPConfig is the MCP servers whose tools the openai agent offers, and their limits.
type MCPConfig struct {
	// File is MCP_CONFIG, the configuration file Open reads the servers from.
	File string
	// Servers are more servers, for a program that embeds talkgraph (those of File come
	// first).
	Servers []mcp.ServerConfig
	Limits  mcp.Limits
}

// servers reads the servers of File, followed by Servers.
func (c MCPConfig) servers() ([]mcp.ServerConfig, error) {
	if c.File == "" {
		return c.Servers, nil
	}
	servers, err := mcp.ReadConfig(c.File, c.Limits)
	if err != nil {
		return nil, fmt.Errorf("MCP_CONFIG (-mcp-config): %w", err)
	}
	return append(servers, c.Servers...), nil
}

// NatsConfig is how a replica reaches the others: the bus secret everything it sends is
// sealed with (default: kept in the database the replicas share), and NATS's own
// security, each a file (see natsc.Options).
type NatsConfig struct {
	BusSecret                        string
	Creds, NKey, CA, TLSCert, TLSKey string
}

// Setting is one configuration entry: a flag, its environment variable, its default and
// what it means. docs/CONFIGURATION.md's table lists the same (a test checks it).
type Setting struct {
	Flag, Env, Default, Help string
	set                      func(c *Config, v string) error
}

// Settings lists every setting: flag, environment variable, default and meaning. The
// defaults come from the packages that use them (service.DefaultConfig,
// httpapi.DefaultHandlerConfig, …), so that each is written once.
func Settings() []Setting {
	svc, web, lim := service.DefaultConfig(), httpapi.DefaultHandlerConfig(), mcp.DefaultLimits()
	str := func(p func(*Config) *string) func(*Config, string) error {
		return func(c *Config, v string) error { *p(c) = v; return nil }
	}
	// num takes a whole number of at least least.
	num := func(least int, p func(*Config) *int) func(*Config, string) error {
		return func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < least {
				return fmt.Errorf("want a whole number ≥ %d, got %q", least, v)
			}
			*p(c) = n
			return nil
		}
	}
	num64 := func(least int64, p func(*Config) *int64) func(*Config, string) error {
		return func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < least {
				return fmt.Errorf("want a whole number ≥ %d, got %q", least, v)
			}
			*p(c) = n
			return nil
		}
	}
	// dur takes a duration of at least least.
	dur := func(least time.Duration, p func(*Config) *time.Duration) func(*Config, string) error {
		return func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < least {
				return fmt.Errorf("want a duration ≥ %s like 500ms or 2s, got %q", fmtDur(least), v)
			}
			*p(c) = d
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
	itoa := strconv.Itoa
	return []Setting{
		{"port", "PORT", "8080", "TCP port to listen on", func(c *Config, v string) error {
			if _, err := strconv.ParseUint(v, 10, 16); err != nil {
				return fmt.Errorf("want a port number from 0 to 65535, got %q", v)
			}
			c.Addr = ":" + v
			return nil
		}},
		{"host", "HOST", "", "interface to listen on (empty: all)", func(c *Config, v string) error {
			c.Addr = joinHost(v, c.Addr)
			return nil
		}},
		{"data-dir", "DATA_DIR", "./data", "directory for the default SQLite file (and the auth secret with memory: storage)", str(func(c *Config) *string { return &c.DataDir })},
		{"database-url", "DATABASE_URL", "", "storage: sqlite:///path/to/file.db (default: talkgraph.db in DATA_DIR), postgres://user:password@host:5432/db (one database shared by several replicas) or memory: (nothing kept)", func(c *Config, v string) error {
			if err := checkDatabaseURL(v); err != nil {
				return err
			}
			c.DatabaseURL = v
			return nil
		}},
		{"nats-url", "NATS_URL", "", "NATS server that connects replicas sharing one PostgreSQL database, e.g. nats://10.0.0.5:4222 (needed for more than one replica)", func(c *Config, v string) error {
			if u, err := url.Parse(v); err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
				return fmt.Errorf("want a URL like nats://host:4222, got %q", v)
			}
			c.NatsURL = v
			return nil
		}},
		{"bus-secret", "BUS_SECRET", "", "with replicas: the secret they seal what they send each other on NATS with, at least 16 characters, the same on every replica and never the token secret (default: generated once and kept in the database they share)", func(c *Config, v string) error {
			if len(v) < 16 {
				return fmt.Errorf("want at least 16 characters, got %d", len(v))
			}
			c.Nats.BusSecret = v
			return nil
		}},
		{"nats-creds", "NATS_CREDS", "", "with replicas: a NATS credentials file (user JWT and seed) to connect with", str(func(c *Config) *string { return &c.Nats.Creds })},
		{"nats-nkey", "NATS_NKEY", "", "with replicas: a file holding the NATS nkey seed to connect with", str(func(c *Config) *string { return &c.Nats.NKey })},
		{"nats-ca", "NATS_CA", "", "with replicas: the CA certificate (PEM) that signs the NATS server's, for a tls:// NATS_URL (default: the system's)", str(func(c *Config) *string { return &c.Nats.CA })},
		{"nats-tls-cert", "NATS_TLS_CERT", "", "with replicas: a client certificate (PEM) for a NATS server that asks for one (with NATS_TLS_KEY)", str(func(c *Config) *string { return &c.Nats.TLSCert })},
		{"nats-tls-key", "NATS_TLS_KEY", "", "with replicas: the key (PEM) of NATS_TLS_CERT", str(func(c *Config) *string { return &c.Nats.TLSKey })},
		{"run-lease", "RUN_LEASE", fmtDur(svc.RunLease), "with replicas: how long a replica's runs stay its own after its last heartbeat; a survivor then takes them over", dur(time.Second, func(c *Config) *time.Duration { return &c.Service.RunLease })},
		{"replica-id", "REPLICA_ID", "", "with replicas: this replica's name, unique among them and kept across restarts (default: host name and port)", str(func(c *Config) *string { return &c.Service.ReplicaID })},
		{"sqlite-busy-timeout", "SQLITE_BUSY_TIMEOUT", fmtDur(sqlite.DefaultBusyTimeout), "how long a write waits for a locked database before failing", dur(time.Millisecond, func(c *Config) *time.Duration { return &c.SQLiteBusyTimeout })},
		{"sqlite-full-sync", "SQLITE_FULL_SYNC", "false", "wait for the disk on every commit (survives power loss, not only crashes)", boolean(func(c *Config) *bool { return &c.SQLiteFullSync })},
		{"sqlite-max-bytes", "SQLITE_MAX_BYTES", "0", "cap on the database size; writes beyond it fail as on a full disk (0: none)", num64(0, func(c *Config) *int64 { return &c.SQLiteMaxBytes })},
		{"auth-secret", "AUTH_SECRET", "", "HS256 secret for tokens, at least 16 characters (default: generated once and kept in the database, or in DATA_DIR/auth_secret with memory: storage)", func(c *Config, v string) error {
			if len(v) < 16 {
				return fmt.Errorf("want at least 16 characters, got %d", len(v))
			}
			c.AuthSecret = v
			return nil
		}},
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
		{"auth-jwks-refresh", "AUTH_JWKS_REFRESH", fmtDur(jwtauth.DefaultJWKSRefresh), "how long the identity provider's keys are used before they are fetched again", dur(time.Second, func(c *Config) *time.Duration { return &c.AuthJWKSRefresh })},
		{"token-ttl", "TOKEN_TTL", fmtDur(jwtauth.DefaultTokenTTL), "lifetime of tokens issued by /auth/guest", dur(time.Second, func(c *Config) *time.Duration { return &c.TokenTTL })},
		{"guest-signin", "GUEST_SIGNIN", "true", "allow POST /auth/guest", boolean(func(c *Config) *bool { return &c.GuestSignIn })},
		{"allowed-origins", "ALLOWED_ORIGINS", "", "comma-separated origins allowed to open websockets besides the server's own (* for any)", func(c *Config, v string) error {
			c.HTTP.AllowedOrigins = nil
			for _, o := range strings.Split(v, ",") {
				if o = strings.TrimSpace(o); o == "" {
					continue
				}
				if o != "*" {
					u, err := url.Parse(o)
					if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
						return fmt.Errorf("want origins like https://app.example.com (scheme and host, no path) or *, got %q", o)
					}
				}
				c.HTTP.AllowedOrigins = append(c.HTTP.AllowedOrigins, o)
			}
			return nil
		}},
		{"introspection", "INTROSPECTION", web.Introspection, "who may introspect the schema: on (anyone; the playground needs it), signed-in or off (true and false mean on and off)", func(c *Config, v string) error {
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
		{"max-message-bytes", "MAX_MESSAGE_BYTES", itoa(svc.MaxMessageBytes), "largest user message or answer", num(1, func(c *Config) *int { return &c.Service.MaxMessageBytes })},
		{"max-reply-bytes", "MAX_REPLY_BYTES", itoa(svc.MaxReplyBytes), "largest assistant message or tool output", num(1, func(c *Config) *int { return &c.Service.MaxReplyBytes })},
		{"max-body-bytes", "MAX_BODY_BYTES", strconv.FormatInt(web.MaxBodyBytes, 10), "largest HTTP request body and websocket message", num64(1, func(c *Config) *int64 { return &c.HTTP.MaxBodyBytes })},
		{"max-complexity", "MAX_QUERY_COMPLEXITY", itoa(web.MaxComplexity), "highest query cost: 1 a field, 100 a __schema or __type field, fragments counted at every use, a document's operations added up", num(1, func(c *Config) *int { return &c.HTTP.MaxComplexity })},
		{"max-depth", "MAX_QUERY_DEPTH", itoa(web.MaxDepth), "deepest query nesting", num(1, func(c *Config) *int { return &c.HTTP.MaxDepth })},
		{"max-query-bytes", "MAX_QUERY_BYTES", itoa(web.MaxQueryBytes), "largest query text, refused before it is parsed", num(1, func(c *Config) *int { return &c.HTTP.MaxQueryBytes })},
		{"max-query-tokens", "MAX_QUERY_TOKENS", itoa(web.MaxQueryTokens), "most tokens in a query; parsing stops there", num(1, func(c *Config) *int { return &c.HTTP.MaxQueryTokens })},
		{"max-aliases", "MAX_ALIASES", itoa(web.MaxAliases), "most aliased fields in a query, fragments counted at every use", num(1, func(c *Config) *int { return &c.HTTP.MaxAliases })},
		{"rate-limit", "RATE_LIMIT", strconv.FormatFloat(web.OpsPerSecond, 'f', -1, 64), "operations per user per second", func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				return fmt.Errorf("want a number > 0, got %q", v)
			}
			c.HTTP.OpsPerSecond = f
			return nil
		}},
		{"rate-burst", "RATE_BURST", itoa(web.OpsBurst), "operations a user may make at once above the rate", num(1, func(c *Config) *int { return &c.HTTP.OpsBurst })},
		{"subscribe-rate", "SUBSCRIBE_RATE", strconv.FormatFloat(web.SubscribePerSecond, 'f', -1, 64), "subscriptions per user per second (a budget apart from RATE_LIMIT, for clients resubscribing after a reconnect)", rate(func(c *Config) *float64 { return &c.HTTP.SubscribePerSecond })},
		{"subscribe-burst", "SUBSCRIBE_BURST", itoa(web.SubscribeBurst), "subscriptions a user may start at once above the rate", num(1, func(c *Config) *int { return &c.HTTP.SubscribeBurst })},
		{"anon-rate-limit", "ANON_RATE_LIMIT", strconv.FormatFloat(web.AnonPerSecond, 'f', -1, 64), "requests without a valid token per client address per second (websocket upgrades included)", rate(func(c *Config) *float64 { return &c.HTTP.AnonPerSecond })},
		{"anon-rate-burst", "ANON_RATE_BURST", itoa(web.AnonBurst), "requests without a valid token a client address may make at once above the rate", num(1, func(c *Config) *int { return &c.HTTP.AnonBurst })},
		{"guest-signin-rate", "GUEST_SIGNIN_RATE", strconv.FormatFloat(web.GuestPerMinute, 'f', -1, 64), "guest sign-ins per client address per minute", rate(func(c *Config) *float64 { return &c.HTTP.GuestPerMinute })},
		{"guest-signin-burst", "GUEST_SIGNIN_BURST", itoa(web.GuestBurst), "guest sign-ins a client address may make at once above the rate", num(1, func(c *Config) *int { return &c.HTTP.GuestBurst })},
		{"shared-reads-rate", "SHARED_READS_PER_SECOND", strconv.FormatFloat(web.SharedReadsPerSecond, 'f', -1, 64), "shared reads (sharedSession, sharedStream) made without a sign-in, per client address per second", rate(func(c *Config) *float64 { return &c.HTTP.SharedReadsPerSecond })},
		{"shared-reads-burst", "SHARED_READS_BURST", itoa(web.SharedReadsBurst), "shared reads a client address may make at once above the rate", num(1, func(c *Config) *int { return &c.HTTP.SharedReadsBurst })},
		{"public-url", "PUBLIC_URL", "", "where clients reach the server (https://chat.example.com): share links' URLs begin with it; empty: each request's own scheme and host", func(c *Config, v string) error {
			v = strings.TrimRight(strings.TrimSpace(v), "/")
			if v != "" {
				u, err := url.Parse(v)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
					return fmt.Errorf("want an http(s) origin like https://chat.example.com, got %q", v)
				}
			}
			c.HTTP.PublicURL = v
			return nil
		}},
		{"trusted-proxies", "TRUSTED_PROXIES", "", "comma-separated CIDRs of reverse proxies: behind them the client address is the last X-Forwarded-For hop not among them", func(c *Config, v string) error {
			p, err := httpapi.ParseTrustedProxies(v)
			if err != nil {
				return fmt.Errorf("want comma-separated CIDRs like 10.0.0.0/8,192.168.0.1/32: %w", err)
			}
			c.HTTP.TrustedProxies = p
			return nil
		}},
		{"max-subscriptions-per-connection", "MAX_SUBSCRIPTIONS_PER_CONNECTION", itoa(web.SubsPerConnection), "subscriptions on one websocket", num(1, func(c *Config) *int { return &c.HTTP.SubsPerConnection })},
		{"max-subscriptions", "MAX_SUBSCRIPTIONS", itoa(svc.MaxSubscriptions), "subscriptions on the whole server", num(1, func(c *Config) *int { return &c.Service.MaxSubscriptions })},
		{"max-subscriptions-per-user", "MAX_SUBSCRIPTIONS_PER_USER", itoa(web.SubscriptionsPerUser), "subscriptions one user holds open at once, websockets and server-sent events alike", num(1, func(c *Config) *int { return &c.HTTP.SubscriptionsPerUser })},
		{"max-subscriptions-per-address", "MAX_SUBSCRIPTIONS_PER_ADDRESS", itoa(web.SubscriptionsPerAddress), "subscriptions open at once from one client address (several users behind one NAT share it)", num(1, func(c *Config) *int { return &c.HTTP.SubscriptionsPerAddress })},
		{"max-sockets-per-user", "MAX_SOCKETS_PER_USER", itoa(web.SocketsPerUser), "websockets one user holds open at once (a server-sent events subscription counts as one)", num(1, func(c *Config) *int { return &c.HTTP.SocketsPerUser })},
		{"max-sockets-per-address", "MAX_SOCKETS_PER_ADDRESS", itoa(web.SocketsPerAddress), "websockets open at once from one client address (a server-sent events subscription counts as one)", num(1, func(c *Config) *int { return &c.HTTP.SocketsPerAddress })},
		{"body-read-timeout", "BODY_READ_TIMEOUT", fmtDur(web.BodyReadTimeout), "time a request's body has to arrive once its headers have", dur(100*time.Millisecond, func(c *Config) *time.Duration { return &c.HTTP.BodyReadTimeout })},
		{"max-body-reads-per-address", "MAX_BODY_READS_PER_ADDRESS", itoa(web.BodyReadsPerAddress), "requests from one client address whose bodies are being read at once", num(1, func(c *Config) *int { return &c.HTTP.BodyReadsPerAddress })},
		{"ws-keepalive", "WS_KEEPALIVE", fmtDur(web.KeepAlive), "websocket keep-alive interval (both protocols); a socket silent for twice as long is closed", dur(10*time.Millisecond, func(c *Config) *time.Duration { return &c.HTTP.KeepAlive })},
		{"ws-init-timeout", "WS_INIT_TIMEOUT", fmtDur(web.InitTimeout), "time a websocket has to send connection_init", dur(10*time.Millisecond, func(c *Config) *time.Duration { return &c.HTTP.InitTimeout })},
		{"workers", "WORKERS", itoa(svc.Workers), "runs executing at once", num(1, func(c *Config) *int { return &c.Service.Workers })},
		{"runs-per-user", "RUNS_PER_USER", itoa(svc.RunsPerUser), "runs executing at once for one user", num(1, func(c *Config) *int { return &c.Service.RunsPerUser })},
		{"max-sessions-per-user", "MAX_SESSIONS_PER_USER", itoa(svc.MaxSessionsPerUser), "sessions one user may keep", num(1, func(c *Config) *int { return &c.Service.MaxSessionsPerUser })},
		{"max-user-bytes", "MAX_USER_BYTES", strconv.FormatInt(svc.MaxUserBytes, 10), "bytes one user may keep: what they wrote (messages, answers) and set (titles, settings) in their sessions", num64(1, func(c *Config) *int64 { return &c.Service.MaxUserBytes })},
		{"max-queued-runs", "MAX_QUEUED_RUNS", itoa(svc.MaxQueuedRuns), "messages waiting in one session (busy policy ENQUEUE)", num(1, func(c *Config) *int { return &c.Service.MaxQueuedRuns })},
		{"max-session-messages", "MAX_SESSION_MESSAGES", itoa(svc.MaxSessionMessages), "messages of one session, on every branch", num(1, func(c *Config) *int { return &c.Service.MaxSessionMessages })},
		{"max-branches", "MAX_BRANCHES", itoa(svc.MaxBranches), "versions of one message (edits and regenerations)", num(1, func(c *Config) *int { return &c.Service.MaxBranches })},
		{"max-fork-messages", "MAX_FORK_MESSAGES", itoa(svc.MaxForkMessages), "messages one forkSession copies, and a shared session shows (its last)", num(1, func(c *Config) *int { return &c.Service.MaxForkMessages })},
		{"max-share-links", "MAX_SHARE_LINKS", itoa(svc.MaxShareLinks), "share links of one session that are neither revoked nor expired", num(1, func(c *Config) *int { return &c.Service.MaxShareLinks })},
		{"input-expiry", "INPUT_EXPIRY", fmtDur(svc.InputExpiry), "longest a question or a tool call awaiting approval waits; then it is withdrawn and the agent goes on (an agent may ask for less)", dur(time.Second, func(c *Config) *time.Duration { return &c.Service.InputExpiry })},
		{"tool-policies", "TOOL_POLICIES", fmtPolicies(svc.ToolPolicies), "the operator's tool policies, as tool=POLICY pairs separated by commas (POLICY: ALLOW, ASK or DENY); a name ending in * names every tool it begins (mcp__files__*=ASK: every tool of the MCP server files), the exact name winning over the longest such pattern. Each is a ceiling: a session may make a tool stricter, never looser. A tool not named keeps its own default (the shell ASK, an MCP tool annotated readOnlyHint ALLOW and any other ASK, the rest ALLOW)", func(c *Config, v string) error {
			ps, err := parsePolicies(v)
			if err != nil {
				return err
			}
			c.Service.ToolPolicies = ps
			return nil
		}},
		{"user-token-budget", "USER_TOKEN_BUDGET", "0", "tokens (input and output together) one user's runs may spend per USER_BUDGET_PERIOD (0: no cap); once spent, new messages are refused with BUDGET_EXCEEDED and runs wait before their next model call until the period turns", num64(0, func(c *Config) *int64 { return &c.Service.UserTokenBudget })},
		{"user-budget-period", "USER_BUDGET_PERIOD", svc.UserBudgetPeriod, "the period of USER_TOKEN_BUDGET: day or month (calendar, UTC)", func(c *Config, v string) error {
			if v != "day" && v != "month" {
				return fmt.Errorf("want day or month, got %q", v)
			}
			c.Service.UserBudgetPeriod = v
			return nil
		}},
		{"max-schedules-per-user", "MAX_SCHEDULES_PER_USER", itoa(svc.MaxSchedulesPerUser), "schedules one user may keep", num(1, func(c *Config) *int { return &c.Service.MaxSchedulesPerUser })},
		{"schedule-min-interval", "SCHEDULE_MIN_INTERVAL", fmtDur(svc.ScheduleMinInterval), "least time two fires of one cron may be apart (a cron that can fire closer is refused)", dur(time.Minute, func(c *Config) *time.Duration { return &c.Service.ScheduleMinInterval })},
		{"schedule-max-catch-up", "SCHEDULE_MAX_CATCH_UP", itoa(svc.ScheduleMaxCatchUp), "most fires a schedule with catch-up ALL makes for the instants it missed while no server ran (the latest; older ones are recorded SKIPPED)", num(1, func(c *Config) *int { return &c.Service.ScheduleMaxCatchUp })},
		{"schedule-grace", "SCHEDULE_GRACE", fmtDur(svc.ScheduleGrace), "how late a fire may be sent and still count as on time; an instant older than this when a server looks was missed, and follows its schedule's catch-up", dur(time.Second, func(c *Config) *time.Duration { return &c.Service.ScheduleGrace })},
		{"viewer-events-retention", "VIEWER_EVENTS_RETENTION", fmtDur(svc.ViewerRetention), "how long a user's viewer events are kept; viewerEvents refuses a cursor from before the oldest kept with CURSOR_EXPIRED", dur(time.Second, func(c *Config) *time.Duration { return &c.Service.ViewerRetention })},
		{"max-webhooks-per-user", "MAX_WEBHOOKS_PER_USER", itoa(svc.MaxWebhooksPerUser), "webhooks one user may have", num(1, func(c *Config) *int { return &c.Service.MaxWebhooksPerUser })},
		{"webhook-timeout", "WEBHOOK_TIMEOUT", fmtDur(svc.WebhookTimeout), "longest a webhook delivery's attempt waits for the receiver's answer; then the attempt failed", dur(100*time.Millisecond, func(c *Config) *time.Duration { return &c.Service.WebhookTimeout })},
		{"webhook-retry-schedule", "WEBHOOK_RETRY_SCHEDULE", fmtDurs(svc.WebhookRetrySchedule), "how long after each failed attempt of a webhook delivery the next is made (up to 20% more, at random), comma-separated; after the last the delivery is FAILED", func(c *Config, v string) error {
			var ds []time.Duration
			for _, p := range strings.Split(v, ",") {
				d, err := time.ParseDuration(strings.TrimSpace(p))
				if err != nil || d < 10*time.Millisecond {
					return fmt.Errorf("want durations of at least 10ms separated by commas, like 5s,5m,30m, got %q", v)
				}
				ds = append(ds, d)
			}
			if len(ds) > 20 {
				return fmt.Errorf("want at most 20 intervals, got %d", len(ds))
			}
			c.Service.WebhookRetrySchedule = ds
			return nil
		}},
		{"webhook-disable-after", "WEBHOOK_DISABLE_AFTER", itoa(svc.WebhookDisableAfter), "webhook deliveries that fail in a row before the webhook is disabled (its disabledReason says so)", num(1, func(c *Config) *int { return &c.Service.WebhookDisableAfter })},
		{"webhook-allow-private", "WEBHOOK_ALLOW_PRIVATE", "false", "let webhooks reach loopback, private and link-local addresses (a receiver on the server's own network); off, such a URL is refused when a webhook is made and any attempt that resolves to one fails", boolean(func(c *Config) *bool { return &c.Webhooks.AllowPrivate })},
		{"webhook-secret-key", "WEBHOOK_SECRET_KEY", "", "what the webhooks' signing secrets are sealed with in the database, at least 16 characters, the same on every replica (default: a key kept in the database, which keeps them out of the webhooks' rows but not from a reader of the whole database); changing it makes every webhook's secret unreadable until rotated", func(c *Config, v string) error {
			if len(v) < 16 {
				return fmt.Errorf("want at least 16 characters, got %d", len(v))
			}
			c.Service.WebhookSealKey = v
			return nil
		}},
		{"webhook-workers", "WEBHOOK_WORKERS", itoa(svc.WebhookWorkers), "webhook attempts one server makes at once", num(1, func(c *Config) *int { return &c.Service.WebhookWorkers })},
		{"webhook-poll", "WEBHOOK_POLL", fmtDur(svc.WebhookPoll), "how often a server looks for webhook deliveries due (retries, and those a replica that died left); a delivery written here is attempted at once", dur(10*time.Millisecond, func(c *Config) *time.Duration { return &c.Service.WebhookPoll })},
		{"webhook-max-body-bytes", "WEBHOOK_MAX_BODY_BYTES", strconv.Itoa(webhook.DefaultMaxBody), "largest webhook body sent", num64(256, func(c *Config) *int64 { return &c.Webhooks.MaxBody })},
		{"webhook-max-response-bytes", "WEBHOOK_MAX_RESPONSE_BYTES", strconv.Itoa(webhook.DefaultMaxResponse), "most bytes of a receiver's answer read (the rest is not)", num64(0, func(c *Config) *int64 { return &c.Webhooks.MaxResponse })},
		{"webhook-deliveries-retention", "WEBHOOK_DELIVERIES_RETENTION", fmtDur(svc.DeliveryRetention), "how long a webhook delivery that ended (DELIVERED or FAILED) stays in its webhook's log", dur(time.Second, func(c *Config) *time.Duration { return &c.Service.DeliveryRetention })},
		{"write-round-commands", "WRITE_ROUND_COMMANDS", itoa(svc.RoundCommands), "most commands (messages, stops, answers, ...) one write round takes; more wait for the next round, which begins once this one is written (streamed text is not counted)", num(1, func(c *Config) *int { return &c.Service.RoundCommands })},
		{"write-round-gap", "WRITE_ROUND_GAP", fmtDur(svc.RoundGap), "least time from one write round's start to the next's while only timed streamed text waits, so that more sessions share a transaction (commands and a reply's first text never wait for it; 0: at once)", dur(0, func(c *Config) *time.Duration { return &c.Service.RoundGap })},
		{"flush-interval", "FLUSH_INTERVAL", fmtDur(svc.FlushInterval), "least time between two writes of one reply's streamed text, its first going at once (0: as soon as the writer is free; under load the writer batches anyway)", dur(0, func(c *Config) *time.Duration { return &c.Service.FlushInterval })},
		{"demo-chunk-delay", "DEMO_CHUNK_DELAY", fmtDur(demo.DefaultChunkDelay), "pause between two words the demo agent streams (the first comes at once)", dur(0, func(c *Config) *time.Duration { return &c.DemoChunkDelay })},
		{"shutdown-timeout", "SHUTDOWN_TIMEOUT", "5s", "longest graceful shutdown", dur(time.Millisecond, func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
		{"log-level", "LOG_LEVEL", "info", "debug, info, warn or error", func(c *Config, v string) error {
			switch strings.ToLower(v) {
			case "debug", "info", "warn", "error":
				return c.LogLevel.UnmarshalText([]byte(v))
			}
			return fmt.Errorf("want debug, info, warn or error, got %q", v)
		}},
		{"log-format", "LOG_FORMAT", "json", "json or text", func(c *Config, v string) error {
			if v != "json" && v != "text" {
				return fmt.Errorf("want json or text, got %q", v)
			}
			c.LogFormat = v
			return nil
		}},
		{"pprof-addr", "PPROF_ADDR", "", "address for Go's profiler (net/http/pprof), e.g. 127.0.0.1:6060 (empty: off; never expose it publicly)", str(func(c *Config) *string { return &c.PprofAddr })},
		{"openai-base-url", "OPENAI_BASE_URL", "", "OpenAI-compatible endpoint, e.g. https://api.openai.com/v1 or http://localhost:11434/v1 (enables the openai agent)", func(c *Config, v string) error {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return fmt.Errorf("want an http(s) URL, got %q", v)
			}
			c.OpenAI.BaseURL = v
			return nil
		}},
		{"openai-api-key", "OPENAI_API_KEY", "", "API key for the endpoint (enables the openai agent; never shown)", str(func(c *Config) *string { return &c.OpenAI.APIKey })},
		{"openai-model", "OPENAI_MODEL", openai.DefaultModel, "default model; a session's settings can override it", str(func(c *Config) *string { return &c.OpenAI.Model })},
		{"openai-models", "OPENAI_MODELS", "", "other models sessions are expected to choose, comma-separated: /metrics counts tokens of these and OPENAI_MODEL by name, of any other model under \"other\"", func(c *Config, v string) error {
			c.OpenAI.Models = nil
			for _, m := range strings.Split(v, ",") {
				if m = strings.TrimSpace(m); m == "" {
					continue
				}
				if len(m) > maxModelName {
					return fmt.Errorf("want model names of at most %d bytes, got one of %d", maxModelName, len(m))
				}
				c.OpenAI.Models = append(c.OpenAI.Models, m)
			}
			if len(c.OpenAI.Models) > maxModels {
				return fmt.Errorf("want at most %d models, got %d", maxModels, len(c.OpenAI.Models))
			}
			return nil
		}},
		{"openai-temperature", "OPENAI_TEMPERATURE", "", "default temperature (empty: the provider's)", str(func(c *Config) *string { return &c.OpenAI.Temperature })},
		{"openai-system-prompt", "OPENAI_SYSTEM_PROMPT", "", "default system prompt", str(func(c *Config) *string { return &c.OpenAI.SystemPrompt })},
		{"shell-tool", "SHELL_TOOL", "false", "offer the openai agent a shell tool (runs commands on this machine!)", boolean(func(c *Config) *bool { return &c.OpenAI.Shell })},
		{"shell-for-guests", "SHELL_FOR_GUESTS", "false", "offer the shell tool (and any tool that acts on this machine) to guest users' sessions too; off, guests never see it (a warning is logged at start when on)", boolean(func(c *Config) *bool { return &c.Service.GuestHostTools })},
		{"shell-dir", "SHELL_DIR", ".", "working directory of the shell tool", str(func(c *Config) *string { return &c.OpenAI.ShellDir })},
		{"shell-timeout", "SHELL_TIMEOUT", fmtDur(openai.DefaultShellTimeout), "longest shell tool command", dur(time.Second, func(c *Config) *time.Duration { return &c.OpenAI.ShellTimeout })},
		{"mcp-config", "MCP_CONFIG", "", `a JSON file of MCP servers whose tools the openai agent offers, in the shape MCP clients share: {"mcpServers": {"<name>": {"command": "…", "args": […], "env": {…}}}} for one talkgraph starts, {"url": "https://…", "headers": {…}} for one it reaches over streamable HTTP; read at start, a malformed one stops it`, str(func(c *Config) *string { return &c.MCP.File })},
		{"mcp-max-servers", "MCP_MAX_SERVERS", itoa(lim.MaxServers), "most servers MCP_CONFIG may name", num(1, func(c *Config) *int { return &c.MCP.Limits.MaxServers })},
		{"mcp-max-tools", "MCP_MAX_TOOLS", itoa(lim.MaxTools), "most tools of one MCP server offered; the rest are left out (logged)", num(1, func(c *Config) *int { return &c.MCP.Limits.MaxTools })},
		{"mcp-max-result-bytes", "MCP_MAX_RESULT_BYTES", itoa(lim.MaxResultBytes), "most bytes of an MCP tool's result the model reads, and of the progress it prints; the rest is cut, and the model told", num(1, func(c *Config) *int { return &c.MCP.Limits.MaxResultBytes })},
		{"mcp-max-message-bytes", "MCP_MAX_MESSAGE_BYTES", itoa(lim.MaxMessageBytes), "largest message an MCP server may send (a line over stdio, an event or a response over HTTP); a server that sends a larger one is started again", num(1024, func(c *Config) *int { return &c.MCP.Limits.MaxMessageBytes })},
		{"mcp-call-timeout", "MCP_CALL_TIMEOUT", fmtDur(lim.CallTimeout), "longest MCP tool call; then it is cancelled and the model told", dur(time.Second, func(c *Config) *time.Duration { return &c.MCP.Limits.CallTimeout })},
		{"mcp-start-timeout", "MCP_START_TIMEOUT", fmtDur(lim.StartTimeout), "time an MCP server has to start (its process or connection, the handshake and the list of its tools); start-up does not wait for it", dur(time.Second, func(c *Config) *time.Duration { return &c.MCP.Limits.StartTimeout })},
		{"mcp-start-attempts", "MCP_START_ATTEMPTS", itoa(lim.StartAttempts), "failed starts in a row after which an MCP server that never came up is given up (logged) until talkgraph starts again; one that was up is started again, with backoff, however often it dies", num(1, func(c *Config) *int { return &c.MCP.Limits.StartAttempts })},
		{"otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "", "OpenTelemetry collector to send traces to, e.g. http://localhost:4318 (http/protobuf, to /v1/traces) or http://localhost:4317 (grpc); empty here and in OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: no traces", func(c *Config, v string) error {
			c.Traces.Endpoint = v
			return checkOTLPEndpoint(v)
		}},
		{"otlp-traces-endpoint", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", "the collector's URL for traces, used as it is, e.g. http://localhost:4318/v1/traces (wins over OTEL_EXPORTER_OTLP_ENDPOINT)", func(c *Config, v string) error {
			c.Traces.TracesEndpoint = v
			return checkOTLPEndpoint(v)
		}},
		{"otlp-protocol", "OTEL_EXPORTER_OTLP_PROTOCOL", protoHTTP, "how traces are sent: http/protobuf or grpc", func(c *Config, v string) error {
			c.Traces.Protocol = v
			return checkOTLPProtocol(v)
		}},
		{"otlp-traces-protocol", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "", "http/protobuf or grpc for traces (wins over OTEL_EXPORTER_OTLP_PROTOCOL)", func(c *Config, v string) error {
			c.Traces.TracesProtocol = v
			return checkOTLPProtocol(v)
		}},
		{"traces-sampler", "OTEL_TRACES_SAMPLER", "parentbased_always_on", "which traces are kept: " + strings.Join(samplers, ", ") + " (parentbased_…: a caller's traceparent decides when it sends one)", func(c *Config, v string) error {
			c.Traces.Sampler = v
			return checkSampler(v)
		}},
		{"traces-sampler-arg", "OTEL_TRACES_SAMPLER_ARG", "", "the share of traces the traceidratio samplers keep, from 0 to 1 (empty: 1)", func(c *Config, v string) error {
			c.Traces.SamplerArg = v
			return checkSamplerArg(v)
		}},
	}
}

// maxModels and maxModelName bound OPENAI_MODELS: each model listed is three series of
// talkgraph_model_tokens_total, and a session's model name is at most 200 bytes.
const (
	maxModels    = 100
	maxModelName = 200
)

// meteredModels are the models whose usage the metrics count by name: the ones the
// operator configured (see service.Config.Models).
func (c Config) meteredModels() []string {
	out := append([]string{demo.Model}, c.Service.Models...)
	if c.OpenAI.Model != "" {
		out = append(out, c.OpenAI.Model)
	}
	return append(out, c.OpenAI.Models...)
}

// shown returns v, a value of s, as it may be shown (the profiler's command line): a
// setting that holds a secret is shown as [redacted], a URL without its password and
// query. A new setting that holds a secret is named here.
func (s Setting) shown(v string) string {
	switch s.Env {
	case "AUTH_SECRET", "OPENAI_API_KEY", "WEBHOOK_SECRET_KEY":
		return "[redacted]"
	case "DATABASE_URL", "NATS_URL", "AUTH_JWKS_URL", "OPENAI_BASE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
		u, err := url.Parse(v)
		if err != nil {
			return "[redacted]"
		}
		if u.RawQuery != "" || u.ForceQuery {
			u.RawQuery, u.ForceQuery = "[redacted]", false
		}
		u.Fragment, u.RawFragment = "", ""
		return u.Redacted()
	}
	return v
}

// RedactArgs returns a command line with the values of the settings that hold secrets
// (see Setting.shown) redacted, whether given as -flag=value, --flag=value or -flag value:
// what the profiler's /debug/pprof/cmdline shows. Every argument is looked at, after
// "--" too.
func RedactArgs(args []string) []string {
	byFlag := map[string]Setting{}
	for _, s := range Settings() {
		byFlag[s.Flag] = s
	}
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		name, ok := strings.CutPrefix(out[i], "-")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "-")
		name, value, inline := strings.Cut(name, "=")
		s, known := byFlag[name]
		switch {
		case !known:
		case inline:
			out[i] = out[i][:len(out[i])-len(value)] + s.shown(value)
		case i+1 < len(out):
			// Every setting's flag takes a value (see LoadConfig): the next argument.
			i++
			out[i] = s.shown(out[i])
		}
	}
	return out
}

// fmtDur writes a duration the short way: 720h, 15m, 5s, 0s.
// fmtDurs is a list of durations as WEBHOOK_RETRY_SCHEDULE takes it.
func fmtDurs(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmtDur(d)
	}
	return strings.Join(out, ",")
}

func fmtDur(d time.Duration) string {
	s := d.String()
	for _, zero := range []string{"0s", "0m"} {
		if strings.HasSuffix(s, "m"+zero) || strings.HasSuffix(s, "h"+zero) {
			s = strings.TrimSuffix(s, zero)
		}
	}
	return s
}

// checkDatabaseURL checks a DATABASE_URL: its scheme, for SQLite that the file's
// directory exists (the default one under DATA_DIR is created; a path given here must
// point somewhere real), and for PostgreSQL that it is a URL (the server is reached at
// start).
func checkDatabaseURL(v string) error {
	switch {
	case v == "memory:" || v == "memory://":
		return nil
	case strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://"):
		if _, err := url.Parse(v); err != nil {
			return fmt.Errorf("want postgres://user:password@host:5432/database, got a URL that cannot be parsed")
		}
		return nil
	case strings.HasPrefix(v, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(v, "sqlite:"), "//")
		if path == "" {
			return fmt.Errorf("want sqlite:///path/to/file.db, got %q (no file path)", v)
		}
		dir := filepath.Dir(path)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("the directory %s of %q does not exist; create it first", dir, v)
		}
		return nil
	}
	u, _ := url.Parse(v)
	scheme := ""
	if u != nil {
		scheme = u.Scheme
	}
	return fmt.Errorf("want postgres://user:password@host:5432/database, sqlite:///path/to/file.db or memory:, got a URL with scheme %q", scheme)
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

// busSecret returns BUS_SECRET, or else the bus secret the store keeps (PostgreSQL keeps
// it in the database the replicas share), made once: a secret of its own, never the
// token secret, which identity providers and load tools may hold.
func busSecret(ctx context.Context, c Config, store service.Store) ([]byte, error) {
	if c.Nats.BusSecret != "" {
		return []byte(c.Nats.BusSecret), nil
	}
	k, ok := store.(service.SecretKeeper)
	if !ok {
		return nil, errors.New("BUS_SECRET is needed: this storage keeps no secrets for the replicas to share")
	}
	return k.Secret(ctx, "bus", func() ([]byte, error) {
		raw := make([]byte, 32)
		_, err := rand.Read(raw)
		return []byte(hex.EncodeToString(raw)), err
	})
}

// authSecret returns AUTH_SECRET, or else the secret kept by the store (SQLite and
// PostgreSQL keep it in the database, shared by replicas) or in DATA_DIR/auth_secret,
// created on first start, so that issued tokens stay valid across restarts.
func authSecret(ctx context.Context, c Config, store service.Store) ([]byte, error) {
	if c.AuthSecret != "" {
		if len(c.AuthSecret) < 16 {
			return nil, errors.New("AUTH_SECRET must be at least 16 characters")
		}
		return []byte(c.AuthSecret), nil
	}
	if k, ok := store.(service.SecretKeeper); ok {
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

// parsePolicies reads TOOL_POLICIES: tool=POLICY pairs separated by commas, where a tool
// may be a pattern "prefix*".
func parsePolicies(v string) (map[string]service.ToolPolicy, error) {
	out := map[string]service.ToolPolicy{}
	for _, pair := range strings.Split(v, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		tool, policy, ok := strings.Cut(pair, "=")
		p := service.ToolPolicy(strings.ToUpper(strings.TrimSpace(policy)))
		if tool = strings.TrimSpace(tool); !ok || tool == "" || !p.Valid() {
			return nil, fmt.Errorf("want tool=ALLOW|ASK|DENY pairs separated by commas, got %q", pair)
		}
		if i := strings.IndexByte(tool, '*'); i >= 0 && i != len(tool)-1 {
			return nil, fmt.Errorf("a * may only end a tool's name (mcp__files__*=ASK), got %q", pair)
		}
		out[tool] = p
	}
	return out, nil
}

// fmtPolicies writes policies as TOOL_POLICIES reads them, by tool name.
func fmtPolicies(ps map[string]service.ToolPolicy) string {
	names := make([]string, 0, len(ps))
	for name := range ps {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(name + "=" + string(ps[name]))
	}
	return b.String()
}
