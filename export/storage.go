package export

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/s3blob" // s3:// destinations, any S3-compatible server
	"gocloud.dev/gcerrors"
)

// ManifestKey is the object written last at the destination; readers trust only the files it
// names.
const ManifestKey = "_manifest.json"

// ParseDestination checks an export destination URL: file:///absolute/dir or
// s3://bucket/prefix?endpoint=...&region=...&use_path_style=true.
func ParseDestination(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return nil, fmt.Errorf("destination %q: %v", raw, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("destination %q: a file:// URL takes an absolute path (file:///dir)", raw)
		}
		if !path.IsAbs(u.Path) || path.Clean(u.Path) == "/" {
			return nil, fmt.Errorf("destination %q: a file:// URL takes an absolute directory other than /", raw)
		}
	case "s3":
		if u.Host == "" {
			return nil, fmt.Errorf("destination %q: an s3:// URL names a bucket (s3://bucket/prefix)", raw)
		}
	case "":
		return nil, fmt.Errorf("destination %q is not a URL: use file:///dir or s3://bucket/prefix", raw)
	default:
		return nil, fmt.Errorf("destination %q: unsupported scheme %q (supported: file, s3)", raw, u.Scheme)
	}
	return u, nil
}

// OpenDestination opens the export's directory as a bucket whose keys are relative to it.
func OpenDestination(ctx context.Context, raw string) (*blob.Bucket, error) {
	u, err := ParseDestination(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "file" {
		return fileblob.OpenBucket(path.Clean(u.Path), &fileblob.Options{CreateDir: true})
	}
	prefix := strings.Trim(u.Path, "/")
	bucketURL := *u
	bucketURL.Path = ""
	b, err := blob.OpenBucket(ctx, bucketURL.String())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", redact(u), err)
	}
	if prefix == "" {
		return b, nil
	}
	return blob.PrefixedBucket(b, prefix+"/"), nil
}

// redact drops credentials from a URL before it is shown.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.Redacted()
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

// ManifestURL is where an export's manifest lives.
func ManifestURL(destination string) string {
	u, err := url.Parse(destination)
	if err != nil {
		return destination + "/" + ManifestKey
	}
	u.Path = path.Join(u.Path, ManifestKey)
	return redact(u)
}

// BucketAndPrefix splits a destination into the URL of its bucket and the key prefix of the
// destination's directory inside it ("" or ending in "/"), as cleanup records address objects.
func BucketAndPrefix(destination string) (bucketURL, keyPrefix string, err error) {
	u, err := ParseDestination(destination)
	if err != nil {
		return "", "", err
	}
	if u.Scheme == "file" {
		return "file://" + path.Clean(u.Path), "", nil
	}
	prefix := strings.Trim(u.Path, "/")
	b := *u
	b.Path = ""
	if prefix != "" {
		prefix += "/"
	}
	return b.String(), prefix, nil
}
