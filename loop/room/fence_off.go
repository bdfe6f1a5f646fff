//go:build baton_nofencing

package room

// fencing is off in this build (tag baton_nofencing): rooms tick without checking their
// ownership, so a paused node's rooms tick beside their new owners'. For the test that
// shows the no-twins test catches it; never for a real server.
const fencing = false
