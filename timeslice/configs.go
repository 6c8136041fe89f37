package timeslice

import "github.com/carve-dev/carve/configs"

// SharingFrom turns a resolved profile into sharing settings by GPU index.
func SharingFrom(as []configs.Assignment) map[int]Sharing {
	out := make(map[int]Sharing, len(as))
	for _, a := range as {
		out[a.GPU] = Sharing{Replicas: a.Replicas, MIGReplicas: a.MIGReplicas, RenameShared: a.RenameShared,
			FailRequestsGreaterThanOne: a.FailRequestsGreaterThanOne}
	}
	return out
}
