package parquetcopy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/parquet-go/parquet-go"
)

// copySignature opens every COPY binary stream.
var copySignature = []byte("PGCOPY\n\377\r\n\x00")

const (
	// Microseconds and days between the PostgreSQL epoch (2000-01-01) and the Unix epoch.
	pgEpochMicros = 946684800 * 1000000
	pgEpochDays   = 10957
)

var empty = []byte{}

// arena holds the variable-length bytes of one batch (text, json, bytea, uuid, decimals) in
// reused fixed-size blocks, so that the parquet.Values of the batch can point into it: the
// COPY data handed to Write is only valid during the call.
type arena struct {
	blocks [][]byte
	next   int    // index of the block after cur
	cur    []byte // current block; len is its used part
	size   int    // bytes allocated since reset
	big    bool   // a value larger than arenaBlock got a block of its own since reset
}

const arenaBlock = 1 << 20

func (a *arena) alloc(n int) []byte {
	if cap(a.cur)-len(a.cur) < n {
		a.grow(n)
	}
	l := len(a.cur)
	a.cur = a.cur[:l+n]
	a.size += n
	return a.cur[l : l+n : l+n]
}

func (a *arena) grow(n int) {
	if n > arenaBlock {
		// A one-off block for a large value; reset drops it.
		a.blocks = append(a.blocks, nil)
		copy(a.blocks[a.next+1:], a.blocks[a.next:])
		a.blocks[a.next] = make([]byte, 0, n)
		a.big = true
	} else if a.next == len(a.blocks) {
		a.blocks = append(a.blocks, make([]byte, 0, arenaBlock))
	}
	a.cur = a.blocks[a.next][:0]
	a.next++
}

// unalloc gives back the last n bytes of the latest allocation.
func (a *arena) unalloc(n int) {
	a.cur = a.cur[:len(a.cur)-n]
	a.size -= n
}

func (a *arena) reset() {
	kept := a.blocks[:0]
	for _, b := range a.blocks {
		if cap(b) == arenaBlock {
			kept = append(kept, b)
		}
	}
	clear(a.blocks[len(kept):])
	a.blocks = kept
	a.next, a.cur, a.size, a.big = 0, nil, 0, false
}

// colBatch holds one column's values of a batch of rows.
type colBatch struct {
	vals []parquet.Value
}

// slot appends a value to c and returns it for the caller to fill in.
func (c *colBatch) slot() *parquet.Value {
	n := len(c.vals)
	if n == cap(c.vals) {
		c.vals = append(c.vals, parquet.Value{})
	} else {
		c.vals = c.vals[:n+1]
	}
	return &c.vals[n]
}

// batch is a group of decoded rows passed from the parser to the encoder.
type batch struct {
	cols    []colBatch
	rows    int
	payload int // COPY tuple bytes decoded into this batch
	arena   arena
	// endRowGroup asks the encoder to end the row group after this batch.
	endRowGroup bool
}

func newBatch(specs []spec, rows int) *batch {
	b := &batch{cols: make([]colBatch, len(specs))}
	for i, s := range specs {
		if s.list {
			b.cols[i].vals = make([]parquet.Value, 0, 4*rows)
		} else {
			b.cols[i].vals = make([]parquet.Value, 0, rows)
		}
	}
	return b
}

func (b *batch) reset() {
	// The values point into the arena, whose regular blocks are reused; when a value had a
	// block of its own (which reset drops), clear them so that no stale slot keeps it alive.
	big := b.arena.big
	for i := range b.cols {
		c := &b.cols[i]
		if big {
			clear(c.vals)
		}
		c.vals = c.vals[:0]
	}
	b.rows, b.payload, b.endRowGroup = 0, 0, false
	b.arena.reset()
}

