// Package postgres is the service.Store for deployments with several replicas: one
// PostgreSQL database that every replica shares, through pgx (github.com/jackc/pgx/v5)
// and its connection pool. It also implements service.Coordinator (which replicas live,
// and which runs each owns), keeps the server's shared secrets (Secret) and the IDs of
// the commands replicas took from the bus (service.ReplayGuard).
//
// The schema lives in migrations/ as goose migrations embedded in the binary; Open brings
// the database up to date, holding an advisory lock while it does, so that replicas that
// start at once migrate one after the other. The SQL itself is confined to queries.go.
//
// The service writes through Append, which it calls once per round of its writer with
// every session's pending batches. Append makes one transaction of them in two round
// trips however many sessions there are: one that locks the sessions' rows (in ID order,
// so that replicas never deadlock) and reads what decides which batches the stored state
// refuses, and one that sends every write of the others as a few multi-row statements
// and commits (see Store.Append). Statements are prepared once per connection (pgx's
// statement cache): a connection's first use of them costs one more round trip.
//
// Times are kept as int64 nanoseconds since the Unix epoch, since PostgreSQL's timestamps
// keep microseconds only; text that people and models write is kept as bytes (bytea),
// since PostgreSQL's text cannot hold a NUL character. See migrations/00001_init.sql.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/talkgraph/talkgraph/service"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options tune a Store. The zero value is a good default.
type Options struct {
	// MaxConns is the size of the connection pool. Default: GOMAXPROCS, at least 4.
	MaxConns int
	// StatementTimeout bounds each statement on the server, waits for locks included;
	// a statement that takes longer fails with EUNAVAILABLE. Default
	// DefaultStatementTimeout.
	StatementTimeout time.Duration
	// ConnectTimeout bounds each attempt to open a connection. Default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultStatementTimeout = 10 * time.Second
	DefaultConnectTimeout   = 5 * time.Second
)

// Store is a service.Store and service.Coordinator in a PostgreSQL database. It is safe for
// concurrent use, and several Stores (one per replica) may share a database.
var (
	_ service.Store        = (*Store)(nil)
	_ service.Coordinator  = (*Store)(nil)
	_ service.SecretKeeper = (*Store)(nil)
	_ service.ReplayGuard  = (*Store)(nil)
)

type Store struct {
	pool   *pgxpool.Pool
	opts   Options
	closed atomic.Bool
	// tails is where the logs of the sessions this store wrote end (see tails.go).
	tails tails
	// forgotSeen is when FirstSeen last deleted the IDs whose time has passed (unix
	// nanoseconds).
	forgotSeen atomic.Int64
}

var (
	_ service.Store       = (*Store)(nil)
	_ service.Coordinator = (*Store)(nil)
)

// Open connects to the database at databaseURL (postgres://user:password@host:port/db?…, any
// form pgx takes, such as search_path=schema among its parameters), brings its schema up
// to date and checks that it can be written. The pool reconnects by itself when the
// server restarts or connections break.
func Open(ctx context.Context, databaseURL string, opts Options) (*Store, error) {
	if opts.MaxConns <= 0 {
		opts.MaxConns = max(4, runtime.GOMAXPROCS(0))
	}
	if opts.StatementTimeout <= 0 {
		opts.StatementTimeout = DefaultStatementTimeout
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// pgx's error quotes the URL, password included as far as it could not tell it
		// apart: say only what is wrong.
		inner := errors.Unwrap(err)
		if ue := (*url.Error)(nil); errors.As(inner, &ue) {
			inner = ue.Err
		}
		if inner == nil {
			return nil, errors.New("postgres: open: the database URL cannot be parsed")
		}
		return nil, fmt.Errorf("postgres: open: the database URL cannot be parsed: %w", inner)
	}
	cfg.MaxConns = int32(min(opts.MaxConns, 1<<30))
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "talkgraph"
	}
	// Migrations may take long: their connections get no statement timeout.
	migrateCfg := cfg.ConnConfig.Copy()
	migrateCfg.RuntimeParams["statement_timeout"] = "0"
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(opts.StatementTimeout.Milliseconds(), 10)

	if err := migrate(ctx, migrateCfg); err != nil {
		return nil, fail("open", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fail("open", err)
	}
	s := &Store{pool: pool, opts: opts}
	// Better to refuse to start than to fail on the first write.
	if err := s.ping(ctx); err != nil {
		pool.Close()
		return nil, fail("open", err)
	}
	return s, nil
}

