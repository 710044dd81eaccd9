package bench

import (
	"math"
	"testing"
	"time"
)

// The quantiles of claim rounds come from the histogram's buckets, as observed through the
// workers' metrics: the upper bound of the bucket that holds the quantile's round, and only
// the rounds after the first snapshot count.
func TestClaimQuantilesFromBuckets(t *testing.T) {
	h := newClaimHistogram()
	observe := func(ms float64, n int) {
		for range n {
			h.metrics.ClaimLatency.WithLabelValues("fetch").Observe(ms / 1000)
		}
	}
	observe(40, 50) // before the snapshot: not counted
	before, err := h.snapshot("")
	if err != nil {
		t.Fatal(err)
	}
	observe(1.25, 60) // bucket (1.2, 1.3] ms
	observe(3.05, 39) // bucket (3.0, 3.1] ms
	observe(20.2, 1)  // bucket (20.0, 20.5] ms
	after, err := h.snapshot("")
	if err != nil {
		t.Fatal(err)
	}
	c := after.since(before)
	if c.total != 100 {
		t.Fatalf("rounds = %d, want 100", c.total)
	}
	for _, q := range []struct{ q, want float64 }{{0.5, 1.3}, {0.6, 1.3}, {0.61, 3.1}, {0.99, 3.1}, {1, 20.5}} {
		if got := c.quantileMS(q.q); math.Abs(got-q.want) > 1e-9 {
			t.Errorf("quantile %.2f = %v ms, want %v", q.q, got, q.want)
		}
	}
	// Rounds via complete are apart from those via fetch.
	h.metrics.ClaimLatency.WithLabelValues("complete").Observe((2 * time.Second).Seconds())
	complete, err := h.snapshot("complete")
	if err != nil {
		t.Fatal(err)
	}
	if complete.total != 1 || complete.quantileMS(0.99) != 2000 {
		t.Errorf("via complete: %d rounds, p99 %v ms; want 1 round, p99 2000 ms", complete.total, complete.quantileMS(0.99))
	}
	if (claimCounts{}).quantileMS(0.99) != 0 {
		t.Error("no rounds: want 0")
	}
}
