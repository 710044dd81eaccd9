package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// browser is a headless Chromium tab.
type browser struct {
	ctx context.Context
	t   *testing.T

	mu     sync.Mutex
	errors []string // uncaught exceptions and console errors of the page
}

// chromium finds Debian's Chromium (the chromium package; scripts/test installs it).
func chromium() (string, error) {
	if p := os.Getenv("DECKHAND_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no chromium executable in /usr/bin or on PATH")
}

// newBrowser starts Chromium, or skips the test when it is not installed.
func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	path, err := chromium()
	if err != nil {
		t.Skipf("skipping the browser test: %v (install Debian's chromium package; scripts/test does when it runs as root)", err)
	}
	// This machine has no network beyond loopback: the background-networking flags keep
	// Chromium from trying (and failing, many times over) to reach Google's services.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun, chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height),
		// Chromium leaves a directory for its singleton socket in TMPDIR; one of the test's own
		// is removed with the test.
		chromedp.Env("TMPDIR=" + t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	b := &browser{ctx: bctx, t: t}
	if err := chromedp.Listen(bctx, b.onEvent); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	return b
}

func (b *browser) onEvent(ev any) {
	var msg string
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		for _, a := range e.Args {
			msg += " " + string(a.Value) + a.Description
		}
	case *log.EventEntryAdded:
		// What the browser itself reports: a module that failed to load (404, or not served
		// as JavaScript), a script the content security policy blocked.
		if e.Entry.Level != log.EntryLevelError {
			return
		}
		// The sign-in page is answered 401 on purpose.
		if e.Entry.Source == log.EntrySourceNetwork && strings.Contains(e.Entry.Text, "status of 401") {
			return
		}
		msg = e.Entry.Text + " " + e.Entry.URL
	default:
		return
	}
	b.mu.Lock()
	b.errors = append(b.errors, strings.TrimSpace(msg))
	b.mu.Unlock()
}

// checkErrors fails the test if the page threw or logged an error.
func (b *browser) checkErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		b.t.Errorf("the dashboard reported an error: %s", e)
	}
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitJS waits until the JavaScript expression is truthy.
func (b *browser) waitJS(what, expr string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		var html string
		html, _ = chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
		b.t.Fatalf("waiting until %s: %v\npage text:\n%s", what, err, html)
	}
}

// eval is the value of the JavaScript expression, once its promise resolves.
func (b *browser) eval(what, expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// clickNow clicks the element that matches selector at this instant, in the page itself: the
// job page re-renders as its live data changes (running statements' progress, every second),
// and a click dispatched to a node found a moment earlier may land on one just replaced.
func (b *browser) clickNow(what, selector string) {
	b.t.Helper()
	if got := b.eval(what, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return 'missing'; e.click(); return 'clicked' })()`, selector)); got != "clicked" {
		b.t.Fatalf("%s: %s is %s", what, selector, got)
	}
}

// signIn fills in the dashboard's sign-in form at base as u; everything after runs on the
// session. It returns once every module has loaded and the first page is up.
func (b *browser) signIn(base string, u user) {
	b.t.Helper()
	b.do("open the dashboard", chromedp.Navigate(base+"/"))
	b.waitJS("the sign-in form shows", `document.querySelector('form[action="/login"] #role') !== null`, 10*time.Second)
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#role"), u.role), chromedp.SendKeys(chromedp.CSS("#password"), u.password),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)), chromedp.WaitReady(chromedp.CSS("#main")))
	b.waitJS("the dashboard shows who signed in", fmt.Sprintf(`document.querySelector('#user') !== null && document.querySelector('#user').textContent === %q`, u.role), 15*time.Second)
	b.waitJS("the entry module has started", `'ready' in document.documentElement.dataset`, 10*time.Second)
}

// jobCounts is the expression for the states of the jobs page's count cards, in order.
const jobCounts = `[...document.querySelectorAll('.counts .count')].map(e => e.dataset.state).join(',')`

// The dashboard, driven like a person would: sign in as a catalog role, watch a job finish
// live, open a running job, pause and resume it, cancel it with its button, sign out.
func TestBrowserWatchesAndCancelsJobs(t *testing.T) {
	b := newBrowser(t, 1440, 900)
	h := newHarness(t)
	h.AddNode("n1", 4)
	h.worker()

	b.signIn(h.http.URL, h.user)
	b.waitJS("the live stream connects", `document.querySelector('#live.on') !== null`, 15*time.Second)
	b.waitJS("the jobs page renders", `document.querySelector('table.jobs tbody tr') !== null`, 10*time.Second)
	// The meta as the page's session reads it: a request with other credentials would keep
	// connections of the role open past the sign-out checked below.
	order := b.eval("read the meta", `fetch('/api/meta').then(r => r.json()).then(m => ['all', ...m.states.jobs.map(s => s.name)].join(','))`)
	b.waitJS("the counts follow the meta's order", fmt.Sprintf(`%s === %q`, jobCounts, order), 10*time.Second)

	quick := h.submit(sqlJob("finishes while watched", "n1", "SELECT pg_sleep(0.3)", "SELECT 1"))
	b.waitJS("the new job shows up", fmt.Sprintf(`document.querySelector('tr[data-job="%d"]') !== null`, quick), 10*time.Second)
	b.waitJS("the job is shown finished", fmt.Sprintf(`document.querySelector('tr[data-job="%d"][data-state="finished"]') !== null`, quick), 20*time.Second)
	b.waitJS("the finished count includes it", `[...document.querySelectorAll('.count[data-state="finished"] .n')].some(e => e.textContent === '1')`, 10*time.Second)

	slow := h.submit(sqlJob("runs until cancelled", "n1", "SELECT pg_sleep(60)", "SELECT 1"))
	b.do("open the running job", chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", h.http.URL, slow)))
	b.waitJS("the job is shown running", `document.querySelector('#job-state[data-state="running"]') !== null`, 20*time.Second)
	b.waitJS("the graph shows the running task", `document.querySelector('svg.dag g.node[data-state="running"]') !== null`, 10*time.Second)
	b.waitJS("the timeline shows the running attempt", `document.querySelector('svg.gantt rect[data-outcome="running"]') !== null`, 10*time.Second)

	b.clickNow("click Pause", `button[data-action="pause"]`)
	b.waitJS("the job is shown pausing, with Resume instead of Pause", `document.querySelector('#job-state[data-state="pausing"]') !== null &&
		document.querySelector('button[data-action="resume"]') !== null && !document.querySelector('button[data-action="pause"]')`, 20*time.Second)
	b.clickNow("click Resume", `button[data-action="resume"]`)
	b.waitJS("the job is shown running again", `document.querySelector('#job-state[data-state="running"]') !== null &&
		document.querySelector('button[data-action="pause"]') !== null`, 20*time.Second)

	b.clickNow("click Cancel", `button[data-action="cancel"]`)
	b.waitJS("the job is shown cancelled", `document.querySelector('#job-state[data-state="cancelled"]') !== null`, 20*time.Second)
	b.waitJS("the graph shows the cancelled task", `document.querySelector('svg.dag g.node[data-state="cancelled"]') !== null`, 10*time.Second)
	b.waitJS("a Retry button replaces Cancel", `document.querySelector('button[data-action="retry"]') !== null && !document.querySelector('button[data-action="cancel"]')`, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, func() bool {
		j, err := h.Client.JobRow(ctx, slow)
		return err == nil && j.State == deckhandtype.JobCancelled
	}, "the catalog has the job cancelled")

	b.do("open the nodes page", chromedp.Navigate(h.http.URL+"/#/nodes"))
	b.waitJS("the node is listed", `document.querySelector('tr[data-node="n1"]') !== null`, 10*time.Second)
	b.do("open the workers page", chromedp.Navigate(h.http.URL+"/#/workers"))
	b.waitJS("the leader is marked", `document.querySelector('tr[data-worker] .chip') !== null`, 10*time.Second)
	b.checkErrors()

	b.do("sign out", chromedp.Click(chromedp.CSS(`#logout`)), chromedp.WaitReady(chromedp.CSS("#role")))
	b.waitJS("the sign-in form shows again", `document.querySelector('form[action="/login"] #role') !== null`, 10*time.Second)
	// Every API connection of the role was the browser session's.
	testenv.Eventually(t, 10*time.Second, func() bool { return h.backends(h.user.role) == 0 }, "signing out closes the session's catalog connections")
}

