// Package integration holds tests that drive baton from outside Go: the live dashboard in
// headless Chromium through chromedp. It is a test-only module of its own
// (integration/go.mod) so that chromedp never enters the root module's graph. The tests
// skip with a message where Chromium is not installed (Debian: apt-get install chromium).
package integration
