package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The multi-platform image is written as an OCI image layout (image-spec image-layout.md) in
// one tarball: oci-layout, index.json and blobs/sha256/. index.json holds one entry, the image
// index that lists one image per platform, named by its annotations. The loaders that take an
// index read this format: containerd's importer (ctr images import, kind load image-archive,
// and docker load with Docker's containerd image store) and podman load (containers/image's
// oci-archive, which wants exactly one entry in index.json, and takes the host's platform of
// it). Docker's classic image store reads only the docker save format, which has no index:
// it is given the single-platform tarball.

const (
	layoutFile    = "oci-layout"
	layoutVersion = `{"imageLayoutVersion":"1.0.0"}`
	// annotationName is containerd's name of the image, a full reference: ctr import names
	// the image with it (without it, import-DATE:TAG), and podman load reads it too.
	annotationName = "io.containerd.image.name"
	// annotationRefName is the image layout's own: the tag, as docker save and containerd's
	// export write it.
	annotationRefName = "org.opencontainers.image.ref.name"
)

// buildIndex makes one image per spec, each with its own platform's binary, and the OCI image
// index that lists them with their platforms, in the order of specs.
func buildIndex(specs []spec) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, s := range specs {
		s.oci = true
		img, err := buildImage(s)
		if err != nil {
			return nil, fmt.Errorf("linux/%s: %w", s.arch, err)
		}
		adds = append(adds, mutate.IndexAddendum{
			Add:        imageNotArtifact{img},
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: s.arch}},
		})
	}
	// empty.Index is an OCI index: its media type is the one the layout expects.
	return mutate.AppendManifests(empty.Index, adds...), nil
}

// imageNotArtifact is an image whose descriptor in the index has no artifactType. Without it
// go-containerregistry gives every OCI manifest one, the config's media type; the image spec
// has artifactType for artifacts, and an index of images (as docker buildx writes them) has
// none, so that no reader takes these for artifacts.
type imageNotArtifact struct{ v1.Image }

func (imageNotArtifact) ArtifactType() (string, error) { return "", nil }

// imageNames are the annotations that name the image in index.json. Docker Hub's names are
// written in full as containerd normalises them (mcpbridge:dev is
// docker.io/library/mcpbridge:dev): that is the name kubelet asks the node's containerd for
// when a pod's image is mcpbridge:dev.
func imageNames(tag name.Tag) map[string]string {
	registry := tag.Context().RegistryStr()
	if registry == name.DefaultRegistry { // index.docker.io, go-containerregistry's spelling
		registry = "docker.io"
	}
	return map[string]string{
		annotationName:    registry + "/" + tag.Context().RepositoryStr() + ":" + tag.TagStr(),
		annotationRefName: tag.TagStr(),
	}
}

// blob is one file of blobs/sha256/.
type blob struct {
	digest v1.Hash
	open   func() (io.ReadCloser, error)
	size   int64
}

// writeLayout writes idx, named tag, as an OCI image layout in a tar stream. Every entry has
// the same owner, mode and time (mtime, SOURCE_DATE_EPOCH) and the blobs are in digest order,
// so the same index gives the same bytes.
func writeLayout(w io.Writer, tag name.Tag, idx v1.ImageIndex, mtime time.Time) error {
	desc, err := indexDescriptor(idx)
	if err != nil {
		return err
	}
	desc.Annotations = imageNames(tag)
	top, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{desc}})
	if err != nil {
		return err
	}
	blobs, err := indexBlobs(idx)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{{layoutFile, []byte(layoutVersion)}, {"index.json", top}}
	for _, e := range entries {
		if err := writeEntry(tw, e.name, int64(len(e.data)), bytes.NewReader(e.data), mtime); err != nil {
			return err
		}
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(layoutHeader(dir, tar.TypeDir, 0, mtime)); err != nil {
			return err
		}
	}
	for _, b := range blobs {
		if err := writeBlob(tw, b, mtime); err != nil {
			return err
		}
	}
	return tw.Close()
}

// indexDescriptor is the descriptor of idx itself, for index.json.
func indexDescriptor(idx v1.ImageIndex) (v1.Descriptor, error) {
	mt, err := idx.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := idx.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := idx.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

// blobSet is the files of blobs/sha256/, by digest: a blob is written once however many
// manifests refer to it.
type blobSet map[v1.Hash]blob

func (s blobSet) addBytes(d v1.Hash, data []byte) {
	s[d] = blob{digest: d, size: int64(len(data)), open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}}
}

// indexBlobs are every blob of idx: the index, and each image's manifest, config and layers,
// once each (the layer of users, CA certificates and configuration is the same for every
// platform), sorted by digest.
func indexBlobs(idx v1.ImageIndex) ([]blob, error) {
	set := blobSet{}
	raw, err := idx.RawManifest()
	if err != nil {
		return nil, err
	}
	d, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	set.addBytes(d, raw)
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, m := range im.Manifests {
		img, err := idx.Image(m.Digest)
		if err != nil {
			return nil, err
		}
		if err := set.addImage(img); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Platform, err)
		}
	}
	out := make([]blob, 0, len(set))
	for _, b := range set {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b blob) int { return strings.Compare(a.digest.String(), b.digest.String()) })
	return out, nil
}

// addImage adds the manifest, config and layers of img.
func (s blobSet) addImage(img v1.Image) error {
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	s.addBytes(d, raw)
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cd, err := img.ConfigName()
	if err != nil {
		return err
	}
	s.addBytes(cd, cfg)
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		ld, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		s[ld] = blob{digest: ld, size: size, open: l.Compressed}
	}
	return nil
}

func writeBlob(tw *tar.Writer, b blob, mtime time.Time) error {
	if b.digest.Algorithm != "sha256" {
		return fmt.Errorf("blob %s: the layout holds sha256 blobs only", b.digest)
	}
	rc, err := b.open()
	if err != nil {
		return err
	}
	defer rc.Close()
	return writeEntry(tw, "blobs/sha256/"+b.digest.Hex, b.size, rc, mtime)
}

// writeEntry writes one file of the layout, and fails if r does not hold size bytes.
func writeEntry(tw *tar.Writer, name string, size int64, r io.Reader, mtime time.Time) error {
	if err := tw.WriteHeader(layoutHeader(name, tar.TypeReg, size, mtime)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if n, err := io.Copy(tw, r); err != nil || n != size {
		return fmt.Errorf("%s: wrote %d bytes of %d: %v", name, n, size, err)
	}
	return nil
}

// layoutHeader is the header of one entry: root's, readable by all, at mtime, plain ustar
// (no extended header that could carry a time of its own).
func layoutHeader(name string, typ byte, size int64, mtime time.Time) *tar.Header {
	mode := int64(0o644)
	if typ == tar.TypeDir {
		mode = 0o755
	}
	return &tar.Header{
		Name:     name,
		Typeflag: typ,
		Mode:     mode,
		Size:     size,
		ModTime:  mtime.UTC().Truncate(time.Second),
		Format:   tar.FormatUSTAR,
	}
}
