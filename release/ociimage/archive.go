package ociimage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/carve-dev/carve/release/tarball"
)

// Annotation keys of index.json's entry, which name the image on import.
const (
	// RefName is the tag (OCI image layout convention; podman load).
	RefName = "org.opencontainers.image.ref.name"
	// ContainerdName is the full reference (ctr images import).
	ContainerdName = "io.containerd.image.name"
)

// WriteArchive writes idx as an OCI image layout whose index.json names it
// repository:tag, archived as the tar out (reproducible: entries sorted,
// owned by root, modified at epoch).
func WriteArchive(ctx context.Context, idx v1.ImageIndex, repository, tag, out string, epoch int64) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".oci-layout-")
	if err != nil {
		return fmt.Errorf("image layout: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image layout: %w", err)
	}
	anns := map[string]string{RefName: tag, ContainerdName: repository + ":" + tag}
	if err := p.AppendIndex(idx, layout.WithAnnotations(anns)); err != nil {
		return fmt.Errorf("image layout: %w", err)
	}
	if err := tarball.Create(ctx, out, dir, []string{"."}, epoch, false); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	return nil
}
