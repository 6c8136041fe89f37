package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	carvev1 "github.com/carve-dev/carve/api/v1"
)

// writeDynamic writes, under the node table, the dynamic GPUs of the rows'
// records with the MIG devices made there for claims, and the GPUs that
// still hold devices made for claims though no longer dynamic:
//
//	Dynamic GPUs (MIG devices made for claims):
//	  gpu-a  GPU 1  1g.10gb,3g.40gb  1g.10gb@3:1 default/dyn-small, 3g.40gb@4:4 default/dyn-big
//
// Nothing when no record has any.
func writeDynamic(w io.Writer, rows []nodeStatus) error {
	var lines [][3]string
	for _, r := range rows {
		if r.Record == nil {
			continue
		}
		for _, g := range r.Record.GPUs {
			if line, ok := dynamicLine(g); ok {
				lines = append(lines, [3]string{r.Node, fmt.Sprintf("GPU %d", g.Index), line})
			}
		}
	}
	if len(lines) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nDynamic GPUs (MIG devices made for claims):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, l := range lines {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", l[0], l[1], l[2])
	}
	return tw.Flush()
}

// dynamicLine describes a dynamic GPU, or one that holds devices made for
// claims: its profiles, "changing" while it is not offered, and its
// devices with their claims ("none" when it has none); ok is false for
// any other GPU.
func dynamicLine(g carvev1.GPURecord) (string, bool) {
	var made []string
	for _, in := range g.Instances {
		if in.Claim == nil {
			continue
		}
		s := fmt.Sprintf("%s@%d:%d %s", in.Profile, in.Placement.Start, in.Placement.Size, in.Claim)
		if in.Claim.State != carvev1.InstanceMade {
			s += " (" + in.Claim.State + ")"
		}
		made = append(made, s)
	}
	var head string
	switch d := g.Dynamic; {
	case d == nil && len(made) == 0:
		return "", false
	case d == nil:
		head = "changing to static"
	case d.Offered:
		head = strings.Join(d.Profiles, ",")
	default:
		head = strings.Join(d.Profiles, ",") + " (not offered yet)"
	}
	if len(made) == 0 {
		return head + "\tnone", true
	}
	return head + "\t" + strings.Join(made, ", "), true
}
