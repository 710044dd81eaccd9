package parquetcopy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Options tune Write. The zero value is the default.
type Options struct {
	// Compression is "zstd" (default, at its fastest level), "snappy" or "none".
	Compression string
	// RowGroupRows ends a row group after this many rows (default DefaultRowGroupRows).
	RowGroupRows int
	// RowGroupBytes ends a row group once this many bytes of COPY data went into it, whichever
	// of the two limits comes first (default DefaultRowGroupBytes).
	RowGroupBytes int64
	// PageBytes is the target uncompressed size of a data page (default DefaultPageBytes).
	PageBytes int
}

// Defaults of Options.
const (
	DefaultRowGroupRows  = 1 << 20
	DefaultRowGroupBytes = 128 << 20
	DefaultPageBytes     = 1 << 20
)

// Stats describe one written file.
type Stats struct {
	Rows   int64
	Bytes  int64    // bytes written to w
	SHA256 [32]byte // of the bytes written to w
}

const (
	// A batch holds up to batchRows rows, fewer for wide rows so that its parquet.Values stay
	// within batchValueBytes, and goes to the encoder early once its variable-length data
	// reaches batchBytes. The encoder hands each column of a batch to parquet-go in one call
	// (a page ends once a call takes it past PageBytes, so batchBytes also bounds how far
	// past); fewer, larger calls measured faster than splitting batches.
	batchRows       = 4096
	batchValueBytes = 2 << 20
	batchBytes      = 4 << 20
	// Batches in flight: one being filled, one being encoded, one queued.
	numBatches = 3
)

var (
	zstdCodec = &zstd.Codec{Level: zstd.SpeedFastest}
)

func codecOf(name string) (compress.Codec, error) {
	switch name {
	case "", "zstd":
		return zstdCodec, nil
	case "snappy":
		return &snappy.Codec{}, nil
	case "none", "uncompressed":
		return &uncompressed.Codec{}, nil
	}
	return nil, fmt.Errorf("unknown compression %q (want zstd, snappy or none)", name)
}

// hashWriter counts and hashes what goes to w.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}

// Write runs copySQL, a `COPY ... TO STDOUT (FORMAT binary)` statement whose columns are
// cols in order, on conn and writes the rows as one Parquet file to w.
//
// Decoding and encoding run concurrently with the COPY. A value that cannot be exported (a
// NaN in a DECIMAL column, an infinite timestamp, a multi-dimensional array) fails the call
// with an error naming the column; pgconn then closes conn, as it does whenever CopyTo
// stops reading early. After an error, what was written to w is not a valid file.
func Write(ctx context.Context, conn *pgconn.PgConn, copySQL string, cols []Column, w io.Writer, opts Options) (Stats, error) {
	return write(cols, w, opts, func(p io.Writer) (int64, error) {
		tag, err := conn.CopyTo(ctx, p, copySQL)
		return tag.RowsAffected(), err
	})
}

