package cluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BusyboxImage is the image every cluster has without a registry: a static
// busybox with its applets in /bin. Pods must use it with
// imagePullPolicy: Never. Its default command sleeps until SIGTERM, which also
// makes it the cluster's pod sandbox ("pause") image.
const BusyboxImage = "localhost/carve/busybox:e2e"

// defaultImagePath is the PATH of an image that sets no Env.
const defaultImagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Image is a container image of one layer, built in Go without a container
// engine or registry (see ImportImage).
type Image struct {
	// Name is the reference pods use, e.g. "carve.dev/carve-agent:e2e"
	// (with imagePullPolicy: Never). A name without a registry host is
	// normalised to docker.io/library/..., by containerd and the kubelet
	// alike.
	Name string
	// Files are the entries of the root file system, in this order. Parent
	// directories that no earlier entry creates are added with mode 0755.
	Files []ImageFile
	// Entrypoint and Cmd are the default process, as in a Dockerfile: a
	// container's command replaces Entrypoint, its args replace Cmd.
	Entrypoint, Cmd []string
	// Env is the default environment; empty means only the usual PATH.
	Env []string
	// CreatedBy describes the layer in the image history; default
	// "carve test/cluster".
	CreatedBy string
}

// ImageFile is one entry of an image's root file system: a directory (Dir),
// a symbolic link (Link), or else a regular file with Data.
type ImageFile struct {
	// Path is the entry's place in the image, e.g. "/usr/local/bin/x"; a
	// leading "/" is optional.
	Path string
	// Mode is the permission bits as in a tar header (0o1000 is the sticky
	// bit). Zero means 0o755 for a directory, 0o777 for a link and 0o644
	// for a file.
	Mode int64
	// Data is the content of a regular file.
	Data []byte
	// Dir makes the entry a directory.
	Dir bool
	// Link, when not empty, makes the entry a symbolic link to Link.
	Link string
}

// imageCmd is the busybox image's default command: wait for SIGTERM, exit 0.
func imageCmd() []string {
	return []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}
}

// epoch is the fixed timestamp of every image entry, so that the same files
// yield the same image digest.
func epoch() time.Time { return time.Unix(0, 0).UTC() }

// EnsureImage builds the test image archive from the static busybox at
// busybox into cacheDir unless it is there already.
func EnsureImage(ctx context.Context, cacheDir, busybox string) error {
	_, err := ensureImage(ctx, cacheDir, busybox)
	return err
}

// imageRecipe names the way the busybox image is assembled; a cached image
// made another way has another name, so it is built anew.
const imageRecipe = "ggcr1"

// ensureImage returns the path of the image tarball for busybox in cacheDir,
// building it when missing. The file name carries the digest of the busybox
// binary and imageRecipe, so a changed busybox or recipe makes a new image.
func ensureImage(ctx context.Context, cacheDir, busybox string) (string, error) {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return "", fmt.Errorf("read busybox: %w", err)
	}
	sum := sha256.Sum256(bb)
	path := filepath.Join(cacheDir, "images", fmt.Sprintf("busybox-%s-%s-%s.tar", imageRecipe, runtime.GOARCH, hex.EncodeToString(sum[:8])))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	applets, err := busyboxApplets(ctx, busybox)
	if err != nil {
		return "", err
	}
	archive, err := dockerArchive(busyboxImage(bb, applets))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("create image cache: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	if err := os.WriteFile(tmp, archive, 0o644); err != nil {
		return "", fmt.Errorf("write image: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("install image: %w", err)
	}
	return path, nil
}

// busyboxApplets lists the applets busybox was built with.
func busyboxApplets(ctx context.Context, busybox string) ([]string, error) {
	out, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	var applets []string
	for a := range strings.FieldsSeq(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("busybox %s lists no applets", busybox)
	}
	return applets, nil
}

// busyboxImage is BusyboxImage: a minimal root file system with busybox
// and one symlink per applet.
func busyboxImage(busybox []byte, applets []string) Image {
	var files []ImageFile
	for _, d := range []struct {
		name string
		mode int64
	}{
		{"bin", 0o755}, {"dev", 0o755}, {"etc", 0o755}, {"home", 0o755},
		{"proc", 0o555}, {"root", 0o700}, {"sys", 0o555}, {"tmp", 0o1777},
		{"usr", 0o755}, {"usr/bin", 0o755}, {"var", 0o755}, {"var/tmp", 0o1777},
	} {
		files = append(files, ImageFile{Path: d.name, Dir: true, Mode: d.mode})
	}
	files = append(files, ImageFile{Path: "bin/busybox", Mode: 0o755, Data: busybox})
	for _, a := range applets {
		files = append(files, ImageFile{Path: "bin/" + a, Link: "busybox", Mode: 0o777})
	}
	// Scripts often start with #!/usr/bin/env.
	files = append(files, ImageFile{Path: "usr/bin/env", Link: "/bin/busybox", Mode: 0o777})
	for _, f := range []struct{ name, data string }{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
		{"etc/hosts", "127.0.0.1\tlocalhost\n"},
	} {
		files = append(files, ImageFile{Path: f.name, Mode: 0o644, Data: []byte(f.data)})
	}
	return Image{Name: BusyboxImage, Files: files, Cmd: imageCmd(), CreatedBy: "carve test/cluster: static busybox"}
}

