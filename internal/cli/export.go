package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/spec"
)

func (a *app) exportCommand() *cobra.Command {
	var r export.Request
	var partSize string
	cmd := &cobra.Command{
		Use:   "export --table T [--partition P] --group G --to URL",
		Short: "Export a partition to object storage as Parquet, in parallel across the group's members; prints the job id",
		Long: `export copies one leaf partition (or a plain table) of a node group to object storage as
Parquet files, one per ctid page range, written by whichever member of the group is free, and
commits them by writing _manifest.json last. The coordinator holds a SHARE lock on the
partition on the primary for the export's duration (writers wait, readers do not), so every
part sees the same rows. Cancelling the job kills the export and removes its files.

Names are read as PostgreSQL reads them: Events is events, '"Events"' is Events; without a
schema, public.

Destinations: file:///dir, or s3://bucket/prefix?endpoint=http://host:port&region=R&use_path_style=true.
Credentials come from the workers' environment, as for any S3 client: a URL with user:secret@
or a secret query parameter is refused. Destinations are stored in one normal form (lower-case
scheme and host, no "." or empty segments, no trailing slash; ".." is refused). Admins export
anywhere; other submitters only under the prefixes of the catalog setting export_destinations.
A destination that already has an export (in the catalog, or a _manifest.json in the store)
is refused unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// 0 means the default to the Go API, not to the command line, whose default is shown.
			if r.MaxAttempts < 1 || r.MaxAttempts > spec.MaxMaxAttempts {
				return Usage("--max-attempts must be between 1 and %d, got %d", spec.MaxMaxAttempts, r.MaxAttempts)
			}
			if partSize != "" {
				n, err := parseSize(partSize)
				if err != nil {
					return Usage("--part-size: %v", err)
				}
				r.PartSize = n
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			e, err := export.Start(cmd.Context(), c, r)
			if err != nil {
				return classify(err)
			}
			if a.json() {
				return PrintJSON(a.stdout, e)
			}
			fmt.Fprintln(a.stdout, e.JobID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.Table, "table", "", "the partitioned table (or a plain table)")
	f.StringVar(&r.Partition, "partition", "", "the leaf partition to export (omit for a plain table)")
	f.StringVar(&r.Group, "group", "", "node group: its primary coordinates, any member exports parts")
	f.StringVar(&r.To, "to", "", "destination URL (file:///dir or s3://bucket/prefix)")
	f.BoolVar(&r.Force, "force", false, "export to a destination that already has an export, replacing its manifest")
	f.IntVar(&r.MaxAttempts, "max-attempts", 5, "attempts per part (and for the coordinator)")
	f.StringVar(&partSize, "part-size", "128MB", "heap bytes per part (e.g. 64MB, 1GB)")
	f.StringVar(&r.Compression, "compression", export.DefaultCompression, "zstd, snappy or none")
	f.StringVar(&r.Owner, "owner", "", "role the export reads as (default: you)")

	limit := 100
	list := listCommand(a, "list", "List exports with their progress, newest first",
		func(c *engine.Client, ctx context.Context) ([]deckhandtype.Export, error) {
			return c.Exports(ctx, limit)
		},
		[]string{"id", "job", "partition", "state", "parts", "rows", "bytes", "destination", "error"},
		eachRow(func(e deckhandtype.Export) []string {
			errText := ""
			if len(e.Errors) > 0 {
				errText = e.Errors[len(e.Errors)-1]
			}
			return []string{strconv.FormatInt(e.ID, 10), strconv.FormatInt(e.JobID, 10), e.Partition, string(e.State),
				fmt.Sprintf("%d/%d", e.PartsDone, e.PartsTotal), strconv.FormatInt(e.Rows, 10), humanBytes(e.Bytes), e.Destination, errText}
		}))
	list.PreRunE = func(*cobra.Command, []string) error {
		if limit < 1 {
			return Usage("--limit must be at least 1, got %d", limit)
		}
		return nil
	}
	list.Flags().IntVar(&limit, "limit", 100, "most exports to list")
	cmd.AddCommand(list)
	return cmd
}

// parseSize reads sizes like 128MB, 1GB, 65536.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"KB", 1 << 10}, {"B", 1}}
	num, mult := s, int64(1)
	for _, u := range units {
		if n, ok := cutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if errors.Is(err, strconv.ErrRange) || (err == nil && n > math.MaxInt64/mult) {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size like 128MB", s)
	}
	return n * mult, nil
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return "", false
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
