package notifier

import "time"

// Budget bounds the catalog round trips that notifications make a subscriber spend for
// nothing. Anyone who may connect to the catalog's database may NOTIFY on deckhand's channels
// (PostgreSQL has no privilege for it), thousands of distinct notifications in one
// transaction; were each to cost every subscriber a round trip (a claim, a cleanup pass), a
// role with no deckhand privilege could keep the catalog busy for the price of its NOTIFYs.
//
// A subscriber with a full budget acts on burst notifications at once, then on at most one
// per every: a token bucket. Refill fills it again when acting found something to do, since
// the notifications are then real; a subscriber that waits for its next wake-up merges the
// notifications that come meanwhile into it, losing none, as each wake-up reads the catalog.
//
// A Budget belongs to one goroutine. Its time is given to it, so that it follows the clock
// its subscriber goes by.
type Budget struct {
	burst  float64
	every  time.Duration
	tokens float64
	at     time.Time // when tokens was last brought up to date; zero before the first Take
}

// NewBudget returns a full budget of burst wake-ups, refilled at one per every.
func NewBudget(burst int, every time.Duration) *Budget {
	return &Budget{burst: float64(burst), every: every, tokens: float64(burst)}
}

// Take spends a wake-up at now and returns 0, or, when none is left, spends nothing and
// returns how long until one is.
func (b *Budget) Take(now time.Time) (wait time.Duration) {
	b.fill(now)
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(b.every))
}

// Spend spends the wake-up that came due once the wait Take returned has passed. The wait is
// what spaces wake-ups beyond the burst, whatever now says: an injected clock that stands
// still holds a subscriber back no longer than that.
func (b *Budget) Spend(now time.Time) {
	b.fill(now)
	b.tokens = max(b.tokens-1, 0)
}

// Refill makes the budget full again: a wake-up found something to do.
func (b *Budget) Refill() { b.tokens = b.burst }

// fill adds the wake-ups earned since the last call, up to the burst.
func (b *Budget) fill(now time.Time) {
	// A clock that went back (an injected one, moved) earns nothing.
	if !b.at.IsZero() && now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+float64(now.Sub(b.at))/float64(b.every))
	}
	b.at = now
}
