package pgtest

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// Action is what a Proxy does to a connection when a Rule fires.
type Action int

const (
	// ActionDrop closes both sides of the connection at once, as a broken network would.
	ActionDrop Action = iota + 1
	// ActionStall stops forwarding on the connection in both directions until the rule is
	// removed (then the held message goes through) or the proxy is closed.
	ActionStall
	// ActionError makes the statement fail with Rule.Code and Rule.Message; the connection
	// stays usable. Only Query and Parse messages trigger it.
	//
	// The proxy does not forge the reply: it replaces the statement with a DO block that raises
	// the error on the server, so the session's state (an aborted transaction block, the
	// implicit transaction of a pipeline, messages skipped until Sync) is exactly what a real
	// failure of that statement leaves. The client sees severity ERROR and a CONTEXT line naming
	// PL/pgSQL; codes that a server sends as FATAL (57P01 ...) arrive as ERROR and the
	// connection stays open; use ActionDrop for that.
	ActionError
)

// Rule selects frontend messages on which the proxy misbehaves. The first rule (in the order
// added) that matches a message fires. Match and AfterBytes combine: both must hold.
type Rule struct {
	// Name labels the rule for Hits; rules may share a name.
	Name string
	// Match is tried against the SQL text of Query ('Q') and Parse ('P') messages. nil matches
	// every message (every Query and Parse for ActionError), which with Times 1 means "the next one".
	Match *regexp.Regexp
	// AfterBytes fires once per connection, when the client has sent more than this many bytes
	// (startup packet included). Drop and Stall cut the triggering message so that exactly
	// AfterBytes bytes reach the server; Error acts on the first Query or Parse past the mark.
	AfterBytes int64
	Action     Action
	// Code is the SQLSTATE for ActionError (default XX000); Message its text.
	Code, Message string
	// Times bounds how often the rule fires in total; 0 means no bound.
	Times int
}

var sqlstate = regexp.MustCompile(`^[0-9A-Z]{5}$`)

type rule struct {
	Rule
	removed chan struct{} // closed on removal; stalled connections wait on it
	fired   int
}

// Proxy is a TCP proxy in front of a PostgreSQL server that understands just enough of the wire
// protocol to inject faults at statement boundaries.
type Proxy struct {
	ln        net.Listener
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu     sync.Mutex
	target string // host:port new connections are forwarded to
	rules  []*rule
	hits   map[string]int
	conns  map[*proxyConn]struct{}
	stall  chan struct{} // non-nil while Stall(true); closed by Stall(false)
}

// NewProxy listens on a free port of 127.0.0.1 and forwards each connection to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgtest: proxy listen: %w", err)
	}
	p := &Proxy{
		ln:     ln,
		target: target,
		closed: make(chan struct{}),
		hits:   make(map[string]int),
		conns:  make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Retarget forwards the connections made from now on to target (host:port), as a name or
// address that follows a group's primary does after a failover; connections already made
// stay with the server they reached.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port on 127.0.0.1.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// DSN is a keyword/value conninfo that reaches the target through the proxy.
func (p *Proxy) DSN(dbname, user string) string {
	return pgcluster.DSN("127.0.0.1", p.Port(), dbname, user)
}

// Close stops accepting, closes every connection, releases every stall and waits for the
// proxy's goroutines to finish. It is idempotent.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		_ = p.ln.Close()
		p.DropAll()
	})
	p.wg.Wait()
	return nil
}

// AddRule installs r and returns a function that removes it (idempotent); removing a stall
// rule lets the connections it holds continue.
func (p *Proxy) AddRule(r Rule) (remove func()) {
	switch r.Action {
	case ActionDrop, ActionStall:
	case ActionError:
		if r.Code == "" {
			r.Code = "XX000"
		}
		if !sqlstate.MatchString(r.Code) || strings.HasPrefix(r.Code, "00") {
			panic(fmt.Sprintf("pgtest: rule %q: invalid SQLSTATE %q", r.Name, r.Code))
		}
		if r.Message == "" {
			r.Message = "error injected by pgtest proxy"
		}
	default:
		panic(fmt.Sprintf("pgtest: rule %q: unknown action %d", r.Name, r.Action))
	}
	rr := &rule{Rule: r, removed: make(chan struct{})}
	p.mu.Lock()
	p.rules = append(p.rules, rr)
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, x := range p.rules {
			if x == rr {
				p.rules = append(p.rules[:i], p.rules[i+1:]...)
				close(rr.removed)
				return
			}
		}
	}
}

// Hits reports how often rules with this name have fired, including rules since removed.
func (p *Proxy) Hits(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[name]
}

// DropAll closes every current connection; new ones are still accepted.
func (p *Proxy) DropAll() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Stall stops (true) or resumes (false) forwarding on all connections, new ones included.
// Bytes already in flight are held, not lost.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.stall == nil:
		p.stall = make(chan struct{})
	case !on && p.stall != nil:
		close(p.stall)
		p.stall = nil
	}
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Out of file descriptors and the like: back off rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.serve(cl)
	}
}

// match finds the rule that fires for a message, counts the hit, and returns how many bytes of
// the message to forward before acting (for AfterBytes).
func (p *Proxy) match(c *proxyConn, typ byte, text string, hasText bool, size int) (*rule, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.Times > 0 && r.fired >= r.Times {
			continue
		}
		if r.Action == ActionError && typ != 'Q' && typ != 'P' {
			continue
		}
		if r.Match != nil && (!hasText || !r.Match.MatchString(text)) {
			continue
		}
		cut := 0
		if r.AfterBytes > 0 {
			if c.firedAfter[r] || c.sent+int64(size) <= r.AfterBytes {
				continue
			}
			cut = int(max(0, r.AfterBytes-c.sent))
			c.firedAfter[r] = true
		}
		r.fired++
		p.hits[r.Name]++
		return r, cut
	}
	return nil, 0
}

// raiseStatement is a statement that fails with the given SQLSTATE and message. The literals
// are E-strings so that the result does not depend on standard_conforming_strings.
func raiseStatement(code, message string) string {
	inner := "BEGIN RAISE EXCEPTION USING ERRCODE = " + literal(code) + ", MESSAGE = " + literal(message) + "; END"
	return "DO " + literal(inner)
}

func literal(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// String names the action in test failure messages.
func (a Action) String() string {
	switch a {
	case ActionDrop:
		return "drop"
	case ActionStall:
		return "stall"
	case ActionError:
		return "error"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}
