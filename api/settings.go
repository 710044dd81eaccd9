package api

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// intSetting is an integer setting of the catalog table deckhand.setting, read through the
// server's own client at most once per ttl, so that a burst of requests costs one query.
// When the catalog cannot be read it keeps the last value it had, or the default.
type intSetting struct {
	cat  *catalog.Catalog
	name string
	def  int
	ttl  time.Duration
	now  func() time.Time
	log  *slog.Logger

	mu  sync.Mutex
	val int
	at  time.Time
	ok  bool
}

func (c *intSetting) get(ctx context.Context) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.ok && now.Sub(c.at) < c.ttl {
		return c.val
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := c.cat.Setting(ctx, c.name, strconv.Itoa(c.def))
	if err != nil {
		c.log.Warn("reading a setting failed; keeping the previous value", "setting", c.name, "err", err)
		if !c.ok {
			return c.def
		}
		return c.val
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		c.log.Warn("setting is not a non-negative integer; using the default", "setting", c.name, "value", v, "default", c.def)
		n = c.def
	}
	c.val, c.at, c.ok = n, now, true
	return n
}
