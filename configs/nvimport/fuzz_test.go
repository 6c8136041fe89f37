package nvimport

import (
	"errors"
	"os"
	"testing"
)

// FuzzMigParted: any input either is refused with an *Error or gives a
// profile file that parses and validates.
func FuzzMigParted(f *testing.F) {
	if data, err := os.ReadFile(nvidiaDefault); err == nil {
		f.Add(data, []byte(timeSlicing))
	}
	f.Add([]byte(sharedMigParted), []byte(timeSlicing))
	f.Add([]byte("version: v1\nmig-configs:\n  \"\": [{devices: [1, 0], mig-enabled: true, mig-devices: {1c.1g.10gb: 7}}]\n"), []byte("version: v1\n"))
	f.Add([]byte("version: v1\nmig-configs:\n  p: [{devices: all, mig-enabled: false}, {device-filter: [\"0x233010DE:0x1\", x], devices: [0], mig-enabled: true, mig-devices: {}}]\n"),
		[]byte("kind: ConfigMap\ndata: {a: \"sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}\"}\n"))
	f.Fuzz(func(t *testing.T, migParted, dp []byte) {
		res, err := MigParted(File{Name: "mp.yaml", Data: migParted}, Options{DevicePlugin: []File{{Name: "dp.yaml", Data: dp}}})
		if err != nil {
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		checkValid(t, res.YAML)
	})
}
