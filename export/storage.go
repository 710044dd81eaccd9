package export

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/deckhandhq/deckhand/internal/taskerr"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/s3blob" // s3:// destinations, any S3-compatible server
	"gocloud.dev/gcerrors"
)

// ManifestKey is the object written last at the destination; readers trust only the files it
// names.
const ManifestKey = "_manifest.json"

// OpenDestination opens the export's directory as a bucket whose keys are relative to it,
// creating the directory of a file:// destination. The destination must be in normal form.
func OpenDestination(ctx context.Context, destination string) (*blob.Bucket, error) {
	return openDestination(ctx, destination, true)
}

func openDestination(ctx context.Context, destination string, create bool) (*blob.Bucket, error) {
	u, err := parseNormal(destination)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "file" {
		// No ".attrs" sidecar files beside the Parquet files: a reader given the directory
		// would take them for data. Nothing reads the attributes they would keep.
		// A file is written as a temporary file beside where it goes and renamed there: one
		// made in the worker's TMPDIR could not be renamed onto a destination on another file
		// system (an archive disk, an NFS mount: "invalid cross-device link").
		return fileblob.OpenBucket(u.Path, &fileblob.Options{CreateDir: create, Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	bucketURL := *u
	bucketURL.Path = ""
	b, err := blob.OpenBucket(ctx, bucketURL.String())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", destination, err)
	}
	if prefix == "" {
		return b, nil
	}
	return blob.PrefixedBucket(b, prefix+"/"), nil
}

// errDestinationTaken refuses to write over another export.
var errDestinationTaken = errors.New("already holds an export")

// checkDestinationFree reads the store itself, whatever the catalog says: a destination that
// holds a manifest already holds an export, which only a forced export may replace. The one
// manifest accepted is this export's own, which an earlier attempt may have written just
// before losing its session (ours is whether the planned export wrote it: id and source).
// It writes nothing, not even a directory.
func checkDestinationFree(ctx context.Context, destination string, ours func(Manifest) bool) error {
	u, err := parseNormal(destination)
	if err != nil {
		return taskerr.Permanent(err)
	}
	if u.Scheme == "file" {
		if _, err := os.Stat(u.Path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	bucket, err := openDestination(ctx, destination, false)
	if err != nil {
		return taskerr.Permanent(err)
	}
	defer bucket.Close()
	r, err := bucket.NewReader(ctx, ManifestKey, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	if err != nil {
		return storageError("check "+destination+" for an earlier export", err)
	}
	defer r.Close()
	if m, ok := manifestHead(r); ok && ours(m) {
		return nil
	}
	return taskerr.Permanent(fmt.Errorf("destination %s %w (%s): export with --force to replace it", destination, errDestinationTaken, ManifestKey))
}

// permanentStorageError reports errors that retrying cannot fix: a missing bucket, refused
// credentials or permissions, a bad argument.
func permanentStorageError(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.InvalidArgument, gcerrors.Unimplemented, gcerrors.FailedPrecondition:
		return true
	}
	return false
}

func storageError(what string, err error) error {
	if permanentStorageError(err) {
		return taskerr.Permanent(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// ManifestURL is where an export's manifest lives.
func ManifestURL(destination string) string {
	u, err := parseNormal(destination)
	if err != nil {
		return destination + "/" + ManifestKey
	}
	u.Path = path.Join("/", u.Path, ManifestKey)
	return u.String()
}

// BucketAndPrefix splits a destination into the URL of its bucket and the key prefix of the
// destination's directory inside it ("" or ending in "/"), as cleanup records address objects.
func BucketAndPrefix(destination string) (bucketURL, keyPrefix string, err error) {
	u, err := parseNormal(destination)
	if err != nil {
		return "", "", err
	}
	if u.Scheme == "file" {
		// Escaped, as the normal form is: a directory named "exp#1" is not "exp".
		return (&url.URL{Scheme: "file", Path: u.Path}).String(), "", nil
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	b := *u
	b.Path = ""
	if prefix != "" {
		prefix += "/"
	}
	return b.String(), prefix, nil
}
