package notifier_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/notifier"
)

// A budget grants its burst at once, then one wake-up per interval however many are asked
// for, saying how long until the next; a wake-up that found something fills it again, and so
// does a quiet spell. A clock that goes back grants nothing.
func TestBudgetGrantsABurstThenOnePerInterval(t *testing.T) {
	const every = 100 * time.Millisecond
	b := notifier.NewBudget(3, every)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	granted := func() int {
		n := 0
		for range 1000 {
			if b.Take(now) == 0 {
				n++
			}
		}
		return n
	}
	if n := granted(); n != 3 {
		t.Fatalf("a full budget granted %d of 1000 at once, want 3", n)
	}
	if wait := b.Take(now); wait != every {
		t.Errorf("an empty budget says to wait %s, want %s", wait, every)
	}
	now = now.Add(40 * time.Millisecond)
	if wait := b.Take(now); wait != 60*time.Millisecond {
		t.Errorf("40ms later it says to wait %s, want 60ms", wait)
	}
	now = now.Add(60 * time.Millisecond)
	if n := granted(); n != 1 {
		t.Errorf("after an interval it granted %d, want 1", n)
	}
	// Over a second of asking every millisecond: ten.
	n := 0
	for range 1000 {
		now = now.Add(time.Millisecond)
		if b.Take(now) == 0 {
			n++
		}
	}
	if n != 10 {
		t.Errorf("asked every millisecond for a second, it granted %d, want 10", n)
	}
	b.Refill()
	if n := granted(); n != 3 {
		t.Errorf("refilled, it granted %d at once, want 3", n)
	}
	now = now.Add(time.Hour)
	if n := granted(); n != 3 {
		t.Errorf("after an hour it granted %d at once, want 3 (no more than its burst)", n)
	}
	now = now.Add(-time.Minute)
	if n := granted(); n != 0 {
		t.Errorf("with the clock set back it granted %d, want 0", n)
	}
	// A wake-up that came due is spent whatever the clock says, and the next one is a whole
	// interval away.
	b.Spend(now)
	if wait := b.Take(now); wait != every {
		t.Errorf("after a wake-up that came due, wait %s, want %s", wait, every)
	}
}
