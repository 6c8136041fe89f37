//go:build carve_testhooks

package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/carve-dev/carve/partition"
)

// ExitAfterOpsEnv names a fault-injection hook for crash tests: when set
// to k, the agent exits with ExitAfterOpsCode right after the k-th NVML op
// of its life is done and checkpointed, as if it had been killed there.
//
// The hook exists only in a binary built with the carve_testhooks build
// tag:
//
//	go build -tags carve_testhooks ./cmd/carve-agent
//
// as test/harness builds it for the crash test (test/e2e/crash_test.go). A
// binary built without the tag (make build, the image) neither reads the
// variable nor contains this code; see testhooks_off.go.
const ExitAfterOpsEnv = "CARVE_FAULT_EXIT_AFTER_OPS"

// ExitAfterOpsCode is the exit status of a stop caused by ExitAfterOpsEnv.
const ExitAfterOpsCode = 86

// SimOpJournalEnv names a test hook for crash tests: when set to a path
// and the GPUs are simulated, every NVML call that changes them is appended
// to that file, one line each (sim.Machine.SetOpJournal), so that a test
// can read what several runs of the agent did to the GPUs between them.
const SimOpJournalEnv = "CARVE_TEST_SIM_OP_JOURNAL"

// simOpJournal starts the journal SimOpJournalEnv asks for on lib, and
// returns the function that closes it (nil when none is asked for).
func simOpJournal(getenv func(string) string, lib partition.NVML) (func() error, error) {
	path := getenv(SimOpJournalEnv)
	if path == "" {
		return nil, nil
	}
	m, ok := lib.(interface{ SetOpJournal(w io.Writer) })
	if !ok {
		return nil, fmt.Errorf("%s=%s: the GPUs are not simulated (--gpus sim:...)", SimOpJournalEnv, path)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SimOpJournalEnv, err)
	}
	m.SetOpJournal(f)
	return func() error {
		m.SetOpJournal(nil)
		return f.Close()
	}, nil
}

// afterOpHook returns the AfterOp hook the test hooks in the environment
// ask for (ExitAfterOpsEnv), or nil when none is set.
func afterOpHook(getenv func(string) string, log *slog.Logger, exit func(int)) (func(int, int, partition.Op) error, error) {
	return exitAfterOps(getenv(ExitAfterOpsEnv), log, exit)
}

// exitAfterOps returns the AfterOp hook ExitAfterOpsEnv=v asks for, or nil
// for an empty v.
func exitAfterOps(v string, log *slog.Logger, exit func(int)) (func(int, int, partition.Op) error, error) {
	if v == "" {
		return nil, nil
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 {
		return nil, fmt.Errorf("%s=%q: want a count of ops >= 1", ExitAfterOpsEnv, v)
	}
	n := 0
	return func(gpu, _ int, op partition.Op) error {
		n++
		if n == k {
			log.Warn("fault injection: exiting after an op", "env", ExitAfterOpsEnv, "ops", n, "gpu", gpu, "op", op.String())
			exit(ExitAfterOpsCode)
		}
		return nil
	}, nil
}

// RolloutTimingEnv names a test hook for rollout tests: when set to
// "slot=<duration>,retry=<duration>" (either part may be left out), the
// agent's rollout slots last that long without renewal and a change
// waiting for a slot asks again that often, instead of the defaults
// (agent.DefaultSlotDuration, agent.DefaultSlotRetry), so that a fleet
// test can see slots expire within seconds.
const RolloutTimingEnv = "CARVE_TEST_ROLLOUT"

// rolloutTiming returns the slot duration and retry RolloutTimingEnv asks
// for (zero for a part not given: the default).
func rolloutTiming(getenv func(string) string) (slot, retry time.Duration, err error) {
	v := getenv(RolloutTimingEnv)
	if v == "" {
		return 0, 0, nil
	}
	for part := range strings.SplitSeq(v, ",") {
		key, val, _ := strings.Cut(part, "=")
		d, perr := time.ParseDuration(val)
		if perr != nil || d <= 0 {
			return 0, 0, fmt.Errorf("%s=%q: %q: want slot=<duration>,retry=<duration>", RolloutTimingEnv, v, part)
		}
		switch key {
		case "slot":
			slot = d
		case "retry":
			retry = d
		default:
			return 0, 0, fmt.Errorf("%s=%q: unknown part %q: want slot=<duration>,retry=<duration>", RolloutTimingEnv, v, key)
		}
	}
	return slot, retry, nil
}
