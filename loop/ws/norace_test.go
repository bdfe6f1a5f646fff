//go:build !race

package ws

// wsRaceEnabled: memory figures mean nothing under the race detector.
const wsRaceEnabled = false
