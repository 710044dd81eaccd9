package notifier_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/notifier"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// env is a database, a notifier running on it until the test ends, and a connection to NOTIFY.
type env struct {
	t      *testing.T
	n      *notifier.Notifier
	sender *pgx.Conn
	admin  *pgx.Conn
}

func newEnv(t *testing.T) *env {
	cl := pgtest.Shared(t)
	dsn := cl.DSN(pgtest.NewDatabase(t), "postgres")
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	n := notifier.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	n.MinBackoff = 10 * time.Millisecond
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{t: t, n: n, sender: pgtest.Connect(t, dsn), admin: pgtest.Connect(t, dsn)}
}

func (e *env) notify(channel, payload string) {
	e.t.Helper()
	if _, err := e.sender.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		e.t.Fatal(err)
	}
}

// resynced waits for the subscription's resync signal.
func resynced(t *testing.T, s *notifier.Subscription, what string) {
	t.Helper()
	select {
	case <-s.Resync():
	case <-time.After(10 * time.Second):
		t.Fatalf("no resync: %s", what)
	}
}

func receive(t *testing.T, s *notifier.Subscription) notifier.Notification {
	t.Helper()
	select {
	case n := <-s.C():
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
		return notifier.Notification{}
	}
}

func (e *env) listening() []string {
	e.t.Helper()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	chs, err := e.n.Listening(lctx)
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Sort(chs)
	return chs
}

// A subscriber gets the notifications of its channels, in order, and only those; it is told
// to resync once its channels are listened to, and not again while the connection holds.
func TestSubscribersReceiveTheirChannels(t *testing.T) {
	e := newEnv(t)
	both := e.n.Subscribe(8, "alpha", "beta")
	defer both.Close()
	beta := e.n.Subscribe(8, "beta")
	defer beta.Close()
	resynced(t, both, "after subscribing")
	resynced(t, beta, "after subscribing")

	e.notify("alpha", "1")
	e.notify("beta", "2")
	e.notify("gamma", "3") // nobody listens
	for _, want := range []notifier.Notification{{Channel: "alpha", Payload: "1"}, {Channel: "beta", Payload: "2"}} {
		if got := receive(t, both); got != want {
			t.Errorf("subscriber of alpha and beta got %+v, want %+v", got, want)
		}
	}
	if got := receive(t, beta); got != (notifier.Notification{Channel: "beta", Payload: "2"}) {
		t.Errorf("subscriber of beta got %+v, want beta 2", got)
	}
	if got := e.listening(); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("the connection listens to %v, want [alpha beta]", got)
	}
	if len(both.C()) != 0 || len(beta.C()) != 0 {
		t.Errorf("unexpected notifications: %d and %d more", len(both.C()), len(beta.C()))
	}
	if len(both.Resync()) != 0 || len(beta.Resync()) != 0 {
		t.Error("resync signalled again while the connection held")
	}
}

// Closing a subscription stops its deliveries at once; the notifier UNLISTENs a channel when
// its last subscriber leaves, and only then.
func TestCloseStopsDeliveryAndUnlistens(t *testing.T) {
	e := newEnv(t)
	first := e.n.Subscribe(8, "alpha")
	second := e.n.Subscribe(8, "alpha", "beta")
	resynced(t, first, "after subscribing")
	resynced(t, second, "after subscribing")

	first.Close()
	first.Close() // twice is harmless
	e.notify("alpha", "after first left")
	if got := receive(t, second); got.Payload != "after first left" {
		t.Fatalf("remaining subscriber got %+v", got)
	}
	if len(first.C()) != 0 {
		t.Error("a closed subscription still received a notification")
	}
	if got := e.listening(); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("with a subscriber left, the connection listens to %v, want [alpha beta]", got)
	}

	second.Close()
	if got := e.listening(); len(got) != 0 {
		t.Errorf("with no subscriber left, the connection still listens to %v", got)
	}
	// Notifications arrive in commit order: once a later one reached a new subscriber, the
	// earlier one would have reached the closed subscription already.
	e.notify("alpha", "after all left")
	probe := e.n.Subscribe(8, "gamma")
	defer probe.Close()
	resynced(t, probe, "after subscribing")
	e.notify("gamma", "probe")
	receive(t, probe)
	if len(second.C()) != 0 {
		t.Errorf("a closed subscription received %+v", <-second.C())
	}
}

// A subscriber that does not read loses what its buffer cannot hold, counted, and never holds
// up the others.
func TestOverflowDropsWithoutBlocking(t *testing.T) {
	e := newEnv(t)
	slow := e.n.Subscribe(2, "alpha")
	defer slow.Close()
	fast := e.n.Subscribe(100, "alpha")
	defer fast.Close()
	resynced(t, slow, "after subscribing")
	resynced(t, fast, "after subscribing")

	const sent = 50
	for i := range sent {
		e.notify("alpha", fmt.Sprint(i))
	}
	for i := range sent {
		if got := receive(t, fast); got.Payload != fmt.Sprint(i) {
			t.Fatalf("fast subscriber: notification %d has payload %q", i, got.Payload)
		}
	}
	// A notification reaches the subscribers one after another, in no set order: the fast one
	// may have the last before the slow one's drop of it is counted.
	for deadline := time.Now().Add(5 * time.Second); slow.Dropped() < sent-2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := slow.Dropped(); got != sent-2 {
		t.Errorf("slow subscriber dropped %d, want %d", got, sent-2)
	}
	if got := []string{(<-slow.C()).Payload, (<-slow.C()).Payload}; !slices.Equal(got, []string{"0", "1"}) {
		t.Errorf("slow subscriber kept %v, want the first two [0 1]", got)
	}
	if fast.Dropped() != 0 {
		t.Errorf("fast subscriber dropped %d", fast.Dropped())
	}
}

// When its backend is terminated, the notifier reconnects, listens to every channel again
// and tells every subscriber to resync, including one that subscribed while it was down.
func TestReconnectAfterTerminationResyncs(t *testing.T) {
	e := newEnv(t)
	sub := e.n.Subscribe(8, "alpha")
	defer sub.Close()
	resynced(t, sub, "after subscribing")
	pid := e.n.PID()
	if pid == 0 {
		t.Fatal("PID is 0 while connected")
	}

	var killed bool
	if err := e.admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminating the notifier's backend %d: %v %v", pid, killed, err)
	}
	late := e.n.Subscribe(8, "beta")
	defer late.Close()
	resynced(t, sub, "after the reconnect")
	resynced(t, late, "after subscribing during the reconnect")
	if now := e.n.PID(); now == pid || now == 0 {
		t.Errorf("PID after reconnect is %d, was %d", now, pid)
	}
	if got := e.listening(); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("after reconnect the connection listens to %v, want [alpha beta]", got)
	}
	e.notify("alpha", "a")
	e.notify("beta", "b")
	if got := receive(t, sub); got.Payload != "a" {
		t.Errorf("after reconnect got %+v", got)
	}
	if got := receive(t, late); got.Payload != "b" {
		t.Errorf("after reconnect got %+v", got)
	}
}
