//go:build race

package loop_test

// wsRaceEnabled: memory figures mean nothing under the race detector.
const wsRaceEnabled = true