// dockerArchive returns img as writeDockerArchive writes it.
func dockerArchive(img Image) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeDockerArchive(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeDockerArchive writes img, assembled by go-containerregistry, in the
// format `docker save` writes and `ctr images import` reads. The same image
// always gives the same bytes.
func writeDockerArchive(w io.Writer, img Image) error {
	if img.Name == "" {
		return errors.New("image has no name")
	}
	ref, err := name.NewTag(img.Name)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	built, err := img.build()
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	if err := tarball.Write(ref, built, w); err != nil {
		return fmt.Errorf("write archive of image %s: %w", img.Name, err)
	}
	return nil
}

// build assembles img: one layer of its files and a config that says how
// to run it, everything dated epoch().
func (img Image) build() (v1.Image, error) {
	data, err := rootfsLayer(img.Files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	createdBy := cmp.Or(img.CreatedBy, "carve test/cluster")
	built, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch()}, CreatedBy: createdBy},
	})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	cf, err := built.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: epoch()}
	cf.Config.Env = img.Env
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{defaultImagePath}
	}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.WorkingDir = img.Entrypoint, img.Cmd, "/"
	built, err = mutate.ConfigFile(built, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return built, nil
}

// rootfsLayer builds an image's layer: the files in order, each preceded by
// those of its parent directories that no earlier entry made.
func rootfsLayer(files []ImageFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	dir := func(name string, mode int64) error {
		seen[name] = true
		if err := tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: epoch()}); err != nil {
			return fmt.Errorf("write layer: %w", err)
		}
		return nil
	}
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		if name == "" {
			return nil, fmt.Errorf("file %q: not a path below the root", f.Path)
		}
		if seen[name] {
			return nil, fmt.Errorf("file %q: %s is in the image twice", f.Path, name)
		}
		var parents []string
		for p := path.Dir(name); p != "." && !seen[p]; p = path.Dir(p) {
			parents = append(parents, p)
		}
		for _, p := range slices.Backward(parents) {
			if err := dir(p, 0o755); err != nil {
				return nil, err
			}
		}
		mode := f.Mode
		switch {
		case f.Dir:
			if mode == 0 {
				mode = 0o755
			}
			if err := dir(name, mode); err != nil {
				return nil, err
			}
			continue
		case f.Link != "":
			if mode == 0 {
				mode = 0o777
			}
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: f.Link, Mode: mode, ModTime: epoch()}); err != nil {
				return nil, fmt.Errorf("write layer: %w", err)
			}
		default:
			if mode == 0 {
				mode = 0o644
			}
			if err := writeTarFile(tw, name, mode, f.Data); err != nil {
				return nil, fmt.Errorf("write layer: %w", err)
			}
		}
		seen[name] = true
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	return buf.Bytes(), nil
}

func writeTarFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), ModTime: epoch()}); err != nil {
		return fmt.Errorf("header of %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("content of %s: %w", name, err)
	}
	return nil
}

// ImportImage builds img and imports it as ImportArchive does.
func (c *Cluster) ImportImage(ctx context.Context, img Image) error {
	f, err := os.CreateTemp(c.p.root, "image-*.tar")
	if err != nil {
		return fmt.Errorf("import image %s: %w", img.Name, err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	bw := bufio.NewWriterSize(f, 1<<20)
	err = writeDockerArchive(bw, img)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("import image %s: %w", img.Name, err)
	}
	return c.ImportArchive(ctx, f.Name(), img.Name)
}

// ImportArchive imports the image archive at path (a docker archive, or an
// OCI layout archive such as the release's, whose index names the image) into
// the cluster's containerd (namespace k8s.io), replacing any image of that
// name, then waits until the CRI plugin, and so the kubelet, sees ref. No
// registry or container engine is involved: pods must use the image with
// imagePullPolicy: Never. The image stays until the cluster stops.
func (c *Cluster) ImportArchive(ctx context.Context, path, ref string) error {
	if err := importArchive(ctx, c.ctrd.Ctr, c.p.containerdSocket, path, ref); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var watch []*process
	if p := c.proc(compContainerd); p.running() {
		watch = append(watch, p)
	}
	return c.waitFor(ctx, "the CRI plugin to see "+ref, watch, func(ctx context.Context) error {
		return criHasImage(ctx, c.p.containerdSocket, ref)
	})
}

// importImage loads the busybox image tarball into containerd's k8s.io
// namespace, where the CRI plugin (and so the kubelet) sees it.
func importImage(ctx context.Context, ctr, socket, tarball string) error {
	return importArchive(ctx, ctr, socket, tarball, BusyboxImage)
}

// importArchive loads the image archive tarball, holding image name, into
// containerd's k8s.io namespace.
func importArchive(ctx context.Context, ctr, socket, tarball, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctr, "--address", socket, "--namespace", "k8s.io", "images", "import", tarball)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s into containerd: %w\n%s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
