package api

import (
	"fmt"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestLimiterRefillsOverTime(t *testing.T) {
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newLimiter(Limit{Burst: 3, Every: 10 * time.Second}, clk.now)
	for i := range 3 {
		if ok, _ := l.take("a"); !ok {
			t.Fatalf("take %d of a burst of 3 refused", i+1)
		}
	}
	ok, wait := l.take("a")
	if ok || wait != 10*time.Second {
		t.Fatalf("4th take: ok=%v wait=%s, want refused for 10s", ok, wait)
	}
	if ok, _ := l.take("b"); !ok {
		t.Fatal("another key shares a's bucket")
	}
	clk.t = clk.t.Add(4 * time.Second)
	if ok, wait := l.take("a"); ok || wait != 6*time.Second {
		t.Fatalf("after 4s: ok=%v wait=%s, want refused for 6s more", ok, wait)
	}
	clk.t = clk.t.Add(6 * time.Second)
	if ok, _ := l.take("a"); !ok {
		t.Fatal("after 10s a token should be back")
	}
	// give returns a token, never beyond the burst.
	l.give("a")
	if ok, _ := l.take("a"); !ok {
		t.Fatal("a given-back token cannot be taken")
	}
	clk.t = clk.t.Add(time.Hour)
	l.give("a")
	for i := range 3 {
		if ok, _ := l.take("a"); !ok {
			t.Fatalf("take %d after an hour refused", i+1)
		}
	}
	if ok, _ := l.take("a"); ok {
		t.Fatal("give filled the bucket beyond its burst")
	}
}

func TestLoginLimitsReserveBothOrNeither(t *testing.T) {
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := &loginLimits{byAddr: newLimiter(Limit{Burst: 5, Every: time.Minute}, clk.now), byRole: newLimiter(Limit{Burst: 2, Every: time.Minute}, clk.now)}
	for range 2 {
		if ok, _ := l.reserve("10.0.0.1", "alice"); !ok {
			t.Fatal("reserve refused within both limits")
		}
	}
	if ok, _ := l.reserve("10.0.0.1", "alice"); ok {
		t.Fatal("reserve beyond the role's burst succeeded")
	}
	// The refused reservation took nothing from the address: 3 of its 5 remain.
	for i := range 3 {
		if ok, _ := l.reserve("10.0.0.1", fmt.Sprintf("role%d", i)); !ok {
			t.Fatalf("address token %d was lost to a refused reservation", i+3)
		}
	}
	if ok, _ := l.reserve("10.0.0.1", "bob"); ok {
		t.Fatal("reserve beyond the address's burst succeeded")
	}
	// A successful sign-in gives its tokens back.
	l.refund("10.0.0.1", "bob")
	if ok, _ := l.reserve("10.0.0.1", "bob"); !ok {
		t.Fatal("refunded tokens are not usable")
	}
}

func TestLimiterForgetsFullBuckets(t *testing.T) {
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newLimiter(Limit{Burst: 2, Every: time.Second}, clk.now)
	for i := range minPrune {
		l.take(fmt.Sprint(i))
	}
	clk.t = clk.t.Add(time.Minute)
	l.take("new")
	if len(l.buckets) != 1 {
		t.Fatalf("%d buckets kept, want only the new one once the others refilled", len(l.buckets))
	}
}

func TestClientAddr(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1:5000":            "192.0.2.1",
		"[2001:db8:1:2:3::4]:5000":  "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:5000": "2001:db8:1:2::/64",
		"[::1]:80":                  "::/64",
	} {
		if got := clientAddr(in); got != want {
			t.Errorf("clientAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
