package bench

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deckhandhq/deckhand/engine"
)

// claimHistogram is the workers' claim-round latency (engine.Metrics.ClaimLatency, observed
// for every claim round, via fetch or complete) with buckets fine enough to read a p99 from:
// 0.1 ms steps to 5 ms, 0.5 ms steps to 50 ms, then coarser up to the catalog timeout (10 s).
// The engine's own buckets double at each step, too coarse to compare two runs.
type claimHistogram struct {
	metrics *engine.Metrics
	reg     *prometheus.Registry
}

func newClaimHistogram() *claimHistogram {
	var bounds []float64 // seconds
	for tenths := 1; tenths <= 50; tenths++ {
		bounds = append(bounds, float64(tenths)/10_000)
	}
	for halves := 11; halves <= 100; halves++ {
		bounds = append(bounds, float64(halves)/2_000)
	}
	bounds = append(bounds, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10)
	m := engine.NewMetrics(nil)
	m.ClaimLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "deckhand_bench_claim_duration_seconds",
		Help:    "Time to claim tasks from the catalog, per claim round, in fine buckets.",
		Buckets: bounds,
	}, []string{"via"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.ClaimLatency)
	return &claimHistogram{metrics: m, reg: reg}
}

// claimCounts are the claim rounds so far, fetch and complete together: cum[i] is how many
// took at most bounds[i] seconds, total how many there were (the +Inf bucket's count).
type claimCounts struct {
	bounds []float64
	cum    []uint64
	total  uint64
}

// snapshot counts the claim rounds so far via fetch or complete, or both when via is "".
func (h *claimHistogram) snapshot(via string) (claimCounts, error) {
	var c claimCounts
	families, err := h.reg.Gather()
	if err != nil {
		return c, fmt.Errorf("claim latency: %w", err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() { // one per value of "via"; every one has the same buckets
			if !hasLabel(m.GetLabel(), via) {
				continue
			}
			hist := m.GetHistogram()
			c.total += hist.GetSampleCount()
			for i, b := range hist.GetBucket() {
				if i == len(c.bounds) {
					c.bounds, c.cum = append(c.bounds, b.GetUpperBound()), append(c.cum, 0)
				}
				c.cum[i] += b.GetCumulativeCount()
			}
		}
	}
	return c, nil
}

// hasLabel reports whether labels (of one series) hold value, or value is "".
func hasLabel[L interface{ GetValue() string }](labels []L, value string) bool {
	for _, l := range labels {
		if l.GetValue() == value {
			return true
		}
	}
	return value == ""
}

// since is the claim rounds between snapshot before and c.
func (c claimCounts) since(before claimCounts) claimCounts {
	d := claimCounts{bounds: c.bounds, cum: make([]uint64, len(c.cum)), total: c.total - before.total}
	for i := range c.cum {
		d.cum[i] = c.cum[i]
		if i < len(before.cum) {
			d.cum[i] -= before.cum[i]
		}
	}
	return d
}

// quantileMS is the q quantile (0.99: the 99th percentile) in milliseconds, read from the
// buckets: the upper bound of the bucket holding that round, so at most one bucket width above
// the true value. Beyond the last bound it is +Inf; with no rounds, 0.
func (c claimCounts) quantileMS(q float64) float64 {
	if c.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(c.total)))
	for i, n := range c.cum {
		if n >= rank {
			return c.bounds[i] * 1000
		}
	}
	return math.Inf(1)
}
