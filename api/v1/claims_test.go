package v1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPreparedClaims: the record round-trips; an unknown field, data after
// the object and another format version are refused.
func TestPreparedClaims(t *testing.T) {
	rec := PreparedClaims{Claims: map[string]PreparedClaim{"uid": {Namespace: "ns", Name: "c", CDISpec: "/run/cdi/x.json",
		Devices: []PreparedDevice{{Request: "gpu", Device: "gpu-0", UUID: "GPU-a", CDIDevices: []string{"gpu.carve.dev/claim=uid"}}}}}}
	data, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePreparedClaims(data)
	if err != nil {
		t.Fatal(err)
	}
	rec.Version = PreparedClaimsVersion
	if diff := cmp.Diff(rec, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ data, want string }{
		{`{"version":1,"claims":{},"extra":1}`, `decode prepared claims: json: unknown field "extra"`},
		{`{"version":1,"claims":{}} {}`, "decode prepared claims: data after the JSON object"},
		{`{"version":2,"claims":{}}`, "decode prepared claims: format version 2, want 1"},
	} {
		_, err := DecodePreparedClaims([]byte(tt.data))
		if err == nil || err.Error() != tt.want {
			t.Errorf("DecodePreparedClaims(%s) = %v, want %q", tt.data, err, tt.want)
		}
	}
}
