package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/api"
)

// /healthz answers anyone, signed in or not. While the catalog does not answer it says so,
// and nothing of the catalog's whereabouts: not the role the server logs in as, its database,
// nor its host and port (the driver's connection error names them all).
func TestHealthWithTheCatalogDownNamesNothingOfIt(t *testing.T) {
	_, proxy, hs := serverBehindProxy(t)
	proxy.Close()
	// The first request may find its connection cut; the next ones connect anew, and fail.
	for range 3 {
		res, err := http.Get(hs.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var h api.Health
		if err := json.Unmarshal(body, &h); err != nil {
			t.Fatalf("decode %q: %v", body, err)
		}
		if res.StatusCode != http.StatusServiceUnavailable || h.Status != "catalog_unreachable" || h.Error == "" {
			t.Fatalf("GET /healthz with the catalog down: %d %s", res.StatusCode, body)
		}
		for _, secret := range []string{"user=", "database=", proxy.Addr(), strconv.Itoa(proxy.Port())} {
			if strings.Contains(string(body), secret) {
				t.Errorf("GET /healthz, open to anyone, names %q of the catalog: %s", secret, body)
			}
		}
	}
}
