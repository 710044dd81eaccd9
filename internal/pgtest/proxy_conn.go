package pgtest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// proxyConn is one client connection through the proxy and its connection to the server.
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
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	sv, err := d.DialContext(ctx, "tcp", target)
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
