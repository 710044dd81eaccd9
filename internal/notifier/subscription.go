package notifier

import "sync/atomic"

// Subscription receives the notifications of some channels. Read both C and Resync; neither
// is ever closed.
type Subscription struct {
	n        *Notifier
	channels []string
	c        chan Notification
	resync   chan struct{}
	dropped  atomic.Int64
	live     bool // guarded by n.mu: told to resync since its channels were last listened to
}

// C delivers the subscribed channels' notifications.
func (s *Subscription) C() <-chan Notification { return s.c }

// Resync receives a signal whenever notifications may have been missed and the subscriber
// should re-read the catalog: once its channels are listened to after it subscribed, and
// again after every reconnect. Signals that wait to be read merge into one.
func (s *Subscription) Resync() <-chan struct{} { return s.resync }

// Dropped counts the notifications dropped because C was full.
func (s *Subscription) Dropped() int64 { return s.dropped.Load() }

// Close ends the subscription; the notifier UNLISTENs the channels nobody else wants. It
// never waits for the notifier and may be called more than once.
func (s *Subscription) Close() { s.n.unsubscribe(s) }

// listenedIn reports whether every channel of the subscription is in have.
func (s *Subscription) listenedIn(have map[string]bool) bool {
	for _, ch := range s.channels {
		if !have[ch] {
			return false
		}
	}
	return true
}
