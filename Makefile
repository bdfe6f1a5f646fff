# baton: the commands a new user needs are `make run` and `make test`.
GO          ?= go
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/staticcheck)
STATICCHECK_VERSION ?= v0.8.2
ADDR        ?= 127.0.0.1:8080
# bench/, promexport/, integration/, examples/gameserver/, directory/etcd/, otelbaton/ and
# examples/newcomer/ are modules of their own (each with a go.mod and a replace of the
# root), so that importers of loop do not get their dependencies (plotting, client_golang,
# chromedp, SQLite, the etcd client and gRPC, OpenTelemetry, chi); vet, staticcheck and
# race run in every module. directory/etcd's tests run etcd
# (Debian's etcd-server) and skip where it is missing.
MODULES     ?= bench promexport integration examples/gameserver directory/etcd otelbaton examples/newcomer

.PHONY: run run-hello run-game cluster test test-pkg test-note vet vet-cross staticcheck race tools bench bench-full bench-go fuzz fmt

## run: start the game server example (examples/gameserver, its own module) on $(ADDR),
## the dashboard, stats and health on $(ADMIN_ADDR), its database under $(GAME_DATA); it
## prints the URLs: play at http://$(ADDR)/, watch http://$(ADMIN_ADDR)/debug/baton/.
## The first build compiles SQLite (modernc.org/sqlite, pure Go and very large): about 8
## minutes on a cold machine with 2 cores, silent meanwhile; later runs start in seconds.
ADMIN_ADDR ?= 127.0.0.1:8081
GAME_DATA  ?= $(CURDIR)/data
run:
	@echo "make run: building examples/gameserver; the first build compiles SQLite (modernc.org/sqlite) and takes about 8 minutes on a cold 2-core machine, with no output meanwhile; later runs start in seconds. Then it serves on $(ADDR) (override: make run ADDR=HOST:PORT ADMIN_ADDR=HOST:PORT)."
	cd examples/gameserver && $(GO) run . -addr $(ADDR) -admin $(ADMIN_ADDR) -data $(GAME_DATA)

## cluster: the flagship as a cluster on one machine (docs/cluster.md): one etcd (Debian's
## etcd-server, or ETCD=/path) on 127.0.0.1:2479 and three game nodes on 127.0.0.1:8091,
## 8092, 8093 (admin pages on 8191-8193), data under data/cluster; open
## http://127.0.0.1:8091/?room=lobby, or the same room through another node. Ctrl-C stops all.
cluster:
	cd examples/gameserver && GO=$(GO) CLUSTER_DATA=$(GAME_DATA)/cluster ./cluster.sh

## run-game: the same as run
run-game: run

## run-hello: start the smallest example server (examples/hello) on $(ADDR)
run-hello:
	$(GO) run ./examples/hello -addr $(ADDR)

## test: gofmt check, vet (also for $(CROSS_GOOS)), staticcheck, race-enabled tests (fuzz
## seed corpora included), in the root module and in the nested modules ($(MODULES));
## integration/ drives headless Chromium, promexport/ runs promtool and a Prometheus server
## on its metrics, dashboard and alert rules (Debian's prometheus); each skips where its
## tool is missing. About 16 minutes on a cold machine with 2 cores (everything compiled
## twice, with and without -race: SQLite, chromedp, the etcd client), a few once the
## build cache is warm; for one package, make test-pkg.
test: test-note fmt vet vet-cross staticcheck race

test-note:
	@echo "make test: every module, vetted for 3 systems and tested with -race: about 16 minutes on a cold 2-core machine, a few once the build cache is warm. One package only: make test-pkg PKG=./loop/room [RUN=TestName]"

