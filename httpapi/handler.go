// Package httpapi is talkgraph's HTTP edge: the mux with /query and its transports (POST,
// GET, server-sent events, websockets with both GraphQL subprotocols over gorilla/websocket),
// authentication of requests, limits (body size, operation rate, query depth and cost),
// Prometheus metrics, health and readiness, guest sign-in, the playground and the web app.
// It turns HTTP into calls of the GraphQL executor (package graph) and knows no business
// rules of its own.
package httpapi

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/graph/generated"
	"github.com/talkgraph/talkgraph/httpapi/graphqlws"
	"github.com/talkgraph/talkgraph/httpapi/querylimit"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// HandlerConfig holds the HTTP layer's settings. A zero limit takes its value from
// DefaultHandlerConfig, the one place the defaults are written.
type HandlerConfig struct {
	Auth *jwtauth.Auth
	// GuestSignIn enables POST /auth/guest (with an HS256 secret to sign its tokens).
	GuestSignIn bool
	// AllowedOrigins may open websockets besides the server's own origin ("*": any).
	AllowedOrigins []string
	// Introspection stays on for the playground unless switched off.
	DisableIntrospection bool
	MaxComplexity        int           // highest query complexity
	MaxDepth             int           // deepest query nesting
	MaxBodyBytes         int64         // largest request body and websocket message
	OpsPerSecond         float64       // operations per user per second
	OpsBurst             int           // operations a user may make at once above the rate
	SubsPerConnection    int           // subscriptions on one websocket
	KeepAlive            time.Duration // websocket keep-alive interval
	InitTimeout          time.Duration // time a websocket has to send connection_init

	// Introspection is IntrospectionOn (the default), IntrospectionSignedIn or
	// IntrospectionOff; DisableIntrospection means IntrospectionOff.
	Introspection      string
	MaxQueryBytes      int     // query text; default 32 KiB
	MaxQueryTokens     int     // query tokens; default 4000
	MaxAliases         int     // per document; default 30
	MaxErrors          int     // errors in one response; default 20
	SubscribePerSecond float64 // subscriptions per user; default 100
	SubscribeBurst     int     // subscriptions per user; default 1000
	AnonPerSecond      float64 // requests without a user, per client address; default 10
	AnonBurst          int     // default 50
	GuestPerMinute     float64 // guest sign-ins per client address; default 10
	GuestBurst         int     // default 20
	// BodyReadTimeout is how long a request's body may take to arrive once its headers
	// have; default 30s.
	BodyReadTimeout time.Duration
	// BodyReadsPerAddress is how many requests of one client address may be sending their
	// body at once; default 100.
	BodyReadsPerAddress int
	// SocketsPerAddress and SocketsPerUser cap the websockets (and server-sent events
	// subscriptions) open at once from one client address and for one user; default 500
	// and 100.
	SocketsPerAddress int
	SocketsPerUser    int
	// SubscriptionsPerAddress and SubscriptionsPerUser cap the subscriptions open at once
	// from one client address and for one user, on every transport; default 5000 and 1000.
	SubscriptionsPerAddress int
	SubscriptionsPerUser    int
	// TrustedProxies are the proxies whose X-Forwarded-For names the client.
	TrustedProxies []netip.Prefix
	// PublicURL is where clients reach the server (https://chat.example.com), which share
	// links' URLs begin with; empty: each request's own scheme and host.
	PublicURL string
	// SharedReadsPerSecond and SharedReadsBurst limit, per client address, the shared reads
	// (sharedSession, sharedStream) made without a sign-in; default 2 and 20.
	SharedReadsPerSecond float64
	SharedReadsBurst     int

	// Web is the browser app served at /; without it / leads to the playground.
	Web fs.FS
	Log *slog.Logger
	// Build labels the talkgraph_build_info metric (version, revision, goversion).
	Build map[string]string
	// Tracing, when set, gives every GraphQL operation a span; nil: none, at no cost.
	Tracing trace.TracerProvider
	// Collectors are more metrics /metrics serves (those of MCP servers, say).
	Collectors []prometheus.Collector
}

