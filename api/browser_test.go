package api_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

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

// signIn fills in the dashboard's sign-in form as u; everything after runs on the session.
func (b *browser) signIn(h *harness, u user) {
	b.t.Helper()
	b.do("open the dashboard", chromedp.Navigate(h.http.URL+"/"))
	b.waitJS("the sign-in form shows", `document.querySelector('form[action="/login"] #role') !== null`, 10*time.Second)
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#role"), u.role), chromedp.SendKeys(chromedp.CSS("#password"), u.password),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)), chromedp.WaitReady(chromedp.CSS("#main")))
	b.waitJS("the dashboard shows who signed in", fmt.Sprintf(`document.querySelector('#user') !== null && document.querySelector('#user').textContent === %q`, u.role), 15*time.Second)
}

// The dashboard, driven like a person would: sign in as a catalog role, watch a job finish
// live, open a running job and cancel it with its button, sign out.
func TestBrowserWatchesAndCancelsJobs(t *testing.T) {
	b := newBrowser(t, 1440, 900)
	h := newHarness(t)
	h.AddNode("n1", 4)
	h.worker()

	b.signIn(h, h.user)
	b.waitJS("the live stream connects", `document.querySelector('#live.on') !== null`, 15*time.Second)
	b.waitJS("the jobs page renders", `document.querySelector('table.jobs tbody tr') !== null`, 10*time.Second)

	quick := h.submit(sqlJob("finishes while watched", "n1", "SELECT pg_sleep(0.3)", "SELECT 1"))
	b.waitJS("the new job shows up", fmt.Sprintf(`document.querySelector('tr[data-job="%d"]') !== null`, quick), 10*time.Second)
	b.waitJS("the job is shown finished", fmt.Sprintf(`document.querySelector('tr[data-job="%d"][data-state="finished"]') !== null`, quick), 20*time.Second)
	b.waitJS("the finished count includes it", `[...document.querySelectorAll('.count[data-state="finished"] .n')].some(e => e.textContent === '1')`, 10*time.Second)

	slow := h.submit(sqlJob("runs until cancelled", "n1", "SELECT pg_sleep(60)", "SELECT 1"))
	b.do("open the running job", chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", h.http.URL, slow)))
	b.waitJS("the job is shown running", `document.querySelector('#job-state[data-state="running"]') !== null`, 20*time.Second)
	b.waitJS("the graph shows the running task", `document.querySelector('svg.dag g.node[data-state="running"]') !== null`, 10*time.Second)
	b.waitJS("the timeline shows the running attempt", `document.querySelector('svg.gantt rect[data-outcome="running"]') !== null`, 10*time.Second)

	b.do("click Cancel", chromedp.Click(chromedp.CSS(`button[data-action="cancel"]`)))
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
