package pgtest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

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
	target    string
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu    sync.Mutex
	rules []*rule
	hits  map[string]int
	conns map[*proxyConn]struct{}
	stall chan struct{} // non-nil while Stall(true); closed by Stall(false)
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

type proxyConn struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{}
	closeOnce      sync.Once

	stalledOn *rule // guarded by p.mu

	// Owned by the client-to-server goroutine.
	sent       int64
	firedAfter map[*rule]bool

	// Replies the server owes, in order, so that the replies to injected messages can be
	// dropped; see expectation.
	emu    sync.Mutex
	expect []expectation
}

// expectation is one reply the server will send: ParseComplete ('1'), BindComplete ('2') or
// ReadyForQuery ('Z'). Only replies to messages the proxy injected itself are dropped.
type expectation struct {
	kind     byte
	injected bool
}

var errConnClosed = errors.New("proxy connection closed")

func (p *Proxy) serve(cl net.Conn) {
	defer p.wg.Done()
	// Close must not wait out a slow dial.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	d := net.Dialer{Timeout: 10 * time.Second}
	sv, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		_ = cl.Close()
		return
	}
	c := &proxyConn{p: p, client: cl, server: sv, done: make(chan struct{}), firedAfter: make(map[*rule]bool)}
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		c.close()
		return
	default:
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	defer c.close()

	var serverSide sync.WaitGroup
	serverSide.Add(1)
	started := make(chan struct{})
	go func() {
		defer serverSide.Done()
		select {
		case <-started:
			c.serverLoop()
			c.close() // the server hung up: so must the client, or it waits for a reply forever
		case <-c.done:
		}
	}()
	cr := bufio.NewReaderSize(cl, 32<<10)
	sw := bufio.NewWriterSize(sv, 32<<10)
	if err := c.startup(cr, sw); err == nil {
		close(started)
		c.clientLoop(cr, sw)
	}
	c.close()
	serverSide.Wait()
}

func (c *proxyConn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	maxStartupLen     = 10000
	// A message can be as large as the server accepts (1 GB of COPY data or a huge query).
	maxMessageLen = 1<<30 + 1<<20
)

// startup handles the untyped packets at the start of a connection: encryption requests are
// refused here (the client falls back to plaintext, which lets the proxy read the stream) and
// the StartupMessage or CancelRequest is passed on.
func (c *proxyConn) startup(cr *bufio.Reader, sw *bufio.Writer) error {
	for {
		hdr, err := cr.Peek(8)
		if err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 || n > maxStartupLen {
			return fmt.Errorf("bad startup packet length %d", n)
		}
		code := binary.BigEndian.Uint32(hdr[4:8])
		raw := make([]byte, n)
		if _, err := io.ReadFull(cr, raw); err != nil {
			return err
		}
		if code == sslRequestCode || code == gssEncRequestCode {
			if err := c.gate(nil); err != nil {
				return err
			}
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return err
			}
			continue
		}
		return c.fromClient(0, raw, cr, sw)
	}
}

func (c *proxyConn) clientLoop(cr *bufio.Reader, sw *bufio.Writer) {
	for {
		typ, raw, err := readMessage(cr)
		if err != nil {
			return
		}
		if err := c.fromClient(typ, raw, cr, sw); err != nil {
			return
		}
	}
}

func (c *proxyConn) serverLoop() {
	sr := bufio.NewReaderSize(c.server, 32<<10)
	cw := bufio.NewWriterSize(c.client, 32<<10)
	for {
		typ, raw, err := readMessage(sr)
		if err != nil {
			return
		}
		if err := c.gate(cw); err != nil {
			return
		}
		if c.injectedReply(typ) {
			continue
		}
		if _, err := cw.Write(raw); err != nil {
			return
		}
		// Batch small messages (rows) into one write, but never hold a reply the client waits for.
		if sr.Buffered() == 0 {
			if err := cw.Flush(); err != nil {
				return
			}
		}
	}
}

func readMessage(r *bufio.Reader) (byte, []byte, error) {
	hdr, err := r.Peek(5)
	if err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:5]))
	if n < 4 || n > maxMessageLen {
		return 0, nil, fmt.Errorf("bad message length %d", n)
	}
	raw := make([]byte, 1+n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return 0, nil, err
	}
	return raw[0], raw, nil
}

// gate blocks while the proxy or this connection is stalled. w, if given, is flushed first so
// that what was forwarded before the stall is not held back with it.
func (c *proxyConn) gate(w *bufio.Writer) error {
	for {
		p := c.p
		p.mu.Lock()
		var wait chan struct{}
		if p.stall != nil {
			wait = p.stall
		} else if r := c.stalledOn; r != nil {
			select {
			case <-r.removed:
				c.stalledOn = nil
			default:
				wait = r.removed
			}
		}
		p.mu.Unlock()
		if wait == nil {
			return nil
		}
		if w != nil && w.Buffered() > 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
		select {
		case <-wait:
		case <-c.done:
			return errConnClosed
		case <-p.closed:
			return errConnClosed
		}
	}
}

