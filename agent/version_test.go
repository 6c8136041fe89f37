package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	carvev1 "github.com/carve-dev/carve/api/v1"
	"github.com/carve-dev/carve/internal/buildinfo"
)

// The record names the agent's version. An upgraded agent (a new
// Reconciler, as after a restart) rewrites the record once, one
// generation up, without touching a GPU; a change it makes in the same
// pass records the new version before its first disruptive step.
func TestReconcileRecordsAgentVersion(t *testing.T) {
	h := newHarness(t, "h100-80gb*1")
	f := h.parse(testProfiles)
	h.r.AgentVersion = "v1.0.0"
	first := h.reconcile(f, nil, "balanced").Annotation
	if first.AgentVersion != "v1.0.0" {
		t.Fatalf("record's agent version %q, want v1.0.0", first.AgentVersion)
	}
	if again := h.reconcile(f, nil, "balanced").Annotation; again.Generation != first.Generation {
		t.Errorf("generation %d after an unchanged pass, want %d", again.Generation, first.Generation)
	}

	h.m.ResetOpLog()
	h.r = h.newReconciler()
	h.r.AgentVersion = "v1.1.0"
	upgraded := h.reconcile(f, nil, "balanced").Annotation
	if upgraded.AgentVersion != "v1.1.0" || upgraded.Generation != first.Generation+1 {
		t.Errorf("after the upgrade: version %q generation %d, want v1.1.0 and %d", upgraded.AgentVersion, upgraded.Generation, first.Generation+1)
	}
	if ops := h.mutations(); len(ops) != 0 {
		t.Errorf("the upgrade touched the GPUs: %v", ops)
	}
	if again := h.reconcile(f, nil, "balanced").Annotation; again.Generation != upgraded.Generation {
		t.Errorf("generation %d after an unchanged pass of the upgraded agent, want %d", again.Generation, upgraded.Generation)
	}

	h.r = h.newReconciler()
	h.r.AgentVersion = "v1.2.0"
	h.changes = nil
	changed := h.reconcile(f, nil, "small").Annotation
	if len(h.changes) != 1 || h.changes[0].AgentVersion != "v1.2.0" {
		t.Fatalf("records of the change in progress %+v, want one by v1.2.0", h.changes)
	}
	if changed.AgentVersion != "v1.2.0" || changed.Profile != "small" {
		t.Errorf("final record: version %q profile %q, want v1.2.0 and small", changed.AgentVersion, changed.Profile)
	}
}

// A running agent logs its version at start, records it on its node and
// exports it as carve_agent_build_info.
func TestAgentVersionLoggedRecordedExported(t *testing.T) {
	cfg, client := newAgentConfig(t, "full")
	cfg.Advertise, cfg.PodResourcesSocket = AdvertiseNone, PodResourcesNone
	cfg.Version = buildinfo.Info{Version: "v1.2.3", Revision: "0123abc", GoVersion: "go1.26.8"}
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	reg := NewRegistry()
	cfg.Registerer = reg
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal(errors.New("Run did not return 30 s after its context ended"))
		}
	}
	n := waitNode(t, client, "a record", func(n *corev1.Node) bool { return n.Annotations[carvev1.AnnotationRecord] != "" })
	stop()

	rec, err := carvev1.DecodeNodeRecord(n.Annotations[carvev1.AnnotationRecord])
	if err != nil || rec.AgentVersion != "v1.2.3" {
		t.Errorf("record's agent version %q (%v), want v1.2.3", rec.AgentVersion, err)
	}
	want := map[string]float64{`carve_agent_build_info{go_version="go1.26.8",revision="0123abc",version="v1.2.3"}`: 1}
	if diff := cmp.Diff(want, scrape(t, reg, "carve_agent_build_info")); diff != "" {
		t.Errorf("build info (-want +got):\n%s", diff)
	}
	started := startLine(t, logs.String())
	for k, v := range map[string]string{"version": "v1.2.3", "revision": "0123abc", "go": "go1.26.8"} {
		if started[k] != v {
			t.Errorf("start-up log line's %s = %v, want %s (line %v)", k, started[k], v, started)
		}
	}
}

// startLine finds the "carve-agent started" line among JSON log lines.
func startLine(t *testing.T, logs string) map[string]any {
	t.Helper()
	for line := range strings.Lines(logs) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "carve-agent started" {
			return m
		}
	}
	t.Fatalf("no start-up line in the log:\n%s", logs)
	return nil
}
