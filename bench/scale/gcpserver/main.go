// Command gcpserver is go-control-plane's side of BenchmarkCompareFullUpdate (bench/scale):
// go-control-plane's ADS server (pkg/server/v3) over a LinearCache of ClusterLoadAssignments,
// in its own process, with a small HTTP control endpoint on loopback:
//
//	POST /apply?gen=G  builds generation G of the N assignments the benchmark's ServiceEntries
//	                   translate into (scale.FullUpdateAssignment) and hands them to the cache
//	                   in one UpdateResources; answers once that returned
//	GET  /watches      the watches open on the first assignment's name (one per stream that
//	                   has processed its last ACK)
//	GET  /readyz       200 once listening
//	GET  /debug/pprof/ the Go profiles
//
// It stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/mcpbridge/mcpbridge/bench/scale"
)

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "ADS listen address")
	httpAddr := flag.String("http", "127.0.0.1:0", "control listen address")
	n := flag.Int("n", 1000, "ClusterLoadAssignments")
	flag.Parse()
	if err := run(*grpcAddr, *httpAddr, *n); err != nil {
		log.Fatal(err)
	}
}

func run(grpcAddr, httpAddr string, n int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	c := gcpcache.NewLinearCache(resource.EndpointType)
	srv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, gcpserver.NewServer(ctx, c, nil))
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("POST /apply", func(w http.ResponseWriter, r *http.Request) {
		gen, err := strconv.Atoi(r.URL.Query().Get("gen"))
		if err != nil {
			http.Error(w, "gen: "+err.Error(), http.StatusBadRequest)
			return
		}
		// The update: build every assignment of this generation, then one UpdateResources
		// (which computes each open watch's response and hands it to its stream).
		in := make(map[string]types.Resource, n)
		for i := range n {
			in[scale.Cluster(i)] = scale.FullUpdateAssignment(i, gen)
		}
		if err := c.UpdateResources(in, nil); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /watches", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, c.NumWatches(scale.Cluster(0)))
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	hs := &http.Server{Handler: mux}

	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(gl) }()
	go func() { errc <- hs.Serve(hl) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	srv.Stop()
	hs.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
