package harness

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDecodeObjects: documents become objects in order, empty documents are
// left out, and a broken one is named by its position.
func TestDecodeObjects(t *testing.T) {
	objs, err := DecodeObjects([]byte("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n# nothing\n---\napiVersion: v1\nkind: Service\nmetadata: {name: b}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if diff := cmp.Diff([]string{"ConfigMap/a", "Service/b"}, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if FindObject(objs, "Service", "b") != objs[1] || FindObject(objs, "Service", "a") != nil {
		t.Error("FindObject does not find by kind and name")
	}
	if _, err := DecodeObjects([]byte("kind: A\n---\nkind: [\n")); err == nil || !strings.Contains(err.Error(), "object 2") {
		t.Errorf("DecodeObjects of a broken second document = %v, want an error naming object 2", err)
	}
}
