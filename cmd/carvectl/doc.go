// Command carvectl is carve's operator CLI: it validates profile files,
// shows what the agent would do to a node's GPUs, and when each profile is in
// force. See docs/reference.md and docs/profiles.md.
package main
