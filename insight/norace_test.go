//go:build !race

package insight

const raceOn = false
