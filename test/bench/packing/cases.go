package packing

// Cases returns the cases `make bench` measures; short is the mode `make
// test` runs, with fewer and shorter sequences.
func Cases(short bool) []Case {
	h100 := []Share{{"1g.10gb", 4}, {"2g.20gb", 2}, {"3g.40gb", 2}, {"4g.40gb", 1}, {"7g.80gb", 1}}
	h100Ends := []Share{{"1g.10gb", 6}, {"4g.40gb", 2}, {"7g.80gb", 1}}
	a100 := []Share{{"1g.5gb", 4}, {"2g.10gb", 2}, {"3g.20gb", 2}, {"4g.20gb", 1}, {"7g.40gb", 1}}
	a30 := []Share{{"1g.6gb", 4}, {"2g.12gb", 2}, {"4g.24gb", 1}}
	seeds := func(n int) []uint64 {
		s := make([]uint64, n)
		for i := range s {
			s[i] = uint64(i + 1)
		}
		return s
	}
	n1, n2, n8, many, few := 100, 200, 400, seeds(20), seeds(20)
	if short {
		n1, n2, n8, many, few = 30, 40, 40, seeds(3), seeds(1)
	}
	const life, budget = 4, 2_000_000
	return []Case{
		{Model: "H100-80GB", GPUs: 1, MixName: "mixed", Mix: h100, Claims: n1, Seeds: many, MaxLife: life, Best: true, BestBudget: budget},
		{Model: "H100-80GB", GPUs: 1, MixName: "small and large", Mix: h100Ends, Claims: n1, Seeds: many, MaxLife: life, Best: true, BestBudget: budget},
		{Model: "A100-40GB", GPUs: 1, MixName: "mixed", Mix: a100, Claims: n1, Seeds: many, MaxLife: life, Best: true, BestBudget: budget},
		{Model: "A30-24GB", GPUs: 1, MixName: "mixed", Mix: a30, Claims: n1, Seeds: many, MaxLife: life, Best: true, BestBudget: budget},
		{Model: "H100-80GB", GPUs: 2, MixName: "mixed", Mix: h100, Claims: n2, Seeds: few, MaxLife: life},
		{Model: "H100-80GB", GPUs: 8, MixName: "mixed", Mix: h100, Claims: n8, Seeds: few, MaxLife: life},
	}
}
