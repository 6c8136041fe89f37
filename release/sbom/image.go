package sbom

import (
	"fmt"
	"path"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	packageurl "github.com/package-url/packageurl-go"

	"github.com/carve-dev/carve/release/debbase"
)

// ImageBinary is one binary in the image.
type ImageBinary struct {
	// Path is where the image has it, e.g. /usr/local/bin/carvectl.
	Path string
	// File is the binary on this machine (hashed).
	File string
	// SBOM is the file name of the binary's own SBOM, referred to from
	// the image's.
	SBOM string
}

// ImageInput is what an image SBOM describes.
type ImageInput struct {
	// Repository and Version name the image; Digest is the platform
	// manifest's digest (sha256:...).
	Repository, Version, Digest string
	// OS and Arch are the platform; Arch is also the Debian architecture.
	OS, Arch string
	// Lock pins the base's packages.
	Lock     *debbase.Lock
	Binaries []ImageBinary
	Created  time.Time
	Tool     Tool
}

// Image is the SBOM of one platform's image: its Debian packages and its
// binaries, each binary pointing to its own SBOM for its Go modules.
func Image(in ImageInput) ([]byte, error) {
	pkgs, err := in.Lock.Packages(in.Arch)
	if err != nil {
		return nil, fmt.Errorf("image sbom: %w", err)
	}
	name := path.Base(in.Repository)
	imagePURL := packageurl.NewPackageURL("oci", "", name, in.Digest, packageurl.QualifiersFromMap(map[string]string{
		"arch": in.Arch, "os": in.OS, "repository_url": in.Repository, "tag": in.Version,
	}), "").ToString()
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{Component: &cdx.Component{
		BOMRef: imagePURL, Type: cdx.ComponentTypeContainer, Name: name, Version: in.Version, PackageURL: imagePURL,
	}}
	var comps []cdx.Component
	var refs []string
	for _, p := range pkgs {
		c := debComponent(p, distro(in.Lock))
		comps = append(comps, c)
		refs = append(refs, c.BOMRef)
	}
	for _, b := range in.Binaries {
		c, err := binaryComponent(b, in.Version)
		if err != nil {
			return nil, err
		}
		comps = append(comps, c)
		refs = append(refs, c.BOMRef)
	}
	bom.Components = &comps
	bom.Dependencies = &[]cdx.Dependency{{Ref: imagePURL, Dependencies: &refs}}
	finish(bom, "image/"+in.Digest, in.Created, in.Tool)
	return Encode(bom)
}

// distro is the purl distro qualifier: the suite of the lock's first source.
func distro(l *debbase.Lock) string {
	if len(l.Sources) > 0 {
		if f := strings.Fields(l.Sources[0]); len(f) > 1 {
			return "debian-" + f[1]
		}
	}
	return "debian"
}

func debComponent(p debbase.Package, distro string) cdx.Component {
	purl := packageurl.NewPackageURL("deb", "debian", p.Name, p.Version, packageurl.QualifiersFromMap(map[string]string{
		"arch": p.Architecture, "distro": distro,
	}), "").ToString()
	return cdx.Component{
		BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: p.Name, Version: p.Version, PackageURL: purl,
		Hashes:             &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: p.SHA256}},
		ExternalReferences: &[]cdx.ExternalReference{{Type: cdx.ERTypeDistribution, URL: p.URL()}},
	}
}

func binaryComponent(b ImageBinary, version string) (cdx.Component, error) {
	sum, err := fileSHA256(b.File)
	if err != nil {
		return cdx.Component{}, fmt.Errorf("image sbom: %w", err)
	}
	purl := packageurl.NewPackageURL("golang", "github.com/carve-dev", "carve", version, nil, "cmd/"+path.Base(b.Path)).ToString()
	return cdx.Component{
		BOMRef: "file:" + b.Path, Type: cdx.ComponentTypeApplication, Name: path.Base(b.Path), Version: version,
		PackageURL: purl,
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}},
		Properties: &[]cdx.Property{{Name: "carve:path", Value: b.Path}},
		ExternalReferences: &[]cdx.ExternalReference{{
			Type: cdx.ERTypeBOM, URL: b.SBOM, Comment: "the binary's Go modules",
		}},
	}, nil
}
