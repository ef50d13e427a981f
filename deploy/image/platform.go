package main

import (
	"fmt"
	"slices"
	"strings"
)

// parsePlatforms reads -platforms: OS/ARCH, comma-separated, such as linux/amd64,linux/arm64.
// Only linux (the binary is built for it) and only the arches checkArch allows, which need no
// variant; each once. They come back as GOARCH values in a fixed order, so that the same set,
// in whatever order it is given, makes the same index and the same digest.
func parsePlatforms(s string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		arch, err := parsePlatform(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, arch) {
			return nil, fmt.Errorf("-platforms %q: linux/%s is given twice", s, arch)
		}
		out = append(out, arch)
	}
	slices.Sort(out)
	return out, nil
}

// parsePlatform checks one platform of -platforms and returns its architecture.
func parsePlatform(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("-platforms: an empty platform (want OS/ARCH, comma-separated, such as linux/amd64,linux/arm64)")
	}
	goos, arch, ok := strings.Cut(p, "/")
	if !ok || goos == "" || arch == "" || strings.Contains(arch, "/") {
		return "", fmt.Errorf("-platforms: %q is not OS/ARCH (such as linux/arm64, with no variant)", p)
	}
	if goos != "linux" {
		return "", fmt.Errorf("-platforms: %q: the image is for linux only", p)
	}
	if !slices.Contains(arches, arch) {
		return "", fmt.Errorf("-platforms: %q: architecture %q is not one of %s", p, arch, strings.Join(arches, ", "))
	}
	return arch, nil
}
