package timeslice

import (
	"reflect"
	"testing"
)

func TestSharingEqual(t *testing.T) {
	base := Sharing{Replicas: 2, MIGReplicas: map[string]int{"1g.10gb": 4}, RenameShared: true, FailRequestsGreaterThanOne: true}
	if same := base; !base.Equal(same) {
		t.Fatal("a setting differs from a copy of itself")
	}
	if !(Sharing{MIGReplicas: map[string]int{}}).Equal(Sharing{}) {
		t.Error("an empty MIGReplicas differs from a nil one")
	}
	other := base
	other.MIGReplicas = map[string]int{"1g.10gb": 3}
	if base.Equal(other) {
		t.Error("different MIGReplicas compare equal")
	}
	// Every field counts, those added later too: changing any one of them
	// makes the settings differ.
	v := reflect.ValueOf(&Sharing{}).Elem()
	for i := range v.NumField() {
		var changed Sharing
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.Int:
			f.SetInt(3)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]int{"x": 1}))
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", v.Type().Field(i).Name, f.Kind())
		}
		if changed.Equal(Sharing{}) {
			t.Errorf("a change of %s is not seen by Equal", v.Type().Field(i).Name)
		}
	}
}
