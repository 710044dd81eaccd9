package export

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A destination has exactly one spelling, its normal form, so that two spellings of one place
// are recognised as one (for overwrite protection and for the prefixes submitters may use):
//
//   - scheme and host in lower case; file:// has no host (file://localhost/x is file:///x);
//   - the path cleaned: "." and empty segments dropped, no trailing slash; a ".." segment is
//     refused rather than resolved, so that no spelling can climb out of an allowed prefix;
//   - no user info: credentials come from the workers' environment, never from a URL, so a
//     secret can never reach the catalog, a listing or a log;
//   - query parameters only from a per-scheme list of settings that are not secrets, each at
//     most once, sorted by name, escaped as url.Values.Encode does;
//   - escaping as net/url's String does (percent-escapes only where needed, upper-case hex).
//
// deckhand.export_destination_problem (catalog migration 0005) checks the same rules in SQL,
// so that a client that skips this normalization is refused by the catalog.

// s3Params are the query parameters an s3:// destination may carry: settings of gocloud's
// s3blob that name no secret and select no credentials (profile and role are left out: they
// would let a URL choose which of the worker's credentials to use).
var s3Params = []string{
	"accelerate", "awssdk", "disable_https", "dualstack", "endpoint", "fips", "hostname_immutable",
	"kmskeyid", "region", "request_checksum_calculation", "response_checksum_validation",
	"s3ForcePathStyle", "ssetype", "use_path_style",
}

var boolParams = []string{"accelerate", "disable_https", "dualstack", "fips", "hostname_immutable", "s3ForcePathStyle", "use_path_style"}

var (
	bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,254}$`)
	// paramName matches query parameter names safe to quote in an error: a secret pasted as a
	// parameter name (an access key id, a base64 token) does not look like this.
	paramName = regexp.MustCompile(`^[a-z][A-Za-z0-9_]{0,31}$`)
)

// maxDestination bounds a destination's length, as the catalog does.
const maxDestination = 2048

// NormalizeDestination checks an export destination URL (file:///absolute/dir or
// s3://bucket/prefix?endpoint=...&region=...&use_path_style=true) and returns its normal form.
// Its errors never quote the URL given, which may hold a secret.
func NormalizeDestination(raw string) (string, error) {
	if strings.TrimSpace(raw) == "" {
		return "", errors.New("destination is empty: use file:///dir or s3://bucket/prefix")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("destination is not a valid URL: use file:///dir or s3://bucket/prefix")
	}
	if u.User != nil {
		return "", errors.New("destination must not carry credentials (user:secret@): the workers take them from their environment")
	}
	if u.Opaque != "" || u.Fragment != "" || strings.Contains(raw, "#") {
		return "", errors.New("destination must be scheme://host/path, without a fragment: use file:///dir or s3://bucket/prefix")
	}
	norm := url.URL{Scheme: u.Scheme}
	host := strings.ToLower(u.Host)
	switch u.Scheme {
	case "file":
		if host != "" && host != "localhost" {
			return "", errors.New("destination: a file:// URL takes an absolute path and no host (file:///dir)")
		}
	case "s3":
		if !bucketName.MatchString(host) {
			return "", errors.New("destination: an s3:// URL names a bucket, without port or credentials (s3://bucket/prefix)")
		}
		norm.Host = host
	case "":
		return "", errors.New("destination is not a URL: use file:///dir or s3://bucket/prefix")
	default:
		return "", fmt.Errorf("destination: unsupported scheme (supported: file, s3)")
	}
	segments, err := cleanPath(u.Path)
	if err != nil {
		return "", err
	}
	if u.Scheme == "file" && len(segments) == 0 {
		return "", errors.New("destination: a file:// URL takes an absolute directory other than /")
	}
	if len(segments) > 0 {
		norm.Path = "/" + strings.Join(segments, "/")
	}
	if norm.RawQuery, err = normalQuery(u.Scheme, u.RawQuery); err != nil {
		return "", err
	}
	out := norm.String()
	if len(out) > maxDestination {
		return "", fmt.Errorf("destination is longer than %d characters", maxDestination)
	}
	return out, nil
}

// cleanPath splits a decoded path into its segments, dropping "." and empty ones.
func cleanPath(p string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..":
			return nil, errors.New(`destination: ".." is not allowed in the path`)
		default:
			out = append(out, s)
		}
	}
	return out, nil
}

// normalQuery checks the query against the scheme's parameters and encodes it in order.
func normalQuery(scheme, raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", errors.New("destination: the query string is malformed")
	}
	var allowed []string
	if scheme == "s3" {
		allowed = s3Params
	}
	for name, values := range q {
		if !slices.Contains(allowed, name) {
			what := "a query parameter"
			if paramName.MatchString(name) {
				what = fmt.Sprintf("query parameter %q", name)
			}
			if len(allowed) == 0 {
				return "", fmt.Errorf("destination: %s is not accepted: %s:// URLs take no query parameters", what, scheme)
			}
			return "", fmt.Errorf("destination: %s is not accepted (secrets come from the workers' environment; accepted: %s)",
				what, strings.Join(allowed, ", "))
		}
		if len(values) != 1 {
			return "", fmt.Errorf("destination: query parameter %q is given more than once", name)
		}
		v := values[0]
		if strings.Contains(v, "@") {
			return "", fmt.Errorf("destination: query parameter %q must not carry credentials", name)
		}
		if slices.Contains(boolParams, name) {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", fmt.Errorf("destination: query parameter %q takes true or false", name)
			}
			q.Set(name, strconv.FormatBool(b))
		}
		if name == "endpoint" {
			if err := checkEndpoint(v); err != nil {
				return "", err
			}
		}
	}
	return q.Encode(), nil
}

// checkEndpoint accepts http(s)://host[:port] and nothing that could carry a credential.
func checkEndpoint(v string) error {
	e, err := url.Parse(v)
	if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil ||
		(e.Path != "" && e.Path != "/") || e.RawQuery != "" || e.Fragment != "" {
		return errors.New("destination: query parameter endpoint takes http(s)://host[:port], without credentials or query")
	}
	return nil
}

// parseNormal parses a destination that must already be in normal form: what the catalog
// holds. Anything else was not written through deckhand and is refused.
func parseNormal(destination string) (*url.URL, error) {
	norm, err := NormalizeDestination(destination)
	if err != nil {
		return nil, err
	}
	if norm != destination {
		return nil, errors.New("destination is not in normal form; it was not submitted through deckhand")
	}
	return url.Parse(norm)
}
