//go:build !carve_testhooks

package main

import (
	"log/slog"
	"time"

	"github.com/carve-dev/carve/partition"
)

// afterOpHook returns no hook: this binary was built without the
// carve_testhooks build tag, so it has no fault injection and reads no
// variable for it (see testhooks.go).
func afterOpHook(func(string) string, *slog.Logger, func(int)) (func(int, int, partition.Op) error, error) {
	return nil, nil
}

// simOpJournal starts no journal: this binary was built without the
// carve_testhooks build tag (see testhooks.go).
func simOpJournal(func(string) string, partition.NVML) (func() error, error) {
	return nil, nil
}

// rolloutTiming reads nothing: this binary was built without the
// carve_testhooks build tag, so its rollout keeps the default timing (see
// testhooks.go).
func rolloutTiming(func(string) string) (slot, retry time.Duration, err error) {
	return 0, 0, nil
}
