package engine

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the worker-side Prometheus metrics. Catalog-wide figures (tasks by state,
// cleanup backlog) are read from the catalog at scrape time by package api.
type Metrics struct {
	ClaimLatency *prometheus.HistogramVec // seconds per claim round, by "kind" of claim (fetch, complete)
	TaskDuration *prometheus.HistogramVec // seconds per attempt, by task kind and outcome
	Attempts     *prometheus.CounterVec   // attempts ended, by task kind and outcome
	Retries      *prometheus.CounterVec   // attempts that will be retried, by task kind
	Claimed      prometheus.Counter       // tasks claimed by this process
	ClaimedAhead prometheus.Counter       // of those, tasks claimed ahead of a free slot on their node
	HandedOver   prometheus.Counter       // node slots handed from an ended task to one claimed ahead
	SideBatches  prometheus.Counter       // batches of results recorded beside the completer's own (sideCompleter)
	Leader       prometheus.Gauge         // 1 while this process leads
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ClaimLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "deckhand_claim_duration_seconds",
			Help:    "Time to claim tasks from the catalog, per claim round.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"via"}),
		TaskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "deckhand_task_duration_seconds",
			Help:    "Duration of task attempts, by kind and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"kind", "outcome"}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deckhand_task_attempts_total",
			Help: "Task attempts ended in this process, by kind and outcome.",
		}, []string{"kind", "outcome"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "deckhand_task_retries_total",
			Help: "Attempts that failed with a retryable error, by kind.",
		}, []string{"kind"}),
		Claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "deckhand_tasks_claimed_total",
			Help: "Tasks claimed by the workers of this process.",
		}),
		ClaimedAhead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "deckhand_tasks_claimed_ahead_total",
			Help: "Tasks claimed ahead of a free slot on their node, to start in the slot of a task of the same worker there as it ends.",
		}),
		HandedOver: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "deckhand_node_slots_handed_over_total",
			Help: "Node slots handed from an ended task to a task claimed ahead, without a catalog round trip in between.",
		}),
		SideBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "deckhand_result_batches_beside_total",
			Help: "Batches of results recorded without a claim, on a catalog connection of their own, while the worker's own batch was being written.",
		}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "deckhand_leader",
			Help: "1 while a worker of this process is the leader.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.ClaimLatency, m.TaskDuration, m.Attempts, m.Retries, m.Claimed, m.ClaimedAhead, m.HandedOver, m.SideBatches, m.Leader)
	}
	return m
}
