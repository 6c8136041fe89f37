// Package agentimage builds carve's agent image archive end to end: the
// Debian base of each platform from the lock file (cached), the binaries
// (given, or built stamped and reproducible), the image and index assembled
// with go-containerregistry, written as an OCI layout archive. The release
// pipeline and the end-to-end tests build the image through it.
package agentimage

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/carve-dev/carve/release/debbase"
	"github.com/carve-dev/carve/release/gobuild"
	"github.com/carve-dev/carve/release/ociimage"
	"github.com/carve-dev/carve/release/tarball"
)

// Repository is where releases publish the image.
const Repository = "ghcr.io/carve-dev/carve-agent"

// LockFile is the base lock's path in the repository.
const LockFile = "release/base.lock.json"

// Options says which image to build. Only Version is required.
type Options struct {
	// Source is the repository root; "" is the working directory.
	Source string
	// Platforms are "linux/ARCH" entries; nil is linux/amd64.
	Platforms []string
	// Binaries maps a platform to a directory holding carve-agent,
	// carvectl and carve-probe built for it. Platforms it lacks are built
	// from Source into a temporary directory.
	Binaries map[string]string
	// Version is the image tag and the stamped version; Revision the
	// stamped commit.
	Version, Revision string
	// Created is SOURCE_DATE_EPOCH; zero is the Unix epoch.
	Created time.Time
	// Lock is the base lock file; "" is Source/release/base.lock.json.
	Lock string
	// CacheDir holds .debs and built bases; "" is DefaultCacheDir().
	CacheDir string
	// BaseDir, when set, holds the built bases instead of CacheDir (see
	// debbase.BaseOptions.BaseDir).
	BaseDir string
	// Out is the archive to write; "" is
	// Source/dist/carve-agent_VERSION.oci.tar.
	Out string
	// Repository is the image name without tag; "" is Repository.
	Repository string
	// Log gets progress lines; nil: discarded.
	Log io.Writer
}

// Result is a built image.
type Result struct {
	// Archive is the OCI layout archive and Ref the reference it names.
	Archive, Ref string
	// Digest is the image index's digest.
	Digest v1.Hash
	// Images are the per-platform images, in Options.Platforms order.
	Images []PlatformImage
	// Lock is the base lock the images were built from.
	Lock *debbase.Lock
}

// PlatformImage is one platform's image in a Result.
type PlatformImage struct {
	// Platform is "linux/ARCH".
	Platform string
	// Digest is the platform manifest's digest (the image itself is in the
	// archive: its layers were read from files Build removes).
	Digest v1.Hash
	Size   ociimage.Size
	// BinDir holds the binaries the image has (removed after Build when
	// Build made it itself).
	BinDir string
}

// BuildAgentImage builds the image archive and returns its path and the
// reference it carries (REPOSITORY:VERSION), for `ctr images import`.
func BuildAgentImage(ctx context.Context, o Options) (archivePath, ref string, err error) {
	r, err := Build(ctx, o)
	if err != nil {
		return "", "", err
	}
	return r.Archive, r.Ref, nil
}

// DefaultCacheDir is $CARVE_RELEASE_CACHE, else the user cache directory's
// carve-release (~/.cache/carve-release).
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("CARVE_RELEASE_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("release cache: %w (set CARVE_RELEASE_CACHE)", err)
	}
	return filepath.Join(d, "carve-release"), nil
}

