package debbase

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
)

// ErrGone is returned, wrapped with the package, when the mirror no longer
// serves a pinned version: the lock must be regenerated.
var ErrGone = errors.New("the mirror no longer has this version; regenerate the lock with `make release-lock`")

// Fetch returns the path of p's .deb in cacheDir/debs, downloading it by its
// pool path when missing. The file is checked against the lock's size and
// SHA256, also when it comes from the cache.
func Fetch(ctx context.Context, p Package, cacheDir string) (string, error) {
	path := filepath.Join(cacheDir, "debs", p.SHA256+".deb")
	if err := verify(path, p); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("deb cache: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	defer func() { _ = os.Remove(tmp) }()
	if err := download(ctx, p, tmp); err != nil {
		return "", err
	}
	if err := verify(tmp, p); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("deb cache: %w", err)
	}
	return path, nil
}

func download(ctx context.Context, p Package, dst string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL(), nil)
	if err != nil {
		return fmt.Errorf("download %s: %w", p, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("download %s: %w", p, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return fmt.Errorf("download %s from %s: %s: %w", p, p.URL(), resp.Status, ErrGone)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("download %s from %s: %s", p, p.URL(), resp.Status)
	}
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("download %s: %w", p, err)
	}
	// One byte more than pinned, so that a longer file fails verify.
	if _, err := io.Copy(f, io.LimitReader(resp.Body, p.Size+1)); err != nil {
		_ = f.Close()
		return fmt.Errorf("download %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("download %s: %w", p, err)
	}
	return nil
}

// verify checks the file at path against p's size and SHA256.
func verify(path string, p Package) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify %s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("verify %s: %w", p, err)
	}
	if n != p.Size {
		return fmt.Errorf("verify %s: %d bytes, the lock pins %d", p, n, p.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
		return fmt.Errorf("verify %s: sha256 %s, the lock pins %s", p, got, p.SHA256)
	}
	return nil
}