// DefaultHandlerConfig returns the defaults.
func DefaultHandlerConfig() HandlerConfig {
	return HandlerConfig{
		MaxComplexity:     1000,
		MaxDepth:          12,
		MaxBodyBytes:      1 << 20,
		OpsPerSecond:      20,
		OpsBurst:          40,
		SubsPerConnection: 100,
		KeepAlive:         15 * time.Second,
		InitTimeout:       10 * time.Second,

		Introspection:      IntrospectionOn,
		MaxQueryBytes:      querylimit.Defaults.MaxBytes,
		MaxQueryTokens:     querylimit.Defaults.MaxTokens,
		MaxAliases:         querylimit.Defaults.MaxAliases,
		MaxErrors:          20,
		SubscribePerSecond: 100,
		SubscribeBurst:     1000,
		AnonPerSecond:      10,
		AnonBurst:          50,
		GuestPerMinute:     10,
		GuestBurst:         20,

		SharedReadsPerSecond: 2,
		SharedReadsBurst:     20,

		BodyReadTimeout:         30 * time.Second,
		BodyReadsPerAddress:     100,
		SocketsPerAddress:       500,
		SocketsPerUser:          100,
		SubscriptionsPerAddress: 5000,
		SubscriptionsPerUser:    1000,
	}
}

func (c *HandlerConfig) fill() {
	d := DefaultHandlerConfig()
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&c.MaxComplexity, d.MaxComplexity)
	pick(&c.MaxDepth, d.MaxDepth)
	pick(&c.OpsBurst, d.OpsBurst)
	pick(&c.SubsPerConnection, d.SubsPerConnection)
	pick(&c.BodyReadsPerAddress, d.BodyReadsPerAddress)
	pick(&c.SocketsPerAddress, d.SocketsPerAddress)
	pick(&c.SocketsPerUser, d.SocketsPerUser)
	pick(&c.SubscriptionsPerAddress, d.SubscriptionsPerAddress)
	pick(&c.SubscriptionsPerUser, d.SubscriptionsPerUser)
	c.fillLimits(d)
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.OpsPerSecond <= 0 {
		c.OpsPerSecond = d.OpsPerSecond
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = d.KeepAlive
	}
	if c.InitTimeout <= 0 {
		c.InitTimeout = d.InitTimeout
	}
	if c.BodyReadTimeout <= 0 {
		c.BodyReadTimeout = d.BodyReadTimeout
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Server is the HTTP face of the service: /query with every transport, the playground,
// health, readiness, metrics, guest sign-in and the web app.
type Server struct {
	http.Handler
	sockets  *graphqlws.Transport
	limiters []*keyedLimiter
}

// New builds the HTTP handler for svc.
func New(svc *service.Service, cfg HandlerConfig) *Server {
	cfg.fill()
	log := cfg.Log
	sockets := &graphqlws.Transport{
		Authenticate:     wsAuthenticate(cfg.Auth),
		CheckOrigin:      originChecker(cfg.AllowedOrigins),
		KeepAlive:        cfg.KeepAlive,
		InitTimeout:      cfg.InitTimeout,
		ReadLimit:        cfg.MaxBodyBytes,
		MaxSubscriptions: cfg.SubsPerConnection,
		Log:              log,
	}

	addrs := clientAddresses{trusted: cfg.TrustedProxies}
	crowd := newCrowding(addrs, cfg)
	sockets.Values = wsValues(addrs, cfg.PublicURL)
	sockets.Admit = crowd.admitUpgrade
	sockets.AdmitUser = crowd.admitUser
	sockets.AdmitSubscription = crowd.admitSubscription

	resolver := &graph.Resolver{Service: svc}
	gql := handler.New(generated.NewExecutableSchema(generated.Config{Resolvers: resolver}))
	if cfg.Tracing != nil {
		gql.Use(newOperationTracing(cfg.Tracing))
	}
	gql.AddTransport(sockets)
	gql.AddTransport(sse{keepAlive: cfg.KeepAlive, log: log, admit: crowd.admitStream})
	gql.AddTransport(transport.Options{})
	// plainHTTP: no subscriptions over POST and GET (see requests.go).
	gql.AddTransport(plainHTTP{getQuery{}})
	gql.AddTransport(plainHTTP{postJSON{}})
	limiters := useLimits(gql, cfg) // query cost, introspection, rates, the query cache
	gql.SetErrorPresenter(graph.ErrorPresenter(log))
	gql.SetRecoverFunc(graph.Recover(log))

	m := newMetrics(svc, sockets)
	gql.AroundOperations(m.aroundOperations)
	gql.AroundOperations(graph.OperationMemo)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "talkgraph_build_info",
		Help: "Always 1; its labels say which talkgraph runs.", ConstLabels: cfg.Build})
	build.Set(1)
	reg.MustRegister(build)
	reg.MustRegister(cfg.Collectors...)

	anonymous := newKeyedLimiter(cfg.AnonPerSecond, cfg.AnonBurst)
	guests := newKeyedLimiter(cfg.GuestPerMinute/60, cfg.GuestBurst)
	// Every path reads a request's body through body, once the checks that need only the
	// headers have passed; a path that takes no body would otherwise have the HTTP server
	// read it, for as long as it takes, before answering.
	body := &bodies{max: cfg.MaxBodyBytes, timeout: cfg.BodyReadTimeout, reading: newSlots(cfg.BodyReadsPerAddress), addrs: addrs}
	mux := http.NewServeMux()
	mux.Handle("/query", limitAnonymous(anonymous, addrs, authenticate(cfg.Auth, operationValues(addrs, cfg.PublicURL, body.read(gql)))))
	agui := &aguiHandler{svc: svc, keepAlive: cfg.KeepAlive, log: log, rate: limiters[0], admit: crowd.admitStream}
	mux.Handle("/agui", limitAnonymous(anonymous, addrs, authenticate(cfg.Auth, body.read(agui))))
	mux.Handle("/playground", body.read(playgroundPage(cfg.Web)))
	mux.Handle("/auth/guest", limitByAddress(guests, addrs, "too many guest sign-ins from your address", body.read(guestHandler(cfg.Auth, cfg.GuestSignIn))))
	mux.Handle("/healthz", body.read(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})))
	mux.Handle("/readyz", body.read(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := svc.Ready(ctx); err != nil {
			log.Warn("not ready", "err", err)
			http.Error(w, "not ready: "+service.ErrorMessage(err), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})))
	mux.Handle("/metrics", body.read(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	if cfg.Web != nil {
		mux.Handle("/", body.read(spa(cfg.Web)))
		mux.Handle("/s/", body.read(sharedPage(cfg.Web)))
	} else {
		mux.Handle("/", body.read(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				http.NotFound(w, r)
				return
			}
			http.Redirect(w, r, "/playground", http.StatusFound)
		})))
	}
	limiters = append(limiters, anonymous, guests)
	return &Server{Handler: logRequests(log, mux), sockets: sockets, limiters: limiters}
}

