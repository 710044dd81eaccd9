package deckhandtype

import (
	"math"
	"time"
)

// Backoff is how long to wait before trying again: exponential with a cap and jitter. The
// wait after attempt n is about Base·2^(n-1), at most Max, spread by ±Jitter so that tasks
// failing together do not retry together. Workers retry tasks with one; the cleaner, records
// whose resource was in use or whose removal failed.
type Backoff struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64 // 0..1
}

// Delay is the wait after the given failed attempt (1-based); r is uniform in [0, 1).
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	d := float64(b.Base) * math.Pow(2, float64(max(attempt, 1)-1))
	d = min(d, float64(b.Max))
	d *= 1 - b.Jitter + 2*b.Jitter*r
	return time.Duration(d)
}
