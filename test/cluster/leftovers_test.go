package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestExtendedResource(t *testing.T) {
	for name, want := range map[corev1.ResourceName]bool{
		"nvidia.com/mig-1g.10gb":           true,
		"nvidia.com/gpu":                   true,
		"example.org/dev":                  true,
		corev1.ResourceCPU:                 false,
		corev1.ResourceEphemeralStorage:    false,
		"hugepages-2Mi":                    false,
		"kubernetes.io/batch-cpu":          false,
		"node.kubernetes.io/something":     false,
		"attachable-volumes-aws-ebs":       false,
		"requests.nvidia.com/gpu-not-node": true,
	} {
		if got := extended(name); got != want {
			t.Errorf("extended(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestLeftovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     leftovers
		stale bool
		text  string
	}{
		{"nothing", leftovers{}, false, ""},
		{"offered, nothing serving", leftovers{offered: map[string]int64{"nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 2}}, true, "nvidia.com/gpu=2, nvidia.com/mig-1g.10gb=7"},
		{"offered and served", leftovers{offered: map[string]int64{"nvidia.com/gpu": 8}, serving: []string{"/x/carve-gpu.sock"}}, false, "nvidia.com/gpu=8"},
	} {
		if got := tc.l.stale(); got != tc.stale {
			t.Errorf("%s: stale() = %v, want %v", tc.name, got, tc.stale)
		}
		if got := tc.l.String(); got != tc.text {
			t.Errorf("%s: String() = %q, want %q", tc.name, got, tc.text)
		}
	}
}
