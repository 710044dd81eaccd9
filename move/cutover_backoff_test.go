package move

import (
	"testing"
	"time"
)

// The pauses between cut-over tries grow from firstCutOverBackoff but stay within a few
// seconds, whatever the budget, and leave writers at least four times the budget between two
// tries once grown: a load peak does not push the later tries minutes away (as doubling up to
// 30 s did), and a short budget gets its tries done in well under a minute.
func TestCutOverBackoffStaysShort(t *testing.T) {
	for _, budget := range []time.Duration{10 * time.Millisecond, 300 * time.Millisecond, 2 * time.Second, 30 * time.Second} {
		backoff, total := firstCutOverBackoff, time.Duration(0)
		for try := 1; try <= maxCutOverTries; try++ {
			// The jitter adds up to half the pause.
			pause := backoff + backoff/2
			if pause > cutOverBackoffCap*3/2 {
				t.Errorf("budget %s, try %d: pause up to %s", budget, try, pause)
			}
			total += pause
			backoff = min(2*backoff, backoffCap(budget))
		}
		if grown := backoffCap(budget); grown < min(4*budget, cutOverBackoffCap) || grown > cutOverBackoffCap {
			t.Errorf("budget %s: pauses grow to %s", budget, grown)
		}
		if budget <= 300*time.Millisecond && total > time.Minute {
			t.Errorf("budget %s: %d tries pause up to %s in all", budget, maxCutOverTries, total)
		}
	}
}
