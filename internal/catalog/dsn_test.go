package catalog_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A catalog conninfo that cannot be parsed is refused as such, and the refusal never repeats
// its password, however the conninfo spells it: libpq takes spaces around '=', doubled and
// backslashed quotes, and passwords in the URL's user info or query.
func TestBadCatalogDSNRepeatsNoPassword(t *testing.T) {
	for _, dsn := range []string{
		"host=x password=s3cr3t port=abc",
		"host=x password = s3cr3t port=abc",
		"host=x password =s3cr3t port=abc",
		"host=x\tpassword\t=\ts3cr3t port=abc",
		"host=x password= 's3cr3t' port=abc",
		`host=x password='a\'s3cr3t' port=abc`,
		"host=x password='it''s3cr3t' port=abc",
		"host=x sslpassword = s3cr3t port=abc",
		"postgres://u:s3cr3t@x:abc/db",
		"postgres://u:s3:cr3t@x:abc/db",
		"postgres://u@x:abc/db?password=s3cr3t",
	} {
		_, err := catalog.Open(context.Background(), dsn)
		if !errors.Is(err, catalog.ErrBadDSN) || !strings.Contains(err.Error(), "cannot parse") {
			t.Errorf("%q: err = %v, want ErrBadDSN", dsn, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "cr3t") {
			t.Errorf("the refusal repeats the password: %q", err.Error())
		}
	}
}