## test-pkg: vet and race-test one package (or PKG=./dir/... for a tree) in whichever
## module holds it, nested ones included: make test-pkg PKG=./loop/room, or
## PKG=./examples/gameserver/store; RUN=regexp runs only the matching tests
PKG ?=
RUN ?=
test-pkg:
	@test -n "$(PKG)" || { echo "usage: make test-pkg PKG=./loop/room [RUN=TestName] (a package directory, or ./dir/... for a tree)"; exit 2; }
	@pkg='$(PKG)'; case "$$pkg" in ./*) ;; /*) echo "PKG must be relative to the repository root"; exit 2;; *) pkg="./$$pkg";; esac; \
	dir="$${pkg%/...}"; dir="$${dir%/}"; test -d "$$dir" || { echo "make test-pkg: no directory $$dir"; exit 2; }; \
	mod="$$dir"; while [ ! -f "$$mod/go.mod" ] && [ "$$mod" != "." ]; do mod=$$(dirname "$$mod"); done; \
	rel=".$${pkg#$$mod}"; \
	echo "cd $$mod && $(GO) vet $$rel && $(GO) test -race -count=1 $(if $(RUN),-run '$(RUN)' )$$rel"; \
	cd "$$mod" && $(GO) vet "$$rel" && $(GO) test -race -count=1 $(if $(RUN),-run '$(RUN)' )"$$rel"

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

# vet-cross: production is Linux, but baton must keep building on the systems developers
# use and gnet supports (docs/deployment.md, "Platforms"): vet (which compiles the tests
# too) for each of CROSS_GOOS in every module. No tests run there.
CROSS_GOOS ?= darwin freebsd
vet-cross:
	for os in $(CROSS_GOOS); do \
		GOOS=$$os $(GO) vet ./... || exit 1; \
		for m in $(MODULES); do (cd $$m && GOOS=$$os $(GO) vet ./...) || exit 1; done; \
	done

staticcheck: tools
	$(STATICCHECK) ./...
	for m in $(MODULES); do (cd $$m && $(STATICCHECK) ./...) || exit 1; done

# integration/ runs without -race: it drives a browser, the server's races are the root
# module's tests' business, and instrumenting chromedp would cost CI a minute or more.
# examples/gameserver runs with -race, where its browser test (chromedp) is not built
# (TestBrowserPlays, TestBrowserJoinsCluster and TestBrowserMatchSurvivesRollingRestart skip
# or are not built, and say so); the last line runs them without -race.
race:
	$(GO) test -race -count=1 -timeout 10m ./...
	for m in $(filter-out integration,$(MODULES)); do (cd $$m && $(GO) test -race -count=1 -timeout 10m ./...) || exit 1; done
	$(if $(filter integration,$(MODULES)),cd integration && $(GO) test -count=1 -timeout 10m ./...)
	$(if $(filter examples/gameserver,$(MODULES)),cd examples/gameserver && $(GO) test -count=1 -timeout 10m -run '^TestBrowser(Plays|JoinsCluster|MatchSurvivesRollingRestart)$$' .)

## tools: install staticcheck if it is missing
tools:
	@test -x "$(STATICCHECK)" || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## bench: the short load suite of bench/ (all scenarios, short windows; under 5 minutes on
## 2 cores), server pinned to CPU $(BENCH_CPU_SERVER) and load generator to CPU $(BENCH_CPU_CLIENT);
## results under bench/results/<timestamp>/. Extra flags: BENCH_FLAGS='-scenario plaintext'
## (they run in bench/, so a relative -out is relative to bench/).
BENCH_CPU_SERVER ?= 0
BENCH_CPU_CLIENT ?= 1
BENCH_FLAGS      ?=
bench:
	cd bench && $(GO) run ./cmd/baton-bench -quick -cpu-server $(BENCH_CPU_SERVER) -cpu-client $(BENCH_CPU_CLIENT) $(BENCH_FLAGS)

## bench-full: the long load suite (30 s windows, 5,000 reconnecting workers; about 15 minutes)
bench-full:
	cd bench && $(GO) run ./cmd/baton-bench -cpu-server $(BENCH_CPU_SERVER) -cpu-client $(BENCH_CPU_CLIENT) $(BENCH_FLAGS)

## bench-go: the packages' Go benchmarks (codec, scheduler, accounting, offload, end to end;
## the bench module has none)
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1s ./...

## fuzz: run each fuzz target for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseHead$$' -fuzztime $(FUZZTIME) ./internal/httpcodec/
	$(GO) test -run '^$$' -fuzz '^FuzzChunked$$' -fuzztime $(FUZZTIME) ./internal/httpcodec/
	$(GO) test -run '^$$' -fuzz '^FuzzParseSeat$$' -fuzztime $(FUZZTIME) ./directory/
	$(GO) test -run '^$$' -fuzz '^FuzzSharedFile$$' -fuzztime $(FUZZTIME) ./directory/
	$(GO) test -run '^$$' -fuzz '^FuzzHandoffEnvelope$$' -fuzztime $(FUZZTIME) ./loop/room/
	$(GO) test -run '^$$' -fuzz '^FuzzHeadersAllowed$$' -fuzztime $(FUZZTIME) ./loop/cors/
	$(GO) test -run '^$$' -fuzz '^FuzzOrigin$$' -fuzztime $(FUZZTIME) ./loop/cors/
	$(GO) test -run '^$$' -fuzz '^FuzzValidID$$' -fuzztime $(FUZZTIME) ./loop/requestid/
	$(GO) test -run '^$$' -fuzz '^FuzzAcceptEncoding$$' -fuzztime $(FUZZTIME) ./loop/compress/
