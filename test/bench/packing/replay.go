package packing

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/carve-dev/carve/test/dra/alloc"
)

// sliceSet is one node's ResourceSlices.
type sliceSet = []resourceapi.ResourceSlice

// replay drives the sequence through the scheduler's allocator against
// the slices: each arrival asks for one device of its profile with the
// devices of the claims present as allocated; a claim that gets none is
// not found and leaves (it is not retried); a departure frees its device.
// It returns which claims found a device.
func replay(ctx context.Context, seq Sequence, ss sliceSet) ([]bool, error) {
	s := alloc.New(nodeName, ss, alloc.MIGClass())
	found := make([]bool, len(seq.Claims))
	held := map[int]string{}
	for _, e := range seq.Events {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := seq.Claims[e.Claim]
		if !e.Arrive {
			if d, ok := held[e.Claim]; ok {
				if err := s.Free(d); err != nil {
					return nil, err
				}
				delete(held, e.Claim)
			}
			continue
		}
		d, err := s.Allocate(ctx, c.Profile)
		if err != nil {
			return nil, fmt.Errorf("claim %d (%s, step %d): %w", e.Claim, c.Profile, c.Arrive, err)
		}
		if d != "" {
			held[e.Claim] = d
			found[e.Claim] = true
		}
	}
	return found, nil
}

// implementation names the allocator the scheduler's allocator library
// picks for its default features, over the slices.
func implementation(ctx context.Context, ss sliceSet) (string, error) {
	return alloc.New(nodeName, ss, alloc.MIGClass()).Implementation(ctx)
}

// features names the allocator features on by default, as the feature
// gates that turn them on are named.
func features() string {
	return strings.Join(sets.List(alloc.DefaultFeatures().Set()), ", ")
}
