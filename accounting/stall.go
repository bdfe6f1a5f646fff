package accounting

import "time"

// StallStats are the stall detector's figures (docs/accounting.md, stalls). Plain data.
type StallStats struct {
	Threshold  time.Duration // the watchdog's threshold
	Count      uint64        // stalls that ended
	Logged     uint64        // stalls logged
	Suppressed uint64        // stalls not logged because of the rate limit
	Starved    uint64        // ended stalls whose cause, over all of it, was "starved" (the machine did not run the loop)
	Durations  Summary       // length of each ended stall (exact when the loop reported its end)

	InProgress     bool          // a stall is going on now
	CurrentTask    uint64        // its task id
	CurrentElapsed time.Duration // its slice's time so far, at the last poll
}
