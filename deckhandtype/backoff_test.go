package deckhandtype

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: time.Second, Max: time.Minute}
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 7: time.Minute, 5000: time.Minute} {
		if got := b.Delay(attempt, 0.7); got != want {
			t.Errorf("Delay(%d) = %s, want %s", attempt, got, want)
		}
	}
	b.Jitter = 0.2
	if lo, hi := b.Delay(3, 0), b.Delay(3, 0.999999); lo != 3200*time.Millisecond || hi < 4799*time.Millisecond || hi > 4800*time.Millisecond {
		t.Errorf("jittered Delay(3) spans %s..%s, want 3.2s..4.8s", lo, hi)
	}
}
