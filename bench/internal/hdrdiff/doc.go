// Package hdrdiff holds only tests: they check accounting.Histogram, baton's own HDR
// histogram, against hdrhistogram-go, value for value. The check lives in the bench module
// because hdrhistogram-go's go.mod requires gonum, which must stay out of the module graph
// of programs that import baton's loop (the root module does not require hdrhistogram-go).
package hdrdiff
