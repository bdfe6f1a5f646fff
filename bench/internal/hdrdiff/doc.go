// Package hdrdiff holds only tests: they check baton's own HDR histogram (internal/hdr:
// Histogram, SummaryOf) against hdrhistogram-go, value for value. The check lives in the
// bench module because hdrhistogram-go's go.mod requires gonum, which must stay out of the
// module graph of programs that import baton's loop (the root module does not require
// hdrhistogram-go). It is the one package of a nested module that imports a baton internal
// package (Go allows it: bench's import path is under the root's), because the internal
// histogram is what it validates; internal/layout's TestNestedModulesUsePublicPackages
// exempts it by name.
package hdrdiff
