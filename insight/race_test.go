//go:build race

package insight

// raceOn scales down the tests that make millions of decisions: the race
// detector makes each several times slower.
const raceOn = true