// parser consumes the COPY binary stream incrementally (it is the io.Writer given to
// pgconn.CopyTo) and decodes each tuple into the current batch.
type parser struct {
	cols  []Column
	specs []spec

	state    int    // parseHeader, parseTuples, parseDone
	carry    []byte // an incomplete header or tuple kept from the previous Write
	need     int    // len(carry) needed before parsing is worth retrying
	rows     int64  // tuples decoded
	cur      *batch
	maxRows  int // per batch
	maxBytes int // of arena data per batch
	// lists are the indexes of the list columns, whose values per batch are bounded by
	// maxListBytes (of parquet.Values).
	lists        []int
	maxListBytes int
	// Row group limits, and the current row group's rows and COPY bytes so far.
	rgMaxRows, rgRows   int64
	rgMaxBytes, rgBytes int64
	// flush hands a full batch over and returns an empty one.
	flush func(*batch) (*batch, error)
}

const (
	parseHeader = iota
	parseTuples
	parseDone
)

func (p *parser) Write(data []byte) (int, error) {
	n := len(data)
	if len(p.carry) > 0 {
		p.carry = append(p.carry, data...)
		if len(p.carry) < p.need {
			return n, nil
		}
		used, err := p.parse(p.carry)
		if err != nil {
			return 0, err
		}
		p.carry = p.carry[:copy(p.carry, p.carry[used:])]
		return n, nil
	}
	used, err := p.parse(data)
	if err != nil {
		return 0, err
	}
	if used < len(data) {
		p.carry = append(p.carry[:0], data[used:]...)
	}
	return n, nil
}

// parse decodes every complete header/tuple at the start of buf and returns how many bytes it
// consumed; when it stops short, p.need is the byte count (from the stop) needed to go on.
func (p *parser) parse(buf []byte) (int, error) {
	off := 0
	if p.state == parseHeader {
		const fixed = 11 + 4 + 4
		if len(buf) < fixed {
			p.need = fixed
			return 0, nil
		}
		if !bytes.Equal(buf[:11], copySignature) {
			return 0, errors.New("not a COPY binary stream (bad signature); the statement must be COPY ... TO STDOUT (FORMAT binary)")
		}
		flags := binary.BigEndian.Uint32(buf[11:])
		if flags&(1<<16) != 0 {
			return 0, errors.New("COPY binary stream includes OIDs, which export does not support")
		}
		if flags&^0xffff != 0 {
			return 0, fmt.Errorf("COPY binary stream has unknown critical flags %#x", flags)
		}
		ext := int(binary.BigEndian.Uint32(buf[15:]))
		if ext < 0 || ext > 1<<20 {
			return 0, fmt.Errorf("COPY binary stream has a bad header extension length %d", ext)
		}
		if len(buf) < fixed+ext {
			p.need = fixed + ext
			return 0, nil
		}
		off = fixed + ext
		p.state = parseTuples
	}
	ncols := len(p.specs)
	for off < len(buf) {
		if p.state == parseDone {
			return 0, errors.New("COPY binary stream has data after its trailer")
		}
		rest := buf[off:]
		if len(rest) < 2 {
			p.need = 2
			return off, nil
		}
		nf := int(int16(binary.BigEndian.Uint16(rest)))
		if nf == -1 {
			p.state = parseDone
			off += 2
			continue
		}
		if nf != ncols {
			return 0, fmt.Errorf("COPY row has %d fields, expected %d (the statement's columns must be the export's columns)", nf, ncols)
		}
		// Find the tuple's end first, so that decoding never sees a partial tuple.
		end := 2
		for range ncols {
			if end+4 > len(rest) {
				p.need = end + 4
				return off, nil
			}
			l := int(int32(binary.BigEndian.Uint32(rest[end:])))
			end += 4
			if l > 0 {
				end += l
			} else if l < -1 {
				return 0, fmt.Errorf("COPY field has invalid length %d", l)
			}
		}
		if end > len(rest) {
			p.need = end
			return off, nil
		}
		if err := p.tuple(rest[2:end]); err != nil {
			return 0, err
		}
		off += end
	}
	return off, nil
}