// rewriteMeta serves next with GET /api/meta's answer passed through edit.
func rewriteMeta(t *testing.T, next http.Handler, edit func(*api.Meta)) *httptest.Server {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/meta" {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var m api.Meta
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &m) != nil {
			t.Errorf("GET /api/meta: %d %s", rec.Code, rec.Body)
			return
		}
		edit(&m)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m)
	}))
	// The browser is still open, its event stream with it: cut it, or Close waits for it.
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	return hs
}

// The dashboard lists the job and task states /api/meta gives, in its order, and offers the
// buttons it says: served a meta with the orders reversed, a state the catalog does not have,
// and Retry moved from failed to finished jobs, it follows.
func TestBrowserTakesStatesFromMeta(t *testing.T) {
	b := newBrowser(t, 1440, 900)
	h := newHarness(t)
	h.AddNode("n1", 4)
	h.worker()
	fails := h.submit(sqlJob("fails", "n1", "SELECT 1/0", "SELECT 1"))
	finishes := h.submit(sqlJob("finishes", "n1", "SELECT 1"))
	h.Wait(fails, 20*time.Second)
	h.Wait(finishes, 20*time.Second)

	var meta api.Meta
	h.mustGet("/api/meta", &meta)
	order := []string{"all", "on-hold"}
	for _, s := range slices.Backward(meta.States.Jobs) {
		order = append(order, string(s.Name))
	}
	hs := rewriteMeta(t, h.srv.Handler(), func(m *api.Meta) {
		slices.Reverse(m.States.Jobs)
		slices.Reverse(m.States.Tasks)
		for i, s := range m.States.Jobs {
			m.States.Jobs[i].Retry = s.Name == deckhandtype.JobFinished
		}
		m.States.Jobs = append([]api.JobState{{Name: "on-hold"}}, m.States.Jobs...)
	})
	b.signIn(hs.URL, h.user)
	b.waitJS("the jobs are listed", fmt.Sprintf(`document.querySelector('tr[data-job="%d"]') && document.querySelector('tr[data-job="%d"]')`, fails, finishes), 10*time.Second)
	b.waitJS("the counts follow the served order, with the served state", fmt.Sprintf(`%s === %q`, jobCounts, strings.Join(order, ",")), 10*time.Second)
	b.waitJS("the served state counts none", `document.querySelector('.count[data-state="on-hold"] .n').textContent === '0'`, time.Second)
	b.waitJS("Retry is offered where the meta says", fmt.Sprintf(`document.querySelector('tr[data-job="%d"] button[data-action="retry"]') !== null &&
		document.querySelector('tr[data-job="%d"] button[data-action="retry"]') === null`, finishes, fails), 10*time.Second)

	b.do("open the failed job", chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", hs.URL, fails)))
	b.waitJS("the task counts follow the served order", `[...document.querySelectorAll('.summary-bar .legend span')].map(e => e.textContent).join(',') === '1 unscheduled,1 failed'`, 10*time.Second)
	b.checkErrors()
}
