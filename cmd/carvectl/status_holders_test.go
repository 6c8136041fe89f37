package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// TestStatusNamesWhoHoldsTheGPU: the last error of a node whose reset
// processes and pods refuse, as the agent records it, is shown whole, on
// the node's row and in the JSON: the PIDs, process names and pods.
func TestStatusNamesWhoHoldsTheGPU(t *testing.T) {
	const lastError = "profile balanced: a GPU must be reset to change its MIG mode but cannot be now (processes hold it, or the platform needs a reboot): " +
		"GPU 1: op 2/10 reset-gpu: GPU 1: reset (nvidia-smi --gpu-reset -i 00000000:19:00.0): in use: GPU 00000000:19:00.0: In use by another client; " +
		"held by pid 4242 (python3), pid 4300 (tritonserver) and 2 more; pods: team-a/infer-7, team-b/train-0"
	node := gpuNode("gpu-h", map[string]string{carvev1.LabelState: carvev1.StateRebootRequired, carvev1.LabelApplied: "full", carvev1.LabelSource: "label"},
		annotation(t, carvev1.NodeRecord{Profile: "full", State: carvev1.StateRebootRequired, Generation: 4, AgentVersion: "v1.3.0",
			Selected: &carvev1.SelectedProfile{Profile: "balanced", Source: "label"}, LastError: lastError}),
		map[string]int64{"nvidia.com/gpu": 8})
	q := statusQuery{namespace: "carve-system", configMap: "carve-profiles", now: time.Now()}

	var out strings.Builder
	if err := status(context.Background(), fake.NewClientset(node), "", q, &out); err != nil {
		t.Fatal(err)
	}
	var row string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if strings.HasPrefix(l, "gpu-h ") {
			row = l
		}
	}
	if !strings.HasSuffix(row, "  "+lastError) {
		t.Errorf("row\n %q\nwant it to end with the whole last error\n %q", row, lastError)
	}

	out.Reset()
	q.output = "json"
	if err := status(context.Background(), fake.NewClientset(node), "", q, &out); err != nil {
		t.Fatal(err)
	}
	var rows []nodeStatus
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil {
		t.Fatalf("decode: %v\n%s", err, out.String())
	}
	if len(rows) != 1 || rows[0].LastError != lastError {
		t.Errorf("JSON rows %+v, want one with lastError %q", rows, lastError)
	}
}
