package planning

// scenario is one kind of planning problem, made at several node sizes.
type scenario struct {
	// name labels the rows.
	name string
	// model is the simulated GPU model (a sim list-form key).
	model string
	// target is what every GPU should become.
	target map[string]int
	// pattern holds the GPUs' layouts; GPU i has pattern[i%len(pattern)].
	pattern []layout
}

// layouts returns the layouts of a node of n GPUs.
func (s scenario) layouts(n int) []layout {
	out := make([]layout, n)
	for i := range out {
		out[i] = s.pattern[i%len(s.pattern)]
	}
	return out
}

// balanced is the target of the typical change.
func balanced() map[string]int {
	return map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
}

// ones returns complete 1g.10gb instances at the starts.
func ones(starts ...int) layout {
	l := make(layout, len(starts))
	for i, s := range starts {
		l[i] = instance{profile: "1g.10gb", start: s}
	}
	return l
}

// typical is the change of partition/'s BenchmarkPlanNode: eight
// H100-80GB GPUs, each with a different geometry, two devices in use, all
// planned to the balanced target. Larger nodes repeat the eight GPUs.
func typical() scenario {
	busy1g := ones(0, 1, 2, 3, 4, 5, 6)
	busy1g[2].busy = true
	busy3g := append(ones(0, 1, 2, 3), instance{profile: "3g.40gb", start: 4, busy: true})
	return scenario{
		name: "typical change", model: "h100-80gb", target: balanced(),
		pattern: []layout{
			busy1g,
			{{profile: "3g.40gb", start: 0}, {profile: "3g.40gb", start: 4}},
			{{profile: "4g.40gb", start: 0}, {profile: "3g.40gb", start: 4}},
			{{profile: "2g.20gb", start: 0}, {profile: "2g.20gb", start: 2}, {profile: "2g.20gb", start: 4}, {profile: "1g.10gb", start: 6}},
			busy3g,
			{{profile: "7g.80gb", start: 0}},
			{{profile: "1g.20gb", start: 0}, {profile: "1g.20gb", start: 2}, {profile: "1g.20gb", start: 4}, {profile: "1g.20gb", start: 6}},
			{{profile: "2g.20gb", start: 0}, {profile: "2g.20gb", start: 2}, {profile: "1g.10gb", start: 4}, {profile: "1g.10gb", start: 5}, {profile: "1g.10gb", start: 6}},
		},
	}
}

// worstFree is the H100-80GB input on which carve's planner works hardest
// with nothing in use: seven complete instances, all keepable, of which at
// most three can stay, and the kept sets that rank first (the most
// instances, the lowest placements) all leave no room for the 4g.40gb,
// which fits only at slice 0.
func worstFree() scenario {
	l := ones(0, 2, 3, 4, 5, 6)
	l = append(l, instance{profile: "1g.10gb+me", start: 1})
	return scenario{
		name: "worst case, nothing in use", model: "h100-80gb",
		target:  map[string]int{"1g.10gb": 2, "1g.10gb+me": 1, "4g.40gb": 1},
		pattern: []layout{l},
	}
}

// worstBusy is the H100-80GB input on which carve's planner works hardest
// of all: as worstFree, but three devices in use at slices 4-6 that no
// plan can keep together with the rest of the target, so the planner
// ranks every kept set with them first, finds that none leaves room, and
// then explains each blocker. The plan is blocked.
func worstBusy() scenario {
	l := ones(0, 1, 2, 3, 5, 6)
	l = append(l, instance{profile: "1g.10gb+me", start: 4, busy: true})
	l[4].busy, l[5].busy = true, true
	return scenario{
		name: "worst case, 3 devices in use (blocked)", model: "h100-80gb",
		target:  map[string]int{"1g.10gb": 3, "1g.10gb+me": 1, "3g.40gb": 1},
		pattern: []layout{l},
	}
}

// keepOrRepair is the H100-80GB input where keeping the one complete
// instance costs more operations than repairing three empty GPU
// instances: keeping the 1g.10gb at 4 forces the 3g.40gb to 0:4 and the
// empty ones out (9 ops); repairing them and moving the 1g makes 7.
func keepOrRepair() scenario {
	l := layout{{profile: "1g.10gb", start: 0, slices: -1}, {profile: "1g.10gb", start: 1, slices: -1},
		{profile: "1g.10gb", start: 2, slices: -1}, {profile: "1g.10gb", start: 4}}
	return scenario{
		name: "keep or repair", model: "h100-80gb",
		target:  map[string]int{"1g.10gb": 3, "3g.40gb": 1},
		pattern: []layout{l},
	}
}

// scenarios are the table's cases, in row order.
func scenarios() []scenario {
	return []scenario{typical(), worstFree(), worstBusy(), keepOrRepair()}
}
