package app

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds a Chromium for the browser test. In CI (CI set) a missing browser fails the
// test: .ci/run installs it, and a skipped browser test would hide a broken status page.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed and CI is set: the status page's browser test must run in CI (.ci/run installs it with apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed: install it to run the status page's browser test (Debian: apt-get install -y chromium)")
	return ""
}

// browse starts a headless Chromium with a fresh profile and nothing that reaches the network
// (the machine's network is closed: without these flags Chromium floods refused connections).
func browse(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(func(string, ...any) {}))
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser() // closes the browser
		cancelAlloc()   // waits for its process to exit
	})
	return ctx
}

// The status page, as an operator's browser renders it: collection counts, and a client's NACK
// with its message (escaped: a client's text is never markup).
func TestStatusPageInABrowserShowsCountsAndNACKs(t *testing.T) {
	ctx := browse(t)
	b := start(t, nil)
	p := dialProducer(t, b.grpcAddr, "p1")
	p.push(t, seColl, serviceEntry("ns/a", "a.example"), serviceEntry("ns/b", "b.example"))
	c := subscribe(t, b.grpcAddr, "browser-sink", seColl)
	c.ack(c.Recv())
	p.push(t, seColl, serviceEntry("ns/a", "a2.example"), serviceEntry("ns/b", "b.example"))
	const nack = "ns/a: <b>a2.example</b> is not a host this sink accepts"
	c.nack(c.Recv(), nack)
	waitUntil(t, func() bool {
		cs := b.Engine().Clients()
		return len(cs) == 1 && len(cs[0].Subscriptions) == 1 && cs[0].Subscriptions[0].LastNACK != nil
	})

	if err := chromedp.Do(ctx, chromedp.Navigate(b.httpURL+"/")); err != nil {
		t.Fatalf("browser: open the status page: %v", err)
	}
	title := run(t, ctx, chromedp.Title())
	count := run(t, ctx, chromedp.Text(chromedp.CSS(`tr[data-collection="`+seColl+`"] td.count`)))
	clients := run(t, ctx, chromedp.Text(chromedp.CSS("#clients")))
	markup := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#clients b").length`))
	// The config status table: the sink refused its latest ServiceEntries.
	sync := strings.Fields(run(t, ctx, chromedp.Text(chromedp.CSS(`#sync tr[data-node="browser-sink"]`))))
	if len(sync) != 7 || sync[0] != "browser-sink" || strings.Join(sync[1:6], " ") != "- - - - ERROR" {
		t.Errorf("config status row %q, want browser-sink with ISTIO ERROR", sync)
	}
	if title != "mcpbridge status" || strings.TrimSpace(count) != "2" {
		t.Errorf("title %q, serviceentries count %q; want 2 resources", title, count)
	}
	for _, want := range []string{"browser-sink", "mcp-resource-source", seColl, nack} {
		if !strings.Contains(clients, want) {
			t.Errorf("clients section does not show %q:\n%s", want, clients)
		}
	}
	if markup != 0 {
		t.Errorf("a client's NACK message was rendered as markup (%d <b> elements)", markup)
	}
}

// run runs one browser action and returns what it read.
func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	return v
}

func TestStatusPageRefreshesItself(t *testing.T) {
	b := start(t, nil)
	code, page := httpGet(t, b.httpURL+"/")
	if code != 200 || !strings.Contains(page, `<meta http-equiv="refresh" content="5">`) {
		t.Fatalf("GET / = %d without a 5s refresh:\n%s", code, page)
	}
	if _, page := httpGet(t, b.httpURL+"/?refresh=0"); strings.Contains(page, `http-equiv="refresh"`) {
		t.Fatal("?refresh=0 still refreshes")
	}
	if code, _ := httpGet(t, b.httpURL+"/?refresh=soon"); code != 400 {
		t.Fatalf("?refresh=soon = %d, want 400", code)
	}
	if code, _ := httpGet(t, b.httpURL+"/nothing-here"); code != 404 {
		t.Fatalf("GET /nothing-here = %d, want 404: the status page is only at /", code)
	}
}
