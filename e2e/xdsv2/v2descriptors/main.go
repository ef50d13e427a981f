// Command v2descriptors writes the descriptors of Envoy 1.16's API, as go-control-plane v0.9.7
// (October 2020, Envoy 1.16's month) compiled it: the v2 resource messages (Cluster,
// ClusterLoadAssignment, Listener, RouteConfiguration and everything they reach) and every v2
// and v3 config and extension package (imports.go), as a gzipped
// google.protobuf.FileDescriptorSet. The main module's test of the v2 transport
// (translate/envoy, TestV3BodiesReadAsV2) reads the translation's bodies with them, the types
// inside their Anys too; the main module cannot import these packages (they are gone from the
// go-control-plane it uses, or older, and conflict with its envoy submodule). A module of its
// own, so that its go-control-plane is v0.9.7 whatever grpc-go 1.34 (e2e/xdsv2) needs.
//
//	go run . -o ../../../translate/envoy/testdata/envoy-1.16-api.binpb.gz
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"sort"

	apiv2 "github.com/envoyproxy/go-control-plane/envoy/api/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	out := flag.String("o", "envoy-1.16-api.binpb.gz", "output file")
	flag.Parse()
	files := map[string]protoreflect.FileDescriptor{}
	for _, m := range []proto.Message{&apiv2.Cluster{}, &apiv2.ClusterLoadAssignment{}, &apiv2.Listener{}, &apiv2.RouteConfiguration{}} {
		collect(m.ProtoReflect().Descriptor().ParentFile(), files)
	}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		collect(fd, files)
		return true
	})
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names) // a stable file for a stable input
	set := &descriptorpb.FileDescriptorSet{}
	for _, n := range names {
		fd := protodesc.ToFileDescriptorProto(files[n])
		fd.SourceCodeInfo = nil
		set.File = append(set.File, fd)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err == nil {
		var z bytes.Buffer
		w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		w.Write(b)
		w.Close()
		err = os.WriteFile(*out, z.Bytes(), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d files, %d bytes\n", len(set.File), len(b))
}

// collect adds a file and its imports, transitively.
func collect(fd protoreflect.FileDescriptor, files map[string]protoreflect.FileDescriptor) {
	if _, ok := files[fd.Path()]; ok {
		return
	}
	files[fd.Path()] = fd
	imports := fd.Imports()
	for i := range imports.Len() {
		collect(imports.Get(i).FileDescriptor, files)
	}
}
