package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// submittedBy reads who the catalog recorded as a job's submitter.
func (h *harness) submittedBy(id int64) string {
	h.t.Helper()
	j, err := h.Client.JobRow(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return j.SubmittedBy
}

// postJob submits a one-task job through the API with the given credentials header pair.
func (h *harness) postJob(header ...string) int64 {
	h.t.Helper()
	r := h.do("POST", "/api/jobs", `{"description": "through the API", "tasks": [{"name": "a", "kind": "noop"}]}`, header...)
	if r.code != http.StatusCreated {
		h.t.Fatalf("POST /api/jobs: %d %s", r.code, r.body)
	}
	var created struct{ ID int64 }
	r.json(h.t, &created)
	return created.ID
}

func (h *harness) metaUser(header ...string) string {
	h.t.Helper()
	var m api.Meta
	r := h.do("GET", "/api/meta", "", header...)
	if r.code != http.StatusOK {
		h.t.Fatalf("GET /api/meta: %d %s", r.code, r.body)
	}
	r.json(h.t, &m)
	return m.User
}

func TestSignInIsCheckedByTheCatalog(t *testing.T) {
	h := newHarness(t)
	alice := h.catalogUser("alice", "deckhand_submitter")

	// pgpass holds alice's password (the harness used it), yet only the one given counts.
	// (Failures come from addresses of their own, to stay within the sign-in limits.)
	guesser := fromAddr("127.0.1.1")
	for _, pw := range []string{"wrong", alice.password + "x", ""} {
		r := h.signIn(guesser, alice.role, pw)
		if r.code != http.StatusUnauthorized || r.cookie() != "" || !strings.Contains(r.body, `action="/login"`) {
			t.Errorf("sign in as %s with password %q: %d cookie %q, want 401 and the sign-in form again", alice.role, pw, r.code, r.cookie())
		}
	}
	if r := h.doWith(guesser, "GET", "/api/jobs", "", "Authorization", user{role: alice.role, password: "wrong"}.basic()); r.code != http.StatusUnauthorized {
		t.Errorf("Basic with a wrong password: %d %s", r.code, r.body)
	}
	// The superuser logs in without a password from this machine (trust): the server must
	// not take that for a checked password.
	claimer := fromAddr("127.0.1.2")
	if r := h.signIn(claimer, "postgres", "anything"); r.code != http.StatusUnauthorized || r.cookie() != "" {
		t.Errorf("sign in as the trusted superuser: %d cookie %q, want 401", r.code, r.cookie())
	}
	if r := h.doWith(claimer, "GET", "/api/meta", "", "Authorization", user{role: "postgres", password: "anything"}.basic()); r.code != http.StatusUnauthorized {
		t.Errorf("Basic as the trusted superuser: %d %s", r.code, r.body)
	}

	r := h.signIn(nil, alice.role, alice.password)
	if r.code != http.StatusSeeOther || r.header.Get("Location") != "/" {
		t.Fatalf("sign in: %d %s", r.code, r.body)
	}
	setCookie := r.header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(setCookie, want) {
			t.Errorf("session cookie %q lacks %s", setCookie, want)
		}
	}
	cookie := r.cookie()
	if !regexp.MustCompile(`^deckhand_session=[A-Za-z0-9_-]{43}$`).MatchString(cookie) {
		t.Errorf("session cookie %q: want a 256-bit random id", cookie)
	}
	if strings.Contains(setCookie, alice.password) || strings.Contains(setCookie, alice.role) {
		t.Errorf("session cookie %q holds the password or the role", setCookie)
	}
	asAlice := []string{"Authorization", "", "Cookie", cookie}
	if got := h.metaUser(asAlice...); got != alice.role {
		t.Errorf("GET /api/meta as alice: user %q", got)
	}
	if id := h.postJob(asAlice...); h.submittedBy(id) != alice.role {
		t.Errorf("job %d submitted through alice's session: submitted_by %q, want %q", id, h.submittedBy(id), alice.role)
	}
	if r := h.do("GET", "/", "", asAlice...); r.code != http.StatusOK || !strings.Contains(r.body, `id="logout"`) {
		t.Errorf("GET / signed in: %d", r.code)
	}

	// Without credentials: the sign-in page for a browser, a Basic challenge for programs.
	anon := []string{"Authorization", ""}
	if r := h.do("GET", "/", "", append(anon, "Accept", "text/html")...); r.code != http.StatusUnauthorized ||
		!strings.Contains(r.body, `name="role"`) || !strings.Contains(r.body, `name="password"`) {
		t.Errorf("GET / without a session: %d %s", r.code, r.body)
	}
	for _, path := range []string{"/api/jobs", "/api/summary", "/api/nodes", "/api/workers", "/api/events", "/api/meta"} {
		r := h.do("GET", path, "", anon...)
		if r.code != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic") || strings.Count(r.body, "\n") != 1 {
			t.Errorf("GET %s without credentials: %d %q %q, want 401 with a Basic challenge and a one-line error", path, r.code, r.header.Get("WWW-Authenticate"), r.body)
		}
	}
	if r := h.do("GET", "/api/jobs", "", "Authorization", "", "Cookie", "deckhand_session=forged"); r.code != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != "" {
		t.Errorf("forged cookie: %d %v, want 401 without a challenge (the dashboard reloads into the sign-in page)", r.code, r.header)
	}
	if r := h.do("GET", "/api/jobs", "", "Authorization", "Bearer some-token"); r.code != http.StatusUnauthorized {
		t.Errorf("bearer token on the API: %d, want 401", r.code)
	}
	// Open to anyone: health, and the assets that style the sign-in page.
	if r := h.do("GET", "/healthz", "", anon...); r.code != http.StatusServiceUnavailable {
		t.Errorf("GET /healthz without credentials: %d, want 503 (no worker leads)", r.code)
	}
	if r := h.do("GET", "/assets/app.css", "", anon...); r.code != http.StatusOK {
		t.Errorf("GET /assets/app.css: %d", r.code)
	}

	// A page on another site can neither act through a signed-in browser nor sign it in.
	cross := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}
	if r := h.do("POST", "/api/jobs/1/cancel", "", append(asAlice, cross...)...); r.code != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", r.code)
	}
	if r := h.do("POST", "/login", "role=x&password=y", append(cross, "Content-Type", "application/x-www-form-urlencoded")...); r.code != http.StatusForbidden {
		t.Errorf("cross-site sign-in: %d, want 403", r.code)
	}
	// The form as a browser posts it: Sec-Fetch-Site decides, whatever Origin says.
	form := url.Values{"role": {alice.role}, "password": {alice.password}}.Encode()
	if r := h.do("POST", "/login", form, "Content-Type", "application/x-www-form-urlencoded",
		"Sec-Fetch-Site", "same-origin", "Origin", "null"); r.code != http.StatusSeeOther {
		t.Errorf("same-origin sign-in form: %d %s, want 303", r.code, r.body)
	}
}

