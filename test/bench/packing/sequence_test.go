package packing

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGenerate: a seed gives one sequence; every claim leaves after it
// arrives and within its lifetime; events come in step order, departures
// of a step before its arrivals; bad input is refused.
func TestGenerate(t *testing.T) {
	mix := []Share{{"1g.10gb", 3}, {"7g.80gb", 1}}
	a, err := generate(5, mix, 200, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := generate(5, mix, 200, 2, 4)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same seed, other sequence (-first +second):\n%s", diff)
	}
	c, _ := generate(6, mix, 200, 2, 4)
	if cmp.Equal(a, c) {
		t.Error("seeds 5 and 6 gave the same sequence")
	}
	profiles := map[string]int{}
	for i, cl := range a.Claims {
		if life := cl.Depart - cl.Arrive; life < 1 || life > 4 {
			t.Errorf("claim %d stays %d steps", i, life)
		}
		profiles[cl.Profile]++
	}
	if len(a.Claims) != 200 || profiles["1g.10gb"] < 2*profiles["7g.80gb"] {
		t.Errorf("%d claims, by profile %v", len(a.Claims), profiles)
	}
	step := func(e Event) int {
		if e.Arrive {
			return a.Claims[e.Claim].Arrive
		}
		return a.Claims[e.Claim].Depart
	}
	for i := 1; i < len(a.Events); i++ {
		p, e := a.Events[i-1], a.Events[i]
		if step(p) > step(e) || step(p) == step(e) && p.Arrive && !e.Arrive {
			t.Errorf("event %d (%+v, step %d) after %+v (step %d)", i, e, step(e), p, step(p))
		}
	}
	if len(a.Events) != 400 {
		t.Errorf("%d events, want 400", len(a.Events))
	}
	if _, err := generate(1, []Share{{"1g.10gb", 0}}, 10, 1, 4); err == nil {
		t.Error("a zero weight was accepted")
	}
	if _, err := generate(1, mix, 0, 1, 4); err == nil {
		t.Error("no claims was accepted")
	}
}
