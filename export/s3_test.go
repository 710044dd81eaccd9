package export_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/parquet-go/parquet-go"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
)

// An export to an S3-compatible server (started in-process) commits like one to a directory;
// a bucket that does not exist fails the export at once instead of retrying for hours.
func TestExportToS3(t *testing.T) {
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	defer srv.Close()
	if err := backend.CreateBucket("archive"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "deckhand")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "deckhand-secret")
	query := "?endpoint=" + srv.URL + "&region=us-east-1&use_path_style=true&disable_https=true"

	g := newGroup(t, 2)
	g.env.Worker(engine.Config{Concurrency: 4})
	e, err := export.Start(ctx, g.env.Client, export.Request{
		Table: "events", Partition: "events_2024", Group: "g1", To: "s3://archive/events/2024" + query, PartSize: 512 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, g, e.JobID, deckhandtype.JobFinished)

	get := func(key string) []byte {
		obj, err := backend.GetObject("archive", key, nil)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		defer obj.Contents.Close()
		var buf bytes.Buffer
		buf.ReadFrom(obj.Contents) //nolint:errcheck
		return buf.Bytes()
	}
	var m export.Manifest
	if err := json.Unmarshal(get("events/2024/"+export.ManifestKey), &m); err != nil {
		t.Fatal(err)
	}
	var rows int64
	for _, f := range m.Files {
		body := get("events/2024/" + f.Key)
		sum := sha256.Sum256(body)
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Fatalf("%s: checksum differs from the manifest", f.Key)
		}
		got, err := parquet.Read[eventRow](bytes.NewReader(body), int64(len(body)))
		if err != nil {
			t.Fatal(err)
		}
		rows += int64(len(got))
	}
	want, _ := sourceSums(t, g.primary, g.db, "events_2024")
	if rows != want || m.TotalRows != want {
		t.Fatalf("read back %d rows (manifest %d), want %d", rows, m.TotalRows, want)
	}

	missing, err := export.Start(ctx, g.env.Client, export.Request{
		Table: "events", Partition: "events_2024", Group: "g1", To: "s3://no-such-bucket/x" + query,
	})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	waitState(t, g, missing.JobID, deckhandtype.JobFailed)
	d, _ := g.env.Client.Job(ctx, missing.JobID)
	for _, task := range d.Tasks {
		if task.Attempts > 1 {
			t.Errorf("%s was retried %d times for a missing bucket", task.Name, task.Attempts)
		}
	}
	t.Logf("missing bucket failed the export in %s", time.Since(began))
}
