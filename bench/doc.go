// Package bench measures Sluice side by side with the Go rate limiters its
// users would otherwise reach for, in one run on one machine:
// golang.org/x/time/rate (one limiter per key in a map, as users do),
// github.com/sethvargo/go-limiter's memorystore, and throttled's GCRA over its
// memstore. It is a module of its own so that Sluice's go.mod does not depend
// on them. Run it with `make bench`; see docs/benchmarks.md.
package bench
