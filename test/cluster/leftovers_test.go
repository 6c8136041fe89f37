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

func TestLeftoversString(t *testing.T) {
	for _, tc := range []struct {
		l    leftovers
		want string
	}{
		{leftovers{}, ""},
		{leftovers{offered: map[string]int64{"nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 2}}, "nvidia.com/gpu=2, nvidia.com/mig-1g.10gb=7"},
	} {
		if got := tc.l.String(); got != tc.want {
			t.Errorf("%v: String() = %q, want %q", tc.l.offered, got, tc.want)
		}
	}
}