func TestSessionsKeepTheirCallersApart(t *testing.T) {
	h := newHarness(t)
	alice := h.catalogUser("alice", "deckhand_submitter")
	bob := h.catalogUser("bob", "deckhand_submitter")
	carol := h.catalogUser("carol", "deckhand_submitter")
	callers := []struct {
		role   string
		header []string
	}{
		{alice.role, []string{"Authorization", "", "Cookie", h.session(alice)}},
		{bob.role, []string{"Authorization", "", "Cookie", h.session(bob)}},
		{carol.role, []string{"Authorization", carol.basic()}},
	}
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for _, c := range callers {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					r := h.do("POST", "/api/jobs", `{"tasks": [{"name": "a", "kind": "noop"}]}`, c.header...)
					var created struct{ ID int64 }
					if r.code != http.StatusCreated {
						errs <- fmt.Sprintf("%s: POST /api/jobs: %d %s", c.role, r.code, r.body)
						return
					}
					r.json(t, &created)
					if got := h.submittedBy(created.ID); got != c.role {
						errs <- fmt.Sprintf("job %d submitted as %s has submitted_by %s", created.ID, c.role, got)
					}
					if got := h.metaUser(c.header...); got != c.role {
						errs <- fmt.Sprintf("GET /api/meta as %s says %s", c.role, got)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestBasicAuthForPrograms(t *testing.T) {
	h := newHarness(t)
	alice := h.catalogUser("alice", "deckhand_submitter")
	asAlice := []string{"Authorization", alice.basic()}
	id := h.postJob(asAlice...)
	if got := h.submittedBy(id); got != alice.role {
		t.Errorf("job %d submitted with alice's Basic credentials: submitted_by %q", id, got)
	}
	for range 5 {
		if r := h.do("GET", fmt.Sprintf("/api/jobs/%d", id), "", asAlice...); r.code != http.StatusOK {
			t.Fatalf("GET /api/jobs/%d: %d %s", id, r.code, r.body)
		}
	}
	// Checked once, then served from the cache: one client for alice's six requests.
	if m := h.get("/metrics").body; !strings.Contains(m, `deckhand_api_sessions{kind="basic"} 1`) {
		t.Errorf("/metrics should count 1 cached Basic caller:\n%s", grepLines(m, "deckhand_api_"))
	}
	// The cache is keyed by the password too: a wrong one is not let in on alice's entry.
	if r := h.do("GET", "/api/jobs", "", "Authorization", user{role: alice.role, password: "nope"}.basic()); r.code != http.StatusUnauthorized {
		t.Errorf("Basic with a wrong password after a right one: %d", r.code)
	}
	if r := h.do("GET", "/api/jobs", "", "Authorization", "Basic not-base64"); r.code != http.StatusUnauthorized || strings.Count(r.body, "\n") != 1 {
		t.Errorf("malformed Basic credentials: %d %q", r.code, r.body)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestSignOutEndsTheSessionAndClosesItsPool(t *testing.T) {
	h := newHarness(t)
	alice := h.catalogUser("alice", "deckhand_submitter")
	cookie := h.session(alice)
	asAlice := []string{"Authorization", "", "Cookie", cookie}
	if r := h.do("GET", "/api/jobs", "", asAlice...); r.code != http.StatusOK {
		t.Fatalf("GET /api/jobs: %d %s", r.code, r.body)
	}
	if n := h.backends(alice.role); n < 1 {
		t.Fatalf("alice's session holds %d catalog connections, want at least 1", n)
	}
	r := h.do("POST", "/logout", "", asAlice...)
	if r.code != http.StatusSeeOther || !strings.Contains(r.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("POST /logout: %d %v", r.code, r.header)
	}
	if r := h.do("GET", "/api/jobs", "", asAlice...); r.code != http.StatusUnauthorized {
		t.Errorf("the cookie still works after signing out: %d", r.code)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return h.backends(alice.role) == 0 }, "alice's catalog connections close")
}

func TestIdleSessionsExpire(t *testing.T) {
	clk := newClock()
	h := newHarness(t, withClock(clk))
	alice := h.catalogUser("alice", "deckhand_submitter")
	asAlice := []string{"Authorization", "", "Cookie", h.session(alice)}
	clk.advance(11 * time.Hour)
	if r := h.do("GET", "/api/jobs", "", asAlice...); r.code != http.StatusOK {
		t.Fatalf("after 11h idle: %d, want 200 (default idle limit 12h)", r.code)
	}
	clk.advance(11 * time.Hour) // 22h after signing in, 11h after last use
	if r := h.do("GET", "/api/jobs", "", asAlice...); r.code != http.StatusOK {
		t.Fatalf("11h after the last use: %d, want 200", r.code)
	}
	clk.advance(12 * time.Hour)
	if r := h.do("GET", "/api/jobs", "", asAlice...); r.code != http.StatusUnauthorized || !strings.Contains(r.body, "session has ended") {
		t.Fatalf("12h idle: %d %s, want 401", r.code, r.body)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return h.backends(alice.role) == 0 }, "the expired session's connections close")
}

func TestSignInFloodingIsLimited(t *testing.T) {
	h := newHarness(t)
	alice := h.catalogUser("alice", "deckhand_submitter")
	bob := h.catalogUser("bob", "deckhand_submitter")
	attacker := fromAddr("127.0.0.1")
	for i := range 5 {
		if r := h.signIn(attacker, alice.role, fmt.Sprintf("guess-%d", i)); r.code != http.StatusUnauthorized {
			t.Fatalf("failed sign-in %d: %d, want 401", i+1, r.code)
		}
	}
	r := h.signIn(attacker, alice.role, "guess-6")
	if r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || r.header.Get("Retry-After") == "0" {
		t.Fatalf("6th failed sign-in within a minute: %d Retry-After %q, want 429 with a wait", r.code, r.header.Get("Retry-After"))
	}
	// The flooding address waits, even with the right password: it cannot be told apart
	// before checking it.
	if r := h.signIn(attacker, alice.role, alice.password); r.code != http.StatusTooManyRequests {
		t.Errorf("right password from the flooding address: %d, want 429", r.code)
	}
	// Alice, elsewhere, signs in.
	if r := h.signIn(fromAddr("127.0.0.2"), alice.role, alice.password); r.code != http.StatusSeeOther || r.cookie() == "" {
		t.Errorf("right password from another address: %d %s", r.code, r.body)
	}
	// Successful sign-ins use up nothing.
	for range 8 {
		if r := h.signIn(fromAddr("127.0.0.3"), bob.role, bob.password); r.code != http.StatusSeeOther {
			t.Fatalf("repeated successful sign-in: %d", r.code)
		}
	}
	// Wrong Basic credentials count the same way, and are told in JSON.
	prober := fromAddr("127.0.0.4")
	var last response
	for range 6 {
		last = h.doWith(prober, "GET", "/api/jobs", "", "Authorization", user{role: bob.role, password: "nope"}.basic())
	}
	if last.code != http.StatusTooManyRequests || last.header.Get("Retry-After") == "" || !strings.Contains(last.body, "too many failed sign-ins") {
		t.Errorf("6th wrong Basic credentials: %d %v %s, want 429", last.code, last.header, last.body)
	}
}

func TestEventStreamsAreCapped(t *testing.T) {
	h := newHarness(t)
	if err := h.Client.SetSetting(ctx, "api_max_event_streams", "2"); err != nil {
		t.Fatal(err)
	}
	first := h.events()
	h.events()
	s, code := h.openEvents()
	if code != http.StatusServiceUnavailable {
		s.close()
		t.Fatalf("third event stream with api_max_event_streams = 2: %d, want 503", code)
	}
	r := h.get("/api/events")
	if r.code != http.StatusServiceUnavailable || strings.Count(r.body, "\n") != 1 || !strings.Contains(r.body, "api_max_event_streams") {
		t.Errorf("over the cap: %d %q, want 503 with a one-line error naming the setting", r.code, r.body)
	}
	// A closed stream frees its slot.
	first.close()
	testenv.Eventually(t, 10*time.Second, func() bool {
		s, code := h.openEvents()
		if code == http.StatusOK {
			s.close()
		}
		return code == http.StatusOK
	}, "a stream opens once another closed")
}

// One role cannot take every event stream of a server from everyone else's dashboards: its
// eleventh stream is refused (429), and another role still gets one.
func TestEventStreamsAreCappedPerRole(t *testing.T) {
	h := newHarness(t)
	bob := h.catalogUser("bob", "deckhand_submitter")
	asBob := []string{"Authorization", bob.basic()}
	for range 10 {
		h.events(asBob...)
	}
	if s, code := h.openEvents(asBob...); code != http.StatusTooManyRequests {
		if s != nil {
			s.close()
		}
		t.Fatalf("bob's eleventh event stream: %d, want 429", code)
	}
	h.events()
}

// A stream tells its reader only that something changed, never which job: the catalog
// decides who may see a job, and the hint is the same for everyone.
func TestEventsNameNoJob(t *testing.T) {
	h := newHarness(t)
	alice := h.catalogUser("alice", "deckhand_submitter")
	bob := h.catalogUser("bob", "deckhand_submitter")
	s := h.events("Authorization", bob.basic())
	s.waitFor(t, 10*time.Second, "hello", func(ev sseEvent) bool { return ev.name == "hello" })
	h.worker()
	id := h.postJob("Authorization", alice.basic())
	h.Wait(id, 20*time.Second)
	ev := s.waitFor(t, 10*time.Second, "a change", func(ev sseEvent) bool { return ev.name == "change" })
	if ev.data != "{}" {
		t.Errorf("change event data %q, want {}", ev.data)
	}
}

// A request the catalog refuses to the caller's role answers 403 with the catalog's reason, in
// one line: a submitter acting on someone else's job, a role that is no deckhand user at all.
// Whoever may act on the job (a member of every owner, an admin) may, through the API too.
func TestCatalogRefusalsAre403(t *testing.T) {
	h := newHarness(t)
	bob := h.catalogUser("bob", "deckhand_submitter")
	outsider := h.Role("outsider")
	asOutsider := []string{"Authorization", user{role: outsider, password: mustPassword(t, outsider)}.basic()}
	asBob := []string{"Authorization", bob.basic()}
	running := h.submit(noopJob("not bob's", 1)) // no worker runs: it stays scheduled

	if r := h.do("GET", "/api/jobs", "", asBob...); r.code != http.StatusOK || strings.Contains(r.body, `"id"`) {
		t.Fatalf("GET /api/jobs as bob: %d %s, want 200 and none of the admin's jobs", r.code, r.body)
	}
	// Who may act is checked before the job's state: retry is refused as cancel is.
	for _, action := range []string{"cancel", "retry"} {
		r := h.do("POST", fmt.Sprintf("/api/jobs/%d/%s", running, action), "", asBob...)
		if r.code != http.StatusForbidden || strings.Count(r.body, "\n") != 1 || !strings.Contains(r.body, "may not "+action) {
			t.Errorf("%s of the admin's job as bob: %d %q, want 403 with the catalog's one-line reason", action, r.code, r.body)
		}
	}
	for _, req := range [][2]string{{"GET", "/api/jobs"}, {"POST", "/api/jobs"}} {
		r := h.do(req[0], req[1], `{"tasks": [{"name": "a", "kind": "noop"}]}`, asOutsider...)
		if r.code != http.StatusForbidden || !strings.Contains(r.body, "deckhand_submitter") {
			t.Errorf("%s %s as a role with no deckhand role: %d %s, want 403 naming deckhand_submitter", req[0], req[1], r.code, r.body)
		}
	}

	// Bob's own job he may cancel; the admin may cancel anyone's.
	own := h.postJob("Authorization", bob.basic())
	if r := h.do("POST", fmt.Sprintf("/api/jobs/%d/cancel", own), "", asBob...); r.code != http.StatusOK && r.code != http.StatusConflict {
		t.Errorf("bob cancelling his own job: %d %s", r.code, r.body)
	}
	if r := h.do("POST", fmt.Sprintf("/api/jobs/%d/cancel", running), "", "Authorization", h.user.basic()); r.code != http.StatusOK {
		t.Errorf("the admin cancelling the job: %d %s", r.code, r.body)
	}
}

func TestMetricsToken(t *testing.T) {
	h := newHarness(t, withMetricsToken("scrape-token-0123456789"))
	if r := h.get("/metrics"); r.code != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("/metrics with a catalog role's credentials: %d, want 401 (the token only)", r.code)
	}
	if r := h.do("GET", "/metrics", "", "Authorization", "Bearer wrong"); r.code != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong token: %d", r.code)
	}
	if r := h.do("GET", "/metrics", "", "Authorization", "Bearer scrape-token-0123456789"); r.code != http.StatusOK || !strings.Contains(r.body, "deckhand_catalog_up 1") {
		t.Errorf("/metrics with the token: %d", r.code)
	}
	if r := h.do("GET", "/api/jobs", "", "Authorization", "Bearer scrape-token-0123456789"); r.code != http.StatusUnauthorized {
		t.Errorf("the metrics token on the API: %d, want 401", r.code)
	}
}

func TestMetricsWithoutTokenAnswerOnlyThisMachine(t *testing.T) {
	h := newHarness(t)
	if r := h.do("GET", "/metrics", "", "Authorization", ""); r.code != http.StatusOK {
		t.Errorf("/metrics from loopback: %d", r.code)
	}
	// DNS rebinding: a name of the attacker's that resolves to 127.0.0.1.
	if r := h.do("GET", "/metrics", "", "Authorization", "", "Host", "rebind.evil.example:8080"); r.code != http.StatusForbidden {
		t.Errorf("/metrics with Host rebind.evil.example: %d, want 403", r.code)
	}
	req := httptest.NewRequest("GET", "http://127.0.0.1:8080/metrics", nil)
	req.RemoteAddr = "192.0.2.10:40000"
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "--http-token") {
		t.Errorf("/metrics from another machine without a token: %d %s", rec.Code, rec.Body)
	}
}