// tuple decodes one complete tuple's fields (after the field count).
func (p *parser) tuple(t []byte) error {
	b := p.cur
	off := 0
	for i := range p.specs {
		s := &p.specs[i]
		cb := &b.cols[i]
		l := int(int32(binary.BigEndian.Uint32(t[off:])))
		off += 4
		if l < 0 {
			if !s.optional {
				return p.fieldError(i, errors.New("NULL in a NOT NULL column"))
			}
			cb.vals = append(cb.vals, parquet.Value{})
			continue
		}
		data := t[off : off+l]
		off += l
		var def int
		if s.optional {
			def = 1
		}
		if s.list {
			if err := p.array(cb, s, data, def); err != nil {
				return p.fieldError(i, err)
			}
			continue
		}
		dst := cb.slot()
		if err := decodeScalar(dst, s, data, &b.arena); err != nil {
			return p.fieldError(i, err)
		}
		if def != 0 {
			dst.SetDefinitionLevel(def)
		}
	}
	p.rows++
	b.rows++
	b.payload += len(t) + 2
	p.rgRows++
	p.rgBytes += int64(len(t) + 2)
	endRG := p.rgRows >= p.rgMaxRows || p.rgBytes >= p.rgMaxBytes
	if endRG || b.rows >= p.maxRows || b.arena.size >= p.maxBytes || p.listsFull(b) {
		if endRG {
			b.endRowGroup = true
			p.rgRows, p.rgBytes = 0, 0
		}
		nb, err := p.flush(b)
		if err != nil {
			return err
		}
		p.cur = nb
	}
	return nil
}

// listsFull reports whether the list columns of b hold more values than a batch should.
func (p *parser) listsFull(b *batch) bool {
	if len(p.lists) == 0 {
		return false
	}
	n := 0
	for _, i := range p.lists {
		n += len(b.cols[i].vals)
	}
	return n*int(unsafe.Sizeof(parquet.Value{})) >= p.maxListBytes
}

func (p *parser) fieldError(i int, err error) error {
	return fmt.Errorf("column %s, row %d of the COPY: %w", strconv.Quote(p.cols[i].Name), p.rows+1, err)
}

// array decodes a one-dimensional array (array_send format) into list values. def is the
// definition level of an empty list (1 when the list itself is optional).
func (p *parser) array(cb *colBatch, s *spec, data []byte, def int) error {
	if len(data) < 12 {
		return errors.New("malformed array value")
	}
	ndim := int32(binary.BigEndian.Uint32(data))
	elem := binary.BigEndian.Uint32(data[8:])
	if elem != s.elemOID {
		return fmt.Errorf("array element type OID %d, expected %d", elem, s.elemOID)
	}
	switch {
	case ndim == 0:
		cb.vals = append(cb.vals, parquet.Value{}.Level(0, def, 0))
		return nil
	case ndim != 1:
		return fmt.Errorf("%d-dimensional array value; export supports one-dimensional arrays only", ndim)
	case len(data) < 20:
		return errors.New("malformed array value")
	}
	n := int(int32(binary.BigEndian.Uint32(data[12:])))
	if n < 0 {
		return errors.New("malformed array value")
	}
	if n == 0 {
		cb.vals = append(cb.vals, parquet.Value{}.Level(0, def, 0))
		return nil
	}
	ar := &p.cur.arena
	off, rep := 20, 0
	for range n {
		if off+4 > len(data) {
			return errors.New("malformed array value")
		}
		l := int(int32(binary.BigEndian.Uint32(data[off:])))
		off += 4
		dst := cb.slot()
		if l < 0 {
			*dst = parquet.Value{}
			dst.SetDefinitionLevel(def + 1)
		} else {
			if off+l > len(data) {
				return errors.New("malformed array value")
			}
			if err := decodeScalar(dst, s, data[off:off+l], ar); err != nil {
				return fmt.Errorf("array element: %w", err)
			}
			off += l
			dst.SetDefinitionLevel(def + 2)
		}
		dst.SetRepetitionLevel(rep)
		rep = 1
	}
	if off != len(data) {
		return errors.New("malformed array value")
	}
	return nil
}
