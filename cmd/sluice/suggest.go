package main

import (
	"bufio"
	"slices"
	"strings"
)

// nearest returns the name of names nearest to s by edit distance, if any
// is near enough to be what was meant: at most a third of its length
// away, and at least one edit for a short name; or one of which s is a
// prefix.
func nearest(s string, names []string) (string, bool) {
	best, bestD := "", -1
	for _, n := range names {
		d := editDistance(s, n)
		if bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD >= 0 && bestD <= max(1, len(best)/3) {
		return best, true
	}
	for _, n := range names {
		if len(s) >= 3 && strings.HasPrefix(n, s) {
			return n, true
		}
	}
	return "", false
}

// editDistance returns the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// commands returns the names of the commands usage lists: the word after
// "sluice" on each of its lines that begin with it, help aside.
func commands() []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(usage))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "sluice" || f[1] == "help" || strings.HasPrefix(f[1], "-") || slices.Contains(out, f[1]) {
			continue
		}
		out = append(out, f[1])
	}
	return out
}