// fromClient handles one client message (typ 0 for the startup packet).
func (c *proxyConn) fromClient(typ byte, raw []byte, cr *bufio.Reader, sw *bufio.Writer) error {
	if err := c.gate(sw); err != nil {
		return err
	}
	var text string
	hasText := false
	switch typ {
	case 'Q':
		var m pgproto3.Query
		if m.Decode(raw[5:]) == nil {
			text, hasText = m.String, true
		}
	case 'P':
		var m pgproto3.Parse
		if m.Decode(raw[5:]) == nil {
			text, hasText = m.Query, true
		}
	}
	r, cut := c.p.match(c, typ, text, hasText, len(raw))
	if r == nil {
		return c.forward(typ, raw, cr, sw)
	}
	switch r.Action {
	case ActionDrop:
		if cut > 0 {
			_, _ = sw.Write(raw[:cut])
			_ = sw.Flush()
		}
		c.close()
		return errConnClosed
	case ActionStall:
		if cut > 0 {
			if _, err := sw.Write(raw[:cut]); err != nil {
				return err
			}
			c.sent += int64(cut)
		}
		c.p.mu.Lock()
		c.stalledOn = r
		c.p.mu.Unlock()
		if err := c.gate(sw); err != nil {
			return err
		}
		// The expectation bookkeeping needs the whole message, even if part already went out.
		c.track(typ, false)
		if _, err := sw.Write(raw[cut:]); err != nil {
			return err
		}
		c.sent += int64(len(raw) - cut)
		return c.flushIfIdle(cr, sw)
	case ActionError:
		c.sent += int64(len(raw))
		stmt := raiseStatement(r.Code, r.Message)
		if typ == 'Q' {
			msg, _ := (&pgproto3.Query{String: stmt}).Encode(nil)
			c.track('Q', false)
			if _, err := sw.Write(msg); err != nil {
				return err
			}
			return c.flushIfIdle(cr, sw)
		}
		// A failing Parse makes the server skip the rest of the batch up to Sync; the injected
		// Parse/Bind/Execute fails at Execute to the same effect. The client's own Bind,
		// Execute, ... of the swallowed statement then go to a server that discards them.
		var buf []byte
		buf, _ = (&pgproto3.Parse{Query: stmt}).Encode(buf)
		buf, _ = (&pgproto3.Bind{}).Encode(buf)
		buf, _ = (&pgproto3.Execute{}).Encode(buf)
		c.track('P', true)
		c.track('B', true)
		if _, err := sw.Write(buf); err != nil {
			return err
		}
		return c.flushIfIdle(cr, sw)
	}
	return c.forward(typ, raw, cr, sw)
}

func (c *proxyConn) forward(typ byte, raw []byte, cr *bufio.Reader, sw *bufio.Writer) error {
	c.track(typ, false)
	if _, err := sw.Write(raw); err != nil {
		return err
	}
	c.sent += int64(len(raw))
	if typ == 0 {
		return sw.Flush()
	}
	return c.flushIfIdle(cr, sw)
}

func (c *proxyConn) flushIfIdle(cr *bufio.Reader, sw *bufio.Writer) error {
	if cr.Buffered() == 0 {
		return sw.Flush()
	}
	return nil
}

// track records the reply a message sent to the server will produce. It runs before the
// message is written, so the reply can never arrive first.
func (c *proxyConn) track(typ byte, injected bool) {
	var kind byte
	switch typ {
	case 'P':
		kind = '1'
	case 'B':
		kind = '2'
	case 'S', 'Q', 'F':
		kind = 'Z'
	default:
		return
	}
	c.emu.Lock()
	c.expect = append(c.expect, expectation{kind: kind, injected: injected})
	c.emu.Unlock()
}

// injectedReply consumes the expectation a server message answers and reports whether the
// message answers something the proxy injected, which the client must not see.
func (c *proxyConn) injectedReply(typ byte) bool {
	c.emu.Lock()
	defer c.emu.Unlock()
	switch typ {
	case '1', '2':
		// A mismatch means a flow this bookkeeping does not model; pass it through untouched.
		if len(c.expect) > 0 && c.expect[0].kind == typ {
			e := c.expect[0]
			c.expect = c.expect[1:]
			return e.injected
		}
	case 'E':
		// After an error the server skips everything up to the next Sync, so the replies
		// expected before that Sync will never come.
		i := 0
		for i < len(c.expect) && c.expect[i].kind != 'Z' {
			i++
		}
		c.expect = c.expect[i:]
	case 'Z':
		for i, e := range c.expect {
			if e.kind == 'Z' {
				c.expect = c.expect[i+1:]
				break
			}
		}
	}
	return false
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
