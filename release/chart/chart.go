// Package chart packages carve's Helm chart for a release with Helm's own
// Go packages: appVersion and the image.tag default are the release version,
// the chart version is that version without its "v", and every file is
// dated SOURCE_DATE_EPOCH so that the .tgz is reproducible.
package chart

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
)

// Package writes the chart at dir into outDir for version and returns the
// .tgz's path.
func Package(dir, outDir, version string, created time.Time) (string, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return "", fmt.Errorf("load chart %s: %w", dir, err)
	}
	c.Metadata.AppVersion = version
	c.Metadata.Version = Version(version)
	if err := setImageTag(c, version); err != nil {
		return "", err
	}
	c.StampModTimes(created)
	path, err := chartutil.Save(c, outDir)
	if err != nil {
		return "", fmt.Errorf("package chart %s: %w", dir, err)
	}
	return path, nil
}

// Version is the chart version of a release version: without the leading
// "v" when that is semver (v0.1.0 -> 0.1.0, v0.1.0-3-gabc1234 ->
// 0.1.0-3-gabc1234); otherwise, e.g. a bare commit from git describe
// --always, a pre-release of 0.0.0 (abc1234-dirty -> 0.0.0-gabc1234-dirty).
func Version(version string) string {
	v := strings.TrimPrefix(version, "v")
	if _, err := semver.StrictNewVersion(v); err == nil {
		return v
	}
	clean := regexp.MustCompile(`[^0-9A-Za-z.-]+`).ReplaceAllString(v, "-")
	return "0.0.0-g" + clean
}

// setImageTag sets image.tag's default to version in values.yaml, as text
// so that its comments stay, and in the parsed values.
func setImageTag(c *chart.Chart, version string) error {
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		text := string(f.Data)
		start := strings.Index(text, "\nimage:\n")
		if start < 0 {
			return fmt.Errorf("chart values.yaml: no top-level image: block")
		}
		block := text[start+1:]
		if end := regexp.MustCompile(`\n[^ #\n]`).FindStringIndex(block); end != nil {
			block = block[:end[0]]
		}
		// image.tag's line, two spaces in: its value, quoted or plain,
		// without a trailing comment.
		tag := regexp.MustCompile(`(?m)^  tag:[ \t]*("[^"\n]*"|'[^'\n]*'|[^#\n]*?)[ \t]*(#.*)?$`)
		loc := tag.FindStringSubmatchIndex(block)
		if loc == nil {
			return fmt.Errorf("chart values.yaml: no tag line in the image block")
		}
		i, j := start+1+loc[2], start+1+loc[3]
		f.Data = []byte(text[:i] + `"` + version + `"` + text[j:])
		image, ok := c.Values["image"].(map[string]any)
		if !ok {
			return fmt.Errorf("chart values.yaml: image is not a map")
		}
		image["tag"] = version
		return nil
	}
	return fmt.Errorf("chart has no values.yaml")
}