// Build builds the image archive and reports what it built.
func Build(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	lock, lockData, err := debbase.ReadLock(o.Lock)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "carve-agent-image-")
	if err != nil {
		return nil, fmt.Errorf("agent image: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	meta := ociimage.Meta{Version: o.Version, Revision: o.Revision, Created: o.Created}
	var imgs []ociimage.PlatformImage
	r := &Result{Archive: o.Out, Ref: o.Repository + ":" + o.Version, Lock: lock}
	for _, plat := range o.Platforms {
		pi, img, err := o.platformImage(ctx, plat, work, lock, lockData, meta)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
		r.Images = append(r.Images, pi)
	}
	idx, err := ociimage.Index(imgs, meta)
	if err != nil {
		return nil, err
	}
	if r.Digest, err = idx.Digest(); err != nil {
		return nil, fmt.Errorf("agent image: index digest: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
		return nil, fmt.Errorf("agent image: %w", err)
	}
	fmt.Fprintf(o.Log, "image: writing %s (%s)\n", o.Out, r.Ref)
	if err := ociimage.WriteArchive(ctx, idx, o.Repository, o.Version, o.Out, o.Created.Unix()); err != nil {
		return nil, err
	}
	return r, nil
}

func (o *Options) defaults() error {
	if o.Version == "" {
		return fmt.Errorf("agent image: no version")
	}
	if o.Source == "" {
		o.Source = "."
	}
	if len(o.Platforms) == 0 {
		o.Platforms = []string{"linux/amd64"}
	}
	if o.Revision == "" {
		o.Revision = "unknown"
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0)
	}
	if o.Lock == "" {
		o.Lock = filepath.Join(o.Source, LockFile)
	}
	if o.CacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return err
		}
		o.CacheDir = d
	}
	if o.Out == "" {
		o.Out = filepath.Join(o.Source, "dist", "carve-agent_"+o.Version+".oci.tar")
	}
	if o.Repository == "" {
		o.Repository = Repository
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// platformImage builds (or takes) one platform's binaries and base and
// assembles its image.
func (o *Options) platformImage(ctx context.Context, plat, work string, lock *debbase.Lock, lockData []byte, meta ociimage.Meta) (PlatformImage, ociimage.PlatformImage, error) {
	goos, goarch, err := gobuild.Platform(plat)
	if err != nil {
		return PlatformImage{}, ociimage.PlatformImage{}, err
	}
	if goos != "linux" {
		return PlatformImage{}, ociimage.PlatformImage{}, fmt.Errorf("agent image: platform %s is not linux", plat)
	}
	dir := filepath.Join(work, goos+"_"+goarch)
	binDir, ok := o.Binaries[plat]
	if !ok {
		binDir = filepath.Join(dir, "bin")
		fmt.Fprintf(o.Log, "image %s: go build %s\n", plat, strings.Join(gobuild.ImagePrograms(), " "))
		if _, err := gobuild.Build(ctx, gobuild.Options{Source: o.Source, OS: goos, Arch: goarch,
			Version: o.Version, Revision: o.Revision, Programs: gobuild.ImagePrograms(), Out: binDir}); err != nil {
			return PlatformImage{}, ociimage.PlatformImage{}, err
		}
	}
	base, err := debbase.Base(ctx, debbase.BaseOptions{Lock: lock, LockData: lockData, Arch: goarch, CacheDir: o.CacheDir, BaseDir: o.BaseDir, Log: o.Log})
	if err != nil {
		return PlatformImage{}, ociimage.PlatformImage{}, err
	}
	binLayer, err := binariesLayer(ctx, binDir, dir, o.Created.Unix())
	if err != nil {
		return PlatformImage{}, ociimage.PlatformImage{}, fmt.Errorf("agent image %s: %w", plat, err)
	}
	pkgs, _ := lock.Packages(goarch)
	platform := ociimage.Platform(goos, goarch)
	img, err := ociimage.Image(platform, []ociimage.Layer{
		{Tar: base, CreatedBy: "carve-release: Debian packages " + packageNames(pkgs) + " (" + LockFile + ")"},
		{Tar: binLayer, CreatedBy: "carve-release: /usr/local/bin/" + strings.Join(gobuild.ImagePrograms(), ", ")},
	}, meta)
	if err != nil {
		return PlatformImage{}, ociimage.PlatformImage{}, err
	}
	pi := PlatformImage{Platform: plat, BinDir: binDir}
	if pi.Digest, err = img.Digest(); err != nil {
		return PlatformImage{}, ociimage.PlatformImage{}, fmt.Errorf("agent image %s: digest: %w", plat, err)
	}
	if pi.Size, err = ociimage.ImageSize(img); err != nil {
		return PlatformImage{}, ociimage.PlatformImage{}, err
	}
	return pi, ociimage.PlatformImage{Platform: platform, Image: img}, nil
}

func packageNames(pkgs []debbase.Package) string {
	var names []string
	for _, p := range pkgs {
		names = append(names, p.Name+"="+p.Version)
	}
	return strings.Join(names, " ")
}

// binariesLayer writes the tar of /usr/local/bin with the image's programs
// from binDir into work and returns its path.
func binariesLayer(ctx context.Context, binDir, work string, epoch int64) (string, error) {
	stage := filepath.Join(work, "layer")
	bin := filepath.Join(stage, "usr", "local", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", fmt.Errorf("binaries layer: %w", err)
	}
	for _, p := range gobuild.ImagePrograms() {
		if err := copyFile(filepath.Join(binDir, p), filepath.Join(bin, p), 0o755); err != nil {
			return "", fmt.Errorf("binaries layer: %w", err)
		}
	}
	out := filepath.Join(work, "binaries.tar")
	if err := tarball.Create(ctx, out, stage, []string{"."}, epoch, false); err != nil {
		return "", fmt.Errorf("binaries layer: %w", err)
	}
	return out, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
