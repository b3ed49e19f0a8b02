//go:build !race

package testenv

// RaceDetector says whether this binary was built with -race (race.go).
const RaceDetector = false
