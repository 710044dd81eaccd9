package engine

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/notifier"
)

// Clock tells the time. Tests inject one to move time without sleeping.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// DefaultBackoff is used when Config.Backoff is zero.
var DefaultBackoff = deckhandtype.Backoff{Base: time.Second, Max: 5 * time.Minute, Jitter: 0.2}

// catalogRetry spaces a worker's retries of catalog calls that failed (claims, results,
// heartbeats), as the notifier spaces its reconnects: quick enough to resume within moments
// of the catalog coming back, slow enough not to hammer one that is restarting.
var catalogRetry = deckhandtype.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// Config tunes a Worker. Zero values mean the defaults documented on each field.
type Config struct {
	Name        string // shown in deckhand.workers; default host:pid
	Concurrency int    // tasks this worker runs at once; default 100
	FetchLimit  int    // most tasks one claim takes; default Concurrency

	LeaseTTL            time.Duration // a worker silent this long is declared dead; default 15s
	HeartbeatInterval   time.Duration // default LeaseTTL/3
	PollInterval        time.Duration // claim even without a notification this often; default 1s
	MaintenanceInterval time.Duration // the leader rescues this often and probes the nodes every five; default 1s
	ShutdownGrace       time.Duration // running tasks may finish this long after a stop; default 30s
	// ShutdownRecordTimeout bounds what a stop does once the grace is over: waiting for the
	// cancelled tasks to return and recording the results. Results not recorded by then are
	// left to the leader, which re-runs their tasks once this worker's lease expires; Run
	// then returns ErrNotRecorded. Default 5s.
	ShutdownRecordTimeout time.Duration
	// CatalogTimeout bounds each catalog call of the worker's own loops (claims, results,
	// heartbeats): a catalog that stops answering without closing its connections (a network
	// partition) would otherwise hold them until TCP gives up, minutes later. A call that
	// times out is retried like any failed one. Default 10s.
	CatalogTimeout time.Duration
	// ProgressInterval is how often the worker reads, on the nodes, the progress of the
	// statements its tasks run (pg_stat_progress_*) and records it in the catalog, in one
	// statement for all its tasks. Default 1s; negative: never.
	ProgressInterval time.Duration
	// Retention is how long finished jobs are kept unless the catalog setting retention says
	// otherwise; default 7 days. The leader applies it every minute on Clock.
	Retention time.Duration

	Backoff deckhandtype.Backoff
	Clock   Clock          // nil: real time; SQL then uses the database clock
	Rand    func() float64 // nil: math/rand/v2
	// Features are the task kinds (and leader services) this worker runs besides sql and noop.
	Features []Feature
	Logger   *slog.Logger
	// NoLeader keeps this worker out of leader elections.
	NoLeader bool
	// NoCleaner keeps the cleaner (package cleanup) out of this worker's leader services.
	NoCleaner bool
	// LeaderServices run while this worker leads (for example the cleaner) and are stopped,
	// through their context, when it stops leading. Those that are Retainers have their
	// history deleted by the leader's retention service.
	LeaderServices []Service
	// Notifier is the process's catalog notification listener, shared with whatever else in
	// the process subscribes (an API server). Nil: the worker makes its own and runs it while
	// it runs.
	Notifier *notifier.Notifier
	// Metrics, when set, are updated as the worker claims and runs tasks.
	Metrics *Metrics
}

// Service is a long-running part of the leader. Run returns when ctx is done.
type Service interface {
	Run(ctx context.Context) error
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = host + ":" + strconv.Itoa(os.Getpid())
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 100
	}
	if c.FetchLimit <= 0 || c.FetchLimit > c.Concurrency {
		c.FetchLimit = c.Concurrency
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = c.LeaseTTL / 3
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.MaintenanceInterval <= 0 {
		c.MaintenanceInterval = time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.ShutdownRecordTimeout <= 0 {
		c.ShutdownRecordTimeout = 5 * time.Second
	}
	if c.CatalogTimeout <= 0 {
		c.CatalogTimeout = 10 * time.Second
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.Backoff == (deckhandtype.Backoff{}) {
		c.Backoff = DefaultBackoff
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
