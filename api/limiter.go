package api

import (
	"math"
	"net"
	"sync"
	"time"
)

// Limit allows Burst attempts at once, then one more every Every.
type Limit struct {
	Burst int
	Every time.Duration
}

// limiter is a token bucket per key (a client address, a role name). Sign-ins take a token
// before the password is checked, so that many attempts sent at once cannot all get past
// an almost empty bucket, and give it back when the password was right: only failures use
// up the allowance.
type limiter struct {
	limit Limit
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	pruneAt int
}

type bucket struct {
	tokens float64
	at     time.Time
}

// minPrune is the number of buckets above which full ones are forgotten.
const minPrune = 10000

func newLimiter(l Limit, now func() time.Time) *limiter {
	return &limiter{limit: l, now: now, buckets: map[string]*bucket{}, pruneAt: minPrune}
}

// level is how many tokens b holds at now.
func (l *limiter) level(b *bucket, now time.Time) float64 {
	return math.Min(float64(l.limit.Burst), b.tokens+float64(now.Sub(b.at))/float64(l.limit.Every))
}

// take removes a token from key's bucket, or reports how long until one is there.
func (l *limiter) take(key string) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		l.prune(now)
		b = &bucket{tokens: float64(l.limit.Burst), at: now}
		l.buckets[key] = b
	}
	b.tokens, b.at = l.level(b, now), now
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(l.limit.Every))
	}
	b.tokens--
	return true, 0
}

// give returns a token taken from key's bucket.
func (l *limiter) give(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		now := l.now()
		b.tokens, b.at = math.Min(float64(l.limit.Burst), l.level(b, now)+1), now
	}
}

// prune forgets full buckets (they hold nothing a fresh one would not) once there are many,
// so that a stream of made-up role names or addresses cannot grow the map without bound.
func (l *limiter) prune(now time.Time) {
	if len(l.buckets) < l.pruneAt {
		return
	}
	for k, b := range l.buckets {
		if l.level(b, now) >= float64(l.limit.Burst) {
			delete(l.buckets, k)
		}
	}
	l.pruneAt = max(minPrune, 2*len(l.buckets))
}

// loginLimits bounds failed sign-ins per client address and per role name. The address
// limit is the tighter one, so that one client guessing a role's password is stopped before
// the role's own allowance runs out and its owner, elsewhere, can still sign in; the role
// limit bounds guesses spread over many addresses.
type loginLimits struct {
	byAddr, byRole *limiter
}

// reserve takes a token for both the address and the role, or none, and says how long to
// wait when either is exhausted.
func (l *loginLimits) reserve(addr, role string) (ok bool, wait time.Duration) {
	if ok, wait = l.byAddr.take(addr); !ok {
		return false, wait
	}
	if ok, wait = l.byRole.take(role); !ok {
		l.byAddr.give(addr)
		return false, wait
	}
	return true, 0
}

// refund gives back what reserve took: the password was right, or was never checked.
func (l *loginLimits) refund(addr, role string) {
	l.byAddr.give(addr)
	l.byRole.give(role)
}

// clientAddr is the address a request's limit is kept under: the peer's IP, or its /64 for
// IPv6, since one host commonly holds a whole /64.
func clientAddr(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}