// migrate brings the schema up to the newest embedded migration. Goose's Provider takes
// no lock unless given one, and its PostgreSQL session locker polls (every 5 s by
// default); instead a connection of its own holds a blocking advisory lock on the schema
// while goose migrates, so that a replica starting meanwhile waits just as long as it
// must, and finds the schema current.
func migrate(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, qLockMigrations); err != nil {
		return fmt.Errorf("migrations: lock: %w", err)
	}
	// Closing the connection releases the lock too; unlocking first frees it at once.
	defer conn.Exec(context.WithoutCancel(ctx), qUnlockMigrations) //nolint:errcheck

	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	db.SetMaxOpenConns(1)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// Close implements service.Store: it waits for the calls under way (an Append's batches
// are committed or not by then) and closes the pool.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.pool.Close()
	return nil
}

// Ping implements service.Store: in a transaction that it rolls back, it writes a row, so
// it fails while the database is unreachable, read-only (a standby, or
// default_transaction_read_only) or refusing writes.
//
// It cannot see a full disk coming: PostgreSQL takes a small write into memory, and fails
// only when it must extend a file or the write-ahead log; Append then fails with
// EUNAVAILABLE, "storage is full".
func (s *Store) Ping(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	err := s.ping(ctx)
	if brokenConn(err) && ctx.Err() == nil { // once: the pool replaces the connection
		err = s.ping(ctx)
	}
	return fail("ping", err)
}

// ping writes and rolls back, in one round trip.
func (s *Store) ping(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue(qBegin)
	b.Queue(qPing)
	b.Queue(qRollback)
	// A connection left in a failed transaction is dropped by the pool when released.
	return s.pool.SendBatch(ctx, b).Close()
}

// Secret returns the value stored under name, or, the first time, stores what gen returns
// and returns that. The server keeps its token signing secret here. Replicas that ask at
// once all get the value of the one that stored first.
func (s *Store) Secret(ctx context.Context, name string, gen func() ([]byte, error)) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	key := "secret:" + name
	var v []byte
	err := s.pool.QueryRow(ctx, qMeta, key).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fail("secret", err)
	}
	if v, err = gen(); err != nil {
		return nil, fmt.Errorf("postgres: secret %s: %w", name, err)
	}
	if v == nil {
		v = []byte{}
	}
	if _, err := s.pool.Exec(ctx, qInsertMeta, key, v); err != nil {
		return nil, fail("secret", err)
	}
	// Another replica may have stored its value first: that one counts.
	if err := s.pool.QueryRow(ctx, qMeta, key).Scan(&v); err != nil {
		return nil, fail("secret", err)
	}
	return v, nil
}

// check returns EUNAVAILABLE once the store is closed.
func (s *Store) check() error {
	if s.closed.Load() {
		return service.Errorf(service.EUNAVAILABLE, "storage is closed")
	}
	return nil
}

// fail turns err from operation op into the error the Store returns: EUNAVAILABLE, with a
// message fit for a user, when the storage cannot be reached or written, wrapped around
// the driver's error for the log. Coded errors and context errors pass through.
func fail(op string, err error) error {
	if err == nil {
		return nil
	}
	var coded *service.Error
	if errors.As(err, &coded) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if msg := unavailable(err); msg != "" {
		return fmt.Errorf("postgres: %s: %w: %w", op, service.Errorf(service.EUNAVAILABLE, "%s", msg), err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// brokenConn reports whether err says the connection broke or the server cannot be
// reached (rather than refusing a statement).
func brokenConn(err error) bool {
	return err != nil && unavailable(err) == msgUnreachable
}

const msgUnreachable = "storage is unreachable"

// unavailable returns what is wrong with the storage when err says it cannot be reached or
// written, and "" for other errors (bugs: a bad statement, a row that does not fit).
func unavailable(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch code := pe.Code; {
		case code == "53100": // disk_full
			return "storage is full"
		case code == "25006": // read_only_sql_transaction
			return "storage is read-only"
		case code == "57014": // query_canceled: the statement timeout
			return "storage is too slow to answer (statement timeout)"
		case code == "55P03" || code == "40P01" || code == "40001": // lock_not_available, deadlock, serialization
			return "storage is busy (locked by another transaction)"
		case code == "53300" || code == "57P03": // too_many_connections, cannot_connect_now
			return "storage is unreachable (it refuses connections now)"
		case strings.HasPrefix(code, "53"): // out of memory, other resources
			return "storage is out of resources"
		case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "57P"): // connection, shutdown
			return msgUnreachable
		case strings.HasPrefix(code, "28"): // invalid authorization
			return "storage refuses the credentials"
		case code == "3D000": // invalid_catalog_name
			return "storage database does not exist"
		case code == "58030" || code == "XX001" || code == "XX002": // io_error, data_corrupted, index_corrupted
			return "storage cannot be read or written (disk I/O error or damage)"
		}
		return ""
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed), pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return msgUnreachable
	}
	if msg := err.Error(); strings.Contains(msg, "conn closed") || strings.Contains(msg, "closed pool") {
		return msgUnreachable
	}
	return ""
}
