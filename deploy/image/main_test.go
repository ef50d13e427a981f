package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A bad command line or environment is exit 2 with one line saying what is wrong, before
// anything is built.
func TestRunRefusesBadInput(t *testing.T) {
	src, err := findSource(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		args  []string
		epoch string
		want  string
	}{
		{"no output", []string{"-version", "v1"}, "", "give one of -o FILE"},
		{"two outputs", []string{"-o", "x.tar", "-rootfs", "dir"}, "", "give one of -o FILE"},
		{"an argument", []string{"-o", "x.tar", "extra"}, "", `unexpected argument "extra"`},
		{"unknown flag", []string{"-push"}, "", "flag provided but not defined: -push"},
		{"epoch not a number", []string{"-o", "x.tar"}, "yesterday", `SOURCE_DATE_EPOCH "yesterday"`},
		{"epoch negative", []string{"-o", "x.tar"}, "-1", `SOURCE_DATE_EPOCH "-1"`},
		{"empty version", []string{"-o", "x.tar", "-version", ""}, "", "-version: empty"},
		{"version with a space", []string{"-o", "x.tar", "-version", "v1 -X main.x=y"}, "", "holds a space"},
		{"arch", []string{"-o", "x.tar", "-arch", "arm"}, "", `-arch "arm": not one of`},
		{"tag", []string{"-o", "x.tar", "-tag", "Bad Name:x"}, "", `-tag "Bad Name:x"`},
		{"src elsewhere", []string{"-o", "x.tar", "-src", t.TempDir()}, "", "no go.mod there"},
		{"src another module", []string{"-o", "x.tar", "-src", "."}, "", "its go.mod is module github.com/mcpbridge/mcpbridge/deploy/image"},
		{"platforms not linux", []string{"-o", "x.tar", "-platforms", "linux/amd64,windows/amd64"}, "", `-platforms: "windows/amd64": the image is for linux only`},
		{"platforms arch", []string{"-o", "x.tar", "-platforms", "linux/arm"}, "", `-platforms: "linux/arm": architecture "arm" is not one of amd64, arm64`},
		{"platforms no OS", []string{"-o", "x.tar", "-platforms", "arm64"}, "", `-platforms: "arm64" is not OS/ARCH`},
		{"platforms variant", []string{"-o", "x.tar", "-platforms", "linux/arm64/v8"}, "", `-platforms: "linux/arm64/v8" is not OS/ARCH`},
		{"platforms empty", []string{"-o", "x.tar", "-platforms", "linux/amd64,"}, "", "-platforms: an empty platform"},
		{"platforms twice", []string{"-o", "x.tar", "-platforms", "linux/amd64, linux/amd64"}, "", "linux/amd64 is given twice"},
		{"platforms and arch", []string{"-o", "x.tar", "-arch", "amd64", "-platforms", "linux/arm64"}, "", "give -arch or -platforms, not both"},
		{"platforms and rootfs", []string{"-rootfs", "dir", "-platforms", "linux/amd64,linux/arm64"}, "", "-rootfs writes the files of one platform"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			getenv := func(k string) string {
				if k == "SOURCE_DATE_EPOCH" {
					return c.epoch
				}
				return ""
			}
			args := c.args
			if !strings.Contains(c.name, "src") {
				args = append([]string{"-src", src}, args...)
			}
			code := run(context.Background(), args, getenv, &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), c.want)
			}
			// One line, but for the flag package's own error, which the usage follows.
			if lines := strings.Count(stderr.String(), "\n"); lines != 1 && c.name != "unknown flag" {
				t.Errorf("stderr has %d lines, want 1: %q", lines, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

func TestDefaultTag(t *testing.T) {
	for version, want := range map[string]string{
		"v1.2.3":                 "mcpbridge:v1.2.3",
		"v1.2.3-4-gabcdef-dirty": "mcpbridge:v1.2.3-4-gabcdef-dirty",
		"50a32da":                "mcpbridge:50a32da",
		"v1.2.3+build.5":         "mcpbridge:v1.2.3-build.5",
		".hidden":                "mcpbridge:v.hidden",
		strings.Repeat("x", 200): "mcpbridge:" + strings.Repeat("x", 128),
	} {
		got := defaultTag(version)
		if got != want {
			t.Errorf("defaultTag(%q) = %q, want %q", version, got, want)
		}
		if _, err := parseTag(got); err != nil {
			t.Errorf("defaultTag(%q) = %q, not a valid tag: %v", version, got, err)
		}
	}
}
