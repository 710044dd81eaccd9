package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// workerIDHandler adds the worker's current id to every record. A worker declared dead
// registers anew under a new id, and its loggers (its own, and those it handed its features)
// were made before that: an id fixed in them would name a worker the catalog has stopped.
type workerIDHandler struct {
	slog.Handler
	id *atomic.Int64
}

func (h workerIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := h.id.Load(); id != 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("worker_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h workerIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return workerIDHandler{Handler: h.Handler.WithAttrs(attrs), id: h.id}
}

func (h workerIDHandler) WithGroup(name string) slog.Handler {
	return workerIDHandler{Handler: h.Handler.WithGroup(name), id: h.id}
}
