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
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/99designs/gqlgen/graphql/playground"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/graph/generated"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// HandlerConfig holds the HTTP layer's settings. Zero values take the defaults in the comments.
type HandlerConfig struct {
	Auth *jwtauth.Auth
	// GuestSignIn enables POST /auth/guest (with an HS256 secret to sign its tokens).
	GuestSignIn bool
	// AllowedOrigins may open websockets besides the server's own origin ("*": any).
	AllowedOrigins []string
	// Introspection stays on for the playground unless switched off.
	DisableIntrospection bool
	MaxComplexity        int           // default 1000
	MaxDepth             int           // default 12
	MaxBodyBytes         int64         // default 1 MiB
	OpsPerSecond         float64       // per user; default 20
	OpsBurst             int           // per user; default 40
	SubsPerConnection    int           // per websocket; default 100
	KeepAlive            time.Duration // websocket keep-alive interval; default 15s
	InitTimeout          time.Duration // time to send connection_init; default 10s
	WebsocketReadLimit   int64         // bytes of one websocket message; default 1 MiB

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
	// TrustedProxies are the proxies whose X-Forwarded-For names the client.
	TrustedProxies []netip.Prefix

	// Web is the browser app served at /; without it / leads to the playground.
	Web fs.FS
	Log *slog.Logger
}

func (c *HandlerConfig) fill() {
	if c.MaxComplexity <= 0 {
		c.MaxComplexity = 1000
	}
	if c.MaxDepth <= 0 {
		c.MaxDepth = 12
	}
	c.fillLimits()
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.OpsPerSecond <= 0 {
		c.OpsPerSecond = 20
	}
	if c.OpsBurst <= 0 {
		c.OpsBurst = 40
	}
	if c.SubsPerConnection <= 0 {
		c.SubsPerConnection = 100
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.InitTimeout <= 0 {
		c.InitTimeout = 10 * time.Second
	}
	if c.WebsocketReadLimit <= 0 {
		c.WebsocketReadLimit = 1 << 20
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Server is the HTTP face of the service: /query with every transport, the playground,
// health, readiness, metrics, guest sign-in and the web app.
type Server struct {
	http.Handler
	sockets  *connTracker
	resolver *graph.Resolver
}

// New builds the HTTP handler for svc.
func New(svc *service.Service, cfg HandlerConfig) *Server {
	cfg.fill()
	log := cfg.Log
	sockets := newConnTracker()

	resolver := &graph.Resolver{Service: svc}
	gql := handler.New(generated.NewExecutableSchema(generated.Config{Resolvers: resolver}))
	gql.AddTransport(transport.SSE{})
	gql.AddTransport(transport.Websocket{
		Implementation:        newGorillaWebsocket(cfg.AllowedOrigins, 10*time.Second),
		InitFunc:              wsInit(cfg.Auth, cfg.SubsPerConnection, sockets),
		InitTimeout:           cfg.InitTimeout,
		KeepAlivePingInterval: cfg.KeepAlive,
		PingPongInterval:      cfg.KeepAlive,
		PayloadReadLimit:      &cfg.WebsocketReadLimit,
		ErrorFunc: func(ctx context.Context, err error) {
			log.Debug("websocket", "err", err)
		},
	})
	gql.AddTransport(transport.Options{})
	gql.AddTransport(plainHTTP{transport.GET{}})
	gql.AddTransport(plainHTTP{transport.POST{}}) // plainHTTP: no subscriptions
	gql.Use(graph.Loaders{})
	useLimits(gql, cfg) // query cost, introspection, rates, the query cache
	gql.SetErrorPresenter(graph.ErrorPresenter(log))
	gql.SetRecoverFunc(graph.Recover(log))

	m := newMetrics(svc, sockets)
	gql.AroundOperations(m.aroundOperations)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	addrs := clientAddresses{trusted: cfg.TrustedProxies}
	anonymous := newKeyedLimiter(cfg.AnonPerSecond, cfg.AnonBurst)
	guests := newKeyedLimiter(cfg.GuestPerMinute/60, cfg.GuestBurst)
	mux := http.NewServeMux()
	mux.Handle("/query", limitAnonymous(anonymous, addrs, authenticate(cfg.Auth, endStreamsAtExpiry(withWSHolder(limitBody(cfg.MaxBodyBytes, gql))))))
	mux.Handle("/playground", playground.Handler("talkgraph", "/query"))
	mux.Handle("/auth/guest", limitByAddress(guests, addrs, "too many guest sign-ins from your address", guestHandler(cfg.Auth, cfg.GuestSignIn)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := svc.Ready(ctx); err != nil {
			log.Warn("not ready", "err", err)
			http.Error(w, "not ready: "+service.ErrorMessage(err), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if cfg.Web != nil {
		mux.Handle("/", spa(cfg.Web))
	} else {
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				http.NotFound(w, r)
				return
			}
			http.Redirect(w, r, "/playground", http.StatusFound)
		})
	}
	return &Server{Handler: logRequests(log, mux), sockets: sockets, resolver: resolver}
}

// Drain waits, until ctx ends, for subscriptions to hand over their last events once the
// service has ended them (see service.Close), then a moment for the transports to write
// them and their completions.
func (s *Server) Drain(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.resolver.WaitStreams(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return
	}
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// CloseWebsockets closes every open websocket with 1001; call it when shutting down,
// since the HTTP server does not close hijacked connections.
func (s *Server) CloseWebsockets() { s.sockets.closeAll() }

func withWSHolder(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			r = r.WithContext(context.WithValue(r.Context(), wsHolderKey{}, &wsHolder{}))
		}
		next.ServeHTTP(w, r)
	})
}

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
		if p == "/" {
			w.Header().Set("Cache-Control", "no-cache")
		} else {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		}
		fileServer.ServeHTTP(w, r)
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
