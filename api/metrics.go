package api

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// statsCache shares one reading of the catalog-wide counts among every dashboard and
// scraper. A reading is reused for at least minAge, and for twenty times as long as it took
// when that is longer: on a catalog so large that counting gets slow, the counts are read
// less often rather than loading it, so the server spends at most about 5% of one catalog
// backend on them.
type statsCache struct {
	cat    *catalog.Catalog
	minAge time.Duration

	mu   sync.Mutex // held while reading, so concurrent callers share one query
	last deckhandtype.Stats
	at   time.Time
}

func (c *statsCache) get(ctx context.Context) (deckhandtype.Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < max(c.minAge, 20*c.last.Took) {
		return c.last, nil
	}
	s, err := c.cat.Stats(ctx)
	if err != nil {
		return s, err
	}
	c.last, c.at = s, time.Now()
	return s, nil
}

// catalogCollector exports catalog-wide gauges, read at scrape time.
type catalogCollector struct {
	stats *statsCache
	cat   *catalog.Catalog

	up, took, jobs, tasks, workers, leader, nodeRunning, nodeMax *prometheus.Desc
	cleanup, exportRows, exportBytes                             *prometheus.Desc
}

func newCatalogCollector(stats *statsCache, cat *catalog.Catalog) *catalogCollector {
	return &catalogCollector{
		stats:       stats,
		cat:         cat,
		up:          prometheus.NewDesc("deckhand_catalog_up", "1 if the catalog answered this scrape's queries.", nil, nil),
		took:        prometheus.NewDesc("deckhand_catalog_stats_duration_seconds", "Time the catalog took to count jobs and tasks, when they were last read.", nil, nil),
		jobs:        prometheus.NewDesc("deckhand_jobs", "Jobs in the catalog, by state.", []string{"state"}, nil),
		tasks:       prometheus.NewDesc("deckhand_tasks", "Tasks in the catalog, by state.", []string{"state"}, nil),
		workers:     prometheus.NewDesc("deckhand_workers_alive", "Workers holding an unexpired lease.", nil, nil),
		leader:      prometheus.NewDesc("deckhand_leader_elected", "1 if some worker holds the leader lease.", nil, nil),
		nodeRunning: prometheus.NewDesc("deckhand_node_running_tasks", "Tasks running on each node.", []string{"node"}, nil),
		nodeMax:     prometheus.NewDesc("deckhand_node_max_tasks", "Most tasks each node runs at once.", []string{"node"}, nil),
		cleanup:     prometheus.NewDesc("deckhand_cleanup_backlog", "Cleanup records not yet resolved, by state (pending: their operation runs; due: to remove).", []string{"state"}, nil),
		exportRows:  prometheus.NewDesc("deckhand_export_rows", "Rows written by committed and running exports.", nil, nil),
		exportBytes: prometheus.NewDesc("deckhand_export_bytes", "Bytes of Parquet written by committed and running exports.", nil, nil),
	}
}

func (c *catalogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.took, c.jobs, c.tasks, c.workers, c.leader, c.nodeRunning, c.nodeMax,
		c.cleanup, c.exportRows, c.exportBytes} {
		ch <- d
	}
}

func (c *catalogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.stats.get(ctx)
	var nodes []deckhandtype.Node
	if err == nil {
		nodes, err = c.cat.Nodes(ctx)
	}
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.took, prometheus.GaugeValue, s.Took.Seconds())
	for _, st := range deckhandtype.JobStates {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(s.Jobs[st]), string(st))
	}
	for _, st := range deckhandtype.TaskStates {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(s.Tasks[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(s.WorkersAlive))
	for state, n := range s.CleanupBacklog {
		ch <- prometheus.MustNewConstMetric(c.cleanup, prometheus.GaugeValue, float64(n), string(state))
	}
	ch <- prometheus.MustNewConstMetric(c.exportRows, prometheus.GaugeValue, float64(s.ExportRows))
	ch <- prometheus.MustNewConstMetric(c.exportBytes, prometheus.GaugeValue, float64(s.ExportBytes))
	elected := 0.0
	if s.LeaderID != 0 {
		elected = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, elected)
	for _, n := range nodes {
		ch <- prometheus.MustNewConstMetric(c.nodeRunning, prometheus.GaugeValue, float64(n.RunningTasks), n.Name)
		ch <- prometheus.MustNewConstMetric(c.nodeMax, prometheus.GaugeValue, float64(n.MaxTasks), n.Name)
	}
}

// apiCollector exports the server's own load: signed-in sessions and open event streams,
// next to the caps they count against.
type apiCollector struct {
	s                 *Server
	sessions, streams *prometheus.Desc
}

func newAPICollector(s *Server) *apiCollector {
	return &apiCollector{
		s:        s,
		sessions: prometheus.NewDesc("deckhand_api_sessions", "Callers with a catalog client open: signed-in browsers (browser) and cached HTTP Basic credentials (basic).", []string{"kind"}, nil),
		streams:  prometheus.NewDesc("deckhand_api_event_streams", "Open /api/events streams.", nil, nil),
	}
}

func (c *apiCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.sessions; ch <- c.streams }

func (c *apiCollector) Collect(ch chan<- prometheus.Metric) {
	browsers, basics := c.s.sessions.sizes()
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(browsers), "browser")
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(basics), "basic")
	ch <- prometheus.MustNewConstMetric(c.streams, prometheus.GaugeValue, float64(c.s.hub.streams()))
}
