package accesslog

// PendingIDs is how many noted request ids wait for Record.
func PendingIDs(a *Logger) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ids)
}
