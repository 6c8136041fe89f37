// Command carvectl is carve's operator CLI: it validates profile files,
// shows what the agent would do to a node's GPUs and when each profile is in
// force, shows the nodes' state, once or live as it changes (status -w),
// imports NVIDIA's mig-parted and device-plugin configurations, removes
// carve's node labels after an uninstall (prune), and frees a stuck
// rollout slot (rollout release). See docs/reference.md,
// docs/profiles.md and docs/import.md.
package main
