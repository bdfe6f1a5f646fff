// Package integration holds tests that drive baton from outside Go: the live dashboard in
// headless Chromium through chromedp, and a rolling restart of baton processes behind nginx
// (TestNginxRollingRestart, the recipe of docs/deployment.md). It is a test-only module of
// its own (integration/go.mod) so that chromedp never enters the root module's graph. The
// tests skip with a message where Chromium or nginx is not installed (Debian: apt-get
// install chromium nginx-light; .ci/run installs both).
package integration
