// Package sbom writes CycloneDX JSON SBOMs of carve's release: one per
// binary, from the module graph Go embeds in it (cyclonedx-gomod's bin
// generator), and one per image platform, listing the base's Debian
// packages from the lock file (pkg:deb) and the binaries the image holds.
// Both are reproducible: the timestamp is SOURCE_DATE_EPOCH and the serial
// number a name-based UUID of the artifact's digest.
package sbom

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/generate/bin"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
)

// Tool names the program that wrote an SBOM.
type Tool struct{ Name, Version string }

// Binary is the SBOM of the Go binary at path (whose release name is name,
// e.g. carvectl), with version as the main module's version.
func Binary(path, name, version string, created time.Time, tool Tool) ([]byte, error) {
	gen, err := bin.NewGenerator(path, bin.WithVersionOverride(version), bin.WithLogger(zerolog.Nop()))
	if err != nil {
		return nil, fmt.Errorf("sbom of %s: %w", name, err)
	}
	bom, err := gen.Generate()
	if err != nil {
		return nil, fmt.Errorf("sbom of %s: %w", name, err)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return nil, fmt.Errorf("sbom of %s: %w", name, err)
	}
	finish(bom, "binary/"+name+"/"+sum, created, tool, "cyclonedx-gomod", "v1.10.0")
	return Encode(bom)
}

// finish sets what the generators leave to the caller: serial number,
// timestamp and tools.
func finish(bom *cdx.BOM, key string, created time.Time, tool Tool, extra ...string) {
	bom.SerialNumber = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/carve-dev/carve/sbom/"+key)).URN()
	if bom.Metadata == nil {
		bom.Metadata = &cdx.Metadata{}
	}
	bom.Metadata.Timestamp = created.UTC().Format(time.RFC3339)
	tools := []cdx.Component{{Type: cdx.ComponentTypeApplication, Name: tool.Name, Version: tool.Version}}
	for i := 0; i+1 < len(extra); i += 2 {
		tools = append(tools, cdx.Component{Type: cdx.ComponentTypeApplication, Name: extra[i], Version: extra[i+1]})
	}
	bom.Metadata.Tools = &cdx.ToolsChoice{Components: &tools}
}

// Encode writes bom as indented JSON.
func Encode(bom *cdx.BOM) ([]byte, error) {
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true).SetEscapeHTML(false)
	if err := enc.Encode(bom); err != nil {
		return nil, fmt.Errorf("encode sbom: %w", err)
	}
	return buf.Bytes(), nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
