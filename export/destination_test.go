package export

import (
	"strings"
	"testing"
)

// Spellings of one place normalize to one string; normalizing again changes nothing.
func TestNormalizeDestination(t *testing.T) {
	for raw, want := range map[string]string{
		"file:///x/exp":             "file:///x/exp",
		"file:///x/./exp":           "file:///x/exp",
		"file:///x//exp/":           "file:///x/exp",
		"file://localhost/x/exp":    "file:///x/exp",
		"FILE:///x/exp":             "file:///x/exp",
		"file:/x/exp":               "file:///x/exp",
		"file:///x/%65xp":           "file:///x/exp",
		"file:///x/my dir":          "file:///x/my%20dir",
		"file:///x/a$b,c=d@e":       "file:///x/a$b,c=d@e",
		"s3://bucket":               "s3://bucket",
		"s3://Bucket/":              "s3://bucket",
		"s3://bucket//a/./b/":       "s3://bucket/a/b",
		"s3://bucket/Key/Case":      "s3://bucket/Key/Case",
		"s3://bucket/x?region=eu-1": "s3://bucket/x?region=eu-1",
		"s3://bucket/x?use_path_style=1&region=r&endpoint=http://h:9000&disable_https=TRUE": "s3://bucket/x?disable_https=true&endpoint=http%3A%2F%2Fh%3A9000&region=r&use_path_style=true",
	} {
		got, err := NormalizeDestination(raw)
		if err != nil || got != want {
			t.Errorf("NormalizeDestination(%q) = %q, %v; want %q", raw, got, err, want)
			continue
		}
		if again, err := NormalizeDestination(got); err != nil || again != got {
			t.Errorf("normalizing %q again gives %q, %v", got, again, err)
		}
	}
}

// Refused destinations are refused with a reason that never quotes what was given.
func TestNormalizeDestinationRefuses(t *testing.T) {
	const secret = "Zk3SECRETqv"
	for raw, reason := range map[string]string{
		"file:///x/../etc":                                 `".."`,
		"file:///x/%2e%2e/etc":                             `".."`,
		"s3://bucket/a/../../b":                            `".."`,
		"s3://AKIA" + secret + ":" + secret + "@bucket/x":  "credentials",
		"s3://:" + secret + "@bucket/x":                    "credentials",
		"s3://bucket/x?aws_secret_access_key=" + secret:    `"aws_secret_access_key" is not accepted`,
		"s3://bucket/x?" + secret + "=1":                   "a query parameter is not accepted",
		"s3://bucket/x?profile=" + secret:                  `"profile" is not accepted`,
		"s3://bucket/x?endpoint=http://k:" + secret + "@h": "credentials",
		"s3://bucket/x?endpoint=http://h/?token=" + secret: "endpoint",
		"s3://bucket/x?region=a&region=" + secret:          "more than once",
		"s3://bucket/x?use_path_style=" + secret:           "true or false",
		"s3://bucket:9000/x":                               "bucket",
		"s3:///x":                                          "bucket",
		"s3://bucket/x#" + secret:                          "fragment",
		"file:///x?region=" + secret:                       "no query parameters",
		"file:///":                                         "other than /",
		"file://host/x":                                    "no host",
		"ftp://host/" + secret:                             "unsupported scheme",
		"relative/" + secret:                               "not a URL",
		"s3://bu cket/" + secret:                           "not a valid URL",
		"":                                                 "empty",
		"file:///" + strings.Repeat("a", maxDestination):   "longer",
	} {
		got, err := NormalizeDestination(raw)
		if err == nil {
			t.Errorf("NormalizeDestination(%q) = %q, want a refusal", raw, got)
			continue
		}
		if !strings.Contains(err.Error(), reason) {
			t.Errorf("NormalizeDestination(%q): %v; want the reason to mention %s", raw, err, reason)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("NormalizeDestination(%q): the refusal quotes the secret: %v", raw, err)
		}
	}
}
