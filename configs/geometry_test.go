package configs

import "github.com/carve-dev/carve/partition"

// catalogue is the geometry carvectl validates against without --gpus:
// partition's built-in models.
func catalogue() Geometry { return partition.NewGeometry(partition.Catalogue()) }