// write runs copyTo, which streams COPY binary data into the io.Writer it is given and
// returns the row count the server reported, and encodes that stream to w.
func write(cols []Column, w io.Writer, opts Options, copyTo func(io.Writer) (int64, error)) (Stats, error) {
	specs, err := specsOf(cols)
	if err != nil {
		return Stats{}, err
	}
	codec, err := codecOf(opts.Compression)
	if err != nil {
		return Stats{}, err
	}
	if opts.RowGroupRows <= 0 {
		opts.RowGroupRows = DefaultRowGroupRows
	}
	if opts.RowGroupBytes <= 0 {
		opts.RowGroupBytes = DefaultRowGroupBytes
	}
	if opts.PageBytes <= 0 {
		opts.PageBytes = DefaultPageBytes
	}

	hw := &hashWriter{w: w, h: sha256.New()}
	wopts := []parquet.WriterOption{
		schemaOf(cols, specs),
		parquet.Compression(codec),
		parquet.PageBufferSize(opts.PageBytes),
		parquet.WriteBufferSize(1 << 20),
		parquet.DataPageVersion(1), // the most widely readable page format
		// Min/max go to the column chunk statistics and the page index; repeating them in
		// every page header costs a second pass over each page.
		parquet.DataPageStatistics(false),
		// DELTA_BINARY_PACKED shrinks ids, timestamps and dates to a few bits per value before
		// zstd sees them, which costs less CPU than compressing them PLAIN; byte arrays use
		// parquet-go's default DELTA_LENGTH_BYTE_ARRAY, also faster than PLAIN here.
		parquet.DefaultEncodingFor(parquet.Int32, &parquet.DeltaBinaryPacked),
		parquet.DefaultEncodingFor(parquet.Int64, &parquet.DeltaBinaryPacked),
	}

	for i, s := range specs {
		// The bounds of JSON documents and binary blobs help no reader.
		if s.kind == kJSON || s.kind == kJSONB || s.kind == kBytea {
			path := []string{cols[i].Name}
			if s.list {
				path = append(path, "list", "element")
			}
			wopts = append(wopts, parquet.SkipPageBounds(path...))
		}
	}
	// Validate here, as NewWriter panics on a bad configuration. The options, not the
	// config, go to NewWriter: a *WriterConfig passed as an option cannot turn
	// DataPageStatistics off.
	if _, err := parquet.NewWriterConfig(wopts...); err != nil {
		return Stats{}, err
	}
	enc := &encoder{
		pw:    parquet.NewWriter(hw, wopts...),
		cols:  cols,
		specs: specs,
		in:    make(chan *batch, numBatches),
		free:  make(chan *batch, numBatches),
		done:  make(chan struct{}),
	}
	rows := min(batchRows, max(64, batchValueBytes/(len(specs)*int(unsafe.Sizeof(parquet.Value{})))))
	for range numBatches - 1 {
		enc.free <- newBatch(specs, rows)
	}
	go enc.run()

	p := &parser{
		cols:         cols,
		specs:        specs,
		cur:          newBatch(specs, rows),
		maxRows:      rows,
		maxListBytes: 2 * batchValueBytes,
		maxBytes:     batchBytes,
		rgMaxRows:    int64(opts.RowGroupRows),
		rgMaxBytes:   opts.RowGroupBytes,
	}
	for i, s := range specs {
		if s.list {
			p.lists = append(p.lists, i)
		}
	}
	p.flush = func(b *batch) (*batch, error) {
		if err := enc.error(); err != nil {
			return nil, err
		}
		enc.in <- b
		return <-enc.free, nil
	}

	copied, copyErr := copyTo(p)
	if copyErr == nil && p.state != parseDone {
		copyErr = errors.New("COPY binary stream ended without its trailer")
	}
	if copyErr == nil && p.cur.rows > 0 {
		enc.in <- p.cur
		p.cur = nil
	}
	if copyErr != nil {
		enc.abort.Store(true)
	}
	close(enc.in)
	<-enc.done
	if copyErr != nil {
		if encErr := enc.error(); encErr != nil && !errors.Is(copyErr, encErr) {
			return Stats{}, fmt.Errorf("%w (encoder: %v)", copyErr, encErr)
		}
		return Stats{}, copyErr
	}
	if err := enc.error(); err != nil {
		return Stats{}, err
	}
	if copied != p.rows {
		return Stats{}, fmt.Errorf("COPY reported %d rows but %d were decoded", copied, p.rows)
	}
	if err := enc.pw.Close(); err != nil {
		return Stats{}, fmt.Errorf("finishing the Parquet file: %w", err)
	}
	st := Stats{Rows: p.rows, Bytes: hw.n}
	hw.h.Sum(st.SHA256[:0])
	return st, nil
}

// encoder feeds batches to the Parquet writer's column writers on its own goroutine.
type encoder struct {
	pw    *parquet.Writer
	cols  []Column
	specs []spec

	in    chan *batch
	free  chan *batch
	done  chan struct{}
	abort atomic.Bool

	mu  sync.Mutex
	err error
}

func (e *encoder) error() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *encoder) run() {
	defer close(e.done)
	for b := range e.in {
		if e.error() == nil && !e.abort.Load() {
			if err := e.safeWrite(b); err != nil {
				e.mu.Lock()
				e.err = err
				e.mu.Unlock()
			}
		}
		b.reset()
		select {
		case e.free <- b:
		default: // the parser's last batch: nobody will take it back
		}
	}
}

// safeWrite is write with a panic in parquet-go turned into an error, so that the parser,
// waiting for a free batch, is not left hanging.
func (e *encoder) safeWrite(b *batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parquet encoder panicked: %v", r)
		}
	}()
	return e.write(b)
}

func (e *encoder) write(b *batch) error {
	for i, cw := range e.pw.ColumnWriters() {
		// A batch holds whole rows, as WriteRowValues requires (list values included).
		if _, err := cw.WriteRowValues(b.cols[i].vals); err != nil {
			return fmt.Errorf("encoding column %s: %w", strconv.Quote(e.cols[i].Name), err)
		}
	}
	if b.endRowGroup {
		if err := e.pw.Flush(); err != nil {
			return fmt.Errorf("writing a row group: %w", err)
		}
	}
	return nil
}
