// Package ociimage assembles carve's agent image with go-containerregistry,
// without a container engine or registry: one image per platform (a base
// layer and a layer of binaries), an OCI image index over them, written as an
// OCI image layout and archived as one tar that `ctr images import`,
// `podman load` and (unpacked) `crane push` take.
package ociimage

import (
	"compress/gzip"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The agent image's fixed configuration.
const (
	// Entrypoint is where the image has carve-agent.
	Entrypoint = "/usr/local/bin/carve-agent"
	// MetricsPort is carve-agent's metrics and health port.
	MetricsPort = "9465/tcp"
	// Path is the image's PATH.
	Path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// Source is the repository the image is built from.
	Source = "https://github.com/carve-dev/carve"
	// Title and Description are the image's OCI title and description.
	Title       = "carve-agent"
	Description = "carve's node agent, which partitions NVIDIA GPUs into MIG instances and time-sliced replicas, with carvectl and carve-probe"
)

// Meta is what the image says about its release.
type Meta struct {
	Version, Revision string
	// Created is SOURCE_DATE_EPOCH; also every binary's modification time.
	Created time.Time
}

// Annotations are the OCI annotations (and image labels) of m, per
// https://github.com/opencontainers/image-spec/blob/main/annotations.md.
func (m Meta) Annotations() map[string]string {
	return map[string]string{
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.created":     m.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.title":       Title,
		"org.opencontainers.image.description": Description,
	}
}

// Layer is one layer of the image: an uncompressed tar and what made it.
type Layer struct {
	// Tar is the path of the uncompressed tar.
	Tar string
	// CreatedBy is the layer's history entry.
	CreatedBy string
}

// Image assembles the agent image of one platform from its layers, bottom
// first, as an OCI manifest with meta's annotations.
func Image(platform v1.Platform, layers []Layer, meta Meta) (v1.Image, error) {
	created := v1.Time{Time: meta.Created.UTC()}
	cfg := &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Variant:      platform.Variant,
		Created:      created,
		Config: v1.Config{
			Entrypoint: []string{Entrypoint},
			// Root, on purpose: creating and destroying MIG instances and
			// changing MIG mode need CAP_SYS_ADMIN and the /dev/nvidia-caps
			// MIG config capability, and the device-plugin and pod-resources
			// sockets under /var/lib/kubelet are root's. The DaemonSet runs
			// it privileged; see docs/agent.md.
			User:         "0:0",
			Env:          []string{Path},
			ExposedPorts: map[string]struct{}{MetricsPort: {}},
			Labels:       meta.Annotations(),
		},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", platform, err)
	}
	for _, l := range layers {
		layer, err := tarball.LayerFromFile(l.Tar, tarball.WithMediaType(types.OCILayer),
			tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("image %s: layer %s: %w", platform, l.Tar, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: created, CreatedBy: l.CreatedBy},
		})
		if err != nil {
			return nil, fmt.Errorf("image %s: layer %s: %w", platform, l.Tar, err)
		}
	}
	out, ok := mutate.Annotations(img, meta.Annotations()).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("image %s: annotated manifest is not an image", platform)
	}
	return out, nil
}

// PlatformImage is an image and the platform it is for.
type PlatformImage struct {
	Platform v1.Platform
	Image    v1.Image
}

// Index is the OCI image index over images, with meta's annotations.
func Index(images []PlatformImage, meta Meta) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range images {
		p := pi.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        pi.Image,
			Descriptor: v1.Descriptor{Platform: &p, MediaType: types.OCIManifestSchema1},
		})
	}
	out, ok := mutate.Annotations(idx, meta.Annotations()).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotated index is not an index")
	}
	return out, nil
}

// Platform is the OCI platform of a linux architecture (arm64 is v8, as
// registries and containerd write it).
func Platform(goos, goarch string) v1.Platform {
	p := v1.Platform{OS: goos, Architecture: goarch}
	if goarch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// Size is what one platform's image weighs.
type Size struct {
	// Compressed is the manifest, config and compressed layers, as pulled.
	Compressed int64
	// Uncompressed is the layers unpacked (tar bytes).
	Uncompressed int64
}

// ImageSize measures img.
func ImageSize(img v1.Image) (Size, error) {
	var s Size
	m, err := img.RawManifest()
	if err != nil {
		return s, fmt.Errorf("image size: %w", err)
	}
	c, err := img.RawConfigFile()
	if err != nil {
		return s, fmt.Errorf("image size: %w", err)
	}
	s.Compressed = int64(len(m) + len(c))
	layers, err := img.Layers()
	if err != nil {
		return s, fmt.Errorf("image size: %w", err)
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return s, fmt.Errorf("image size: %w", err)
		}
		s.Compressed += n
		u, err := uncompressedSize(l)
		if err != nil {
			return s, err
		}
		s.Uncompressed += u
	}
	return s, nil
}

func uncompressedSize(l v1.Layer) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, fmt.Errorf("image size: %w", err)
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err != nil {
		return 0, fmt.Errorf("image size: %w", err)
	}
	return n, nil
}
