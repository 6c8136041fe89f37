package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// BusyboxImage is the image every cluster has without a registry: a static
// busybox with its applets in /bin. Pods must use it with
// imagePullPolicy: Never. Its default command sleeps until SIGTERM, which also
// makes it the cluster's pod sandbox ("pause") image.
const BusyboxImage = "localhost/carve/busybox:e2e"

// imageCmd is the image's default command: wait for SIGTERM, exit 0.
func imageCmd() []string {
	return []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}
}

// epoch is the fixed timestamp of every image entry, so that the same busybox
// yields the same image digest.
func epoch() time.Time { return time.Unix(0, 0).UTC() }

// EnsureImage builds the test image archive from the static busybox at
// busybox into cacheDir unless it is there already.
func EnsureImage(cacheDir, busybox string) error {
	_, err := ensureImage(cacheDir, busybox)
	return err
}

// ensureImage returns the path of the image tarball for busybox in cacheDir,
// building it when missing. The file name carries the digest of the busybox
// binary, so a changed busybox makes a new image.
func ensureImage(cacheDir, busybox string) (string, error) {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return "", fmt.Errorf("read busybox: %w", err)
	}
	sum := sha256.Sum256(bb)
	path := filepath.Join(cacheDir, "images", fmt.Sprintf("busybox-%s-%s.tar", runtime.GOARCH, hex.EncodeToString(sum[:8])))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	applets, err := busyboxApplets(busybox)
	if err != nil {
		return "", err
	}
	archive, err := dockerArchive(bb, applets)
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
func busyboxApplets(busybox string) ([]string, error) {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("busybox %s lists no applets", busybox)
	}
	return applets, nil
}

// dockerArchive builds an image in the format `docker save` writes and
// `ctr images import` reads: manifest.json, an image config and one
// uncompressed layer.
func dockerArchive(busybox []byte, applets []string) ([]byte, error) {
	layer, err := rootfsLayer(busybox, applets)
	if err != nil {
		return nil, err
	}
	layerSum := sha256.Sum256(layer)
	layerHex := hex.EncodeToString(layerSum[:])

	type imageConfig struct {
		Env        []string `json:"Env"`
		Cmd        []string `json:"Cmd"`
		WorkingDir string   `json:"WorkingDir"`
	}
	type history struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
	}
	config := struct {
		Architecture string      `json:"architecture"`
		OS           string      `json:"os"`
		Created      time.Time   `json:"created"`
		Config       imageConfig `json:"config"`
		RootFS       struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		History []history `json:"history"`
	}{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      epoch(),
		Config: imageConfig{
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd:        imageCmd(),
			WorkingDir: "/",
		},
		History: []history{{Created: epoch(), CreatedBy: "carve test/cluster: static busybox"}},
	}
	config.RootFS.Type = "layers"
	config.RootFS.DiffIDs = []string{"sha256:" + layerHex}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return nil, fmt.Errorf("encode image config: %w", err)
	}
	configSum := sha256.Sum256(configJSON)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := layerHex + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{BusyboxImage},
		"Layers":   []string{layerName},
	}})
	if err != nil {
		return nil, fmt.Errorf("encode image manifest: %w", err)
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		data []byte
	}{
		{layerName, layer},
		{configName, configJSON},
		{"manifest.json", manifest},
	}
	if err := tw.WriteHeader(&tar.Header{Name: layerHex + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch()}); err != nil {
		return nil, fmt.Errorf("write image archive: %w", err)
	}
	for _, e := range entries {
		if err := writeTarFile(tw, e.name, 0o644, e.data); err != nil {
			return nil, fmt.Errorf("write image archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write image archive: %w", err)
	}
	return buf.Bytes(), nil
}

// rootfsLayer builds the image's only layer: a minimal root file system with
// busybox and one symlink per applet.
func rootfsLayer(busybox []byte, applets []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []struct {
		name string
		mode int64
	}{
		{"bin/", 0o755}, {"dev/", 0o755}, {"etc/", 0o755}, {"home/", 0o755},
		{"proc/", 0o555}, {"root/", 0o700}, {"sys/", 0o555}, {"tmp/", 0o1777},
		{"usr/", 0o755}, {"usr/bin/", 0o755}, {"var/", 0o755}, {"var/tmp/", 0o1777},
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: d.name, Typeflag: tar.TypeDir, Mode: d.mode, ModTime: epoch()}); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
	}
	if err := writeTarFile(tw, "bin/busybox", 0o755, busybox); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	for _, a := range applets {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777, ModTime: epoch()}); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
	}
	// Scripts often start with #!/usr/bin/env.
	if err := tw.WriteHeader(&tar.Header{Name: "usr/bin/env", Typeflag: tar.TypeSymlink, Linkname: "/bin/busybox", Mode: 0o777, ModTime: epoch()}); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	files := []struct {
		name, data string
	}{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
		{"etc/hosts", "127.0.0.1\tlocalhost\n"},
	}
	for _, f := range files {
		if err := writeTarFile(tw, f.name, 0o644, []byte(f.data)); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
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

// importImage loads the image tarball into containerd's k8s.io namespace,
// where the CRI plugin (and so the kubelet) sees it.
func importImage(ctx context.Context, ctr, socket, tarball string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctr, "--address", socket, "--namespace", "k8s.io", "images", "import", tarball)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s into containerd: %w\n%s", BusyboxImage, err, strings.TrimSpace(string(out)))
	}
	return nil
}