// Sweep forgets what the rate limits remember of users and addresses that have been away
// long enough to have their whole burst back. Requests do it as they come; call Sweep
// now and then so that a crowd that came and left is forgotten without them.
func (s *Server) Sweep() {
	for _, l := range s.limiters {
		l.sweep()
	}
}

// Drain closes every websocket with 1001 once the subscriptions on it have delivered what
// the service recorded before it stopped (see service.Close), or when ctx ends. Call it
// when shutting down, after the service is closed: the HTTP server does not track
// hijacked connections.
func (s *Server) Drain(ctx context.Context) { s.sockets.Shutdown(ctx) }

// spa serves the web app's files, and its index.html for any other path without an
// extension, so client-side routes survive a reload.
func spa(files fs.FS) http.Handler {
	fileServer := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p != "/" {
			if _, err := fs.Stat(files, p[1:]); err != nil {
				r2 := r.Clone(r.Context())
				r2.URL.Path = "/"
				p = "/"
				r = r2
			}
		}
		if p == "/" || strings.HasSuffix(p, ".html") {
			w.Header().Set("Cache-Control", "no-cache") // pages change with each build; assets are named by content
		} else {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		}
		fileServer.ServeHTTP(w, r)
	})
}

// playgroundPage serves the GraphQL playground built into the web app (playground.html;
// its assets go through spa like the app's).
func playgroundPage(files fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if files == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, files, "playground.html")
	})
}

// logRequests logs each request's method, path, status and duration at debug level, and
// server errors at warn.
func logRequests(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: 200}
		next.ServeHTTP(rec, r)
		level := slog.LevelDebug
		if rec.status >= 500 {
			level = slog.LevelWarn
		}
		log.Log(r.Context(), level, "http", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", time.Since(start))
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

// WriteHeader passes on the first status only: when a websocket upgrade is refused, both
// the upgrader and gqlgen's transport answer.
func (s *statusRecorder) WriteHeader(code int) {
	if s.wrote {
		return
	}
	s.wrote = true
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes through, for server-sent events.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack passes through, for websockets.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be hijacked")
	}
	s.status = http.StatusSwitchingProtocols
	return h.Hijack()
}