func TestSessionEndsWhenTheCatalogNoLongerLetsTheRoleIn(t *testing.T) {
	h := newHarness(t)
	alice := h.catalogUser("alice", "deckhand_submitter")
	asAlice := []string{"Authorization", "", "Cookie", h.session(alice)}
	if r := h.do("GET", "/api/jobs", "", asAlice...); r.code != http.StatusOK {
		t.Fatalf("GET /api/jobs: %d %s", r.code, r.body)
	}
	// An operator changes alice's password and cuts her connections.
	h.Exec("postgres", "ALTER ROLE "+pgx.Identifier{alice.role}.Sanitize()+" PASSWORD 'changed-by-the-operator'")
	h.Exec("postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", alice.role)
	// The request that finds the cut connection may fail; the next one reconnects and is refused.
	testenv.Eventually(t, 10*time.Second, func() bool {
		r := h.do("GET", "/api/jobs", "", asAlice...)
		return r.code == http.StatusUnauthorized && strings.Contains(r.body, "session has ended")
	}, "the session ends once the catalog refuses alice's password")
	if r := h.do("GET", "/api/meta", "", asAlice...); r.code != http.StatusUnauthorized {
		t.Errorf("the ended session still answers: %d", r.code)
	}
}

// A node that refuses the submission's check (its registered user cannot log in there) is a
// problem of the node: the caller's session, which the catalog still lets in, goes on.
func TestNodeThatRefusesTheCheckKeepsTheSession(t *testing.T) {
	h := newHarness(t)
	db := pgtest.NewDatabase(t)
	if err := h.Client.AddNode(ctx, deckhandtype.Node{Name: "locked", DSN: h.Cluster.DSN(db, "no_such_role_on_the_node"), MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	alice := h.catalogUser("alice", "deckhand_submitter")
	for _, as := range [][]string{
		{"Authorization", "", "Cookie", h.session(alice)},
		{"Authorization", alice.basic()},
	} {
		r := h.do("POST", "/api/jobs", `{"tasks": [{"name": "a", "node": "locked", "sql": "SELECT 1"}]}`, as...)
		var e struct{ Error string }
		r.json(t, &e)
		if r.code != http.StatusBadGateway || !strings.Contains(e.Error, "node locked") || strings.Contains(e.Error, "session has ended") {
			t.Errorf("submitting to a node that refuses the check: %d %q, want 502 naming the node", r.code, e.Error)
		}
		if r := h.do("GET", "/api/jobs", "", as...); r.code != http.StatusOK {
			t.Errorf("after the node refused the check, the caller's session: %d %s, want 200", r.code, r.body)
		}
	}
}
