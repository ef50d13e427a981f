package scale

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/source/xds"
)

// BenchmarkHeartbeats10kResources1000Streams: a real mcpbridge process serves 10,000
// ServiceEntries from files with xds.ttl 10s on their type (a heartbeat every 5 s) to 1,000
// delta streams (in a fleet process of their own) that announce TTL support and ACK every
// response. Reported: the bridge's CPU per heartbeat round (all 1,000 streams renewed; from
// /proc, so gRPC's writes included) and per stream, and the bytes a round sends, beside the
// same bridge's CPU at rest without TTLs over the same time.
func BenchmarkHeartbeats10kResources1000Streams(b *testing.B) {
	const resources, streams, ttl, window = 10_000, 1_000, 10 * time.Second, 20 * time.Second
	bin := buildBridge(b)
	for range b.N {
		var perRound [2]time.Duration
		var rounds, bytesPerRound float64
		for i, withTTL := range []bool{false, true} {
			dir := b.TempDir()
			if err := Write(dir, resources, 10); err != nil {
				b.Fatal(err)
			}
			extra := ""
			if withTTL {
				extra = fmt.Sprintf("xds:\n  ttl:\n    types:\n      - {type: %s, ttl: %s}\n", seType, ttl)
			}
			p := startBridgeWith(b, bin, dir, extra, false)
			p.waitReady(b, time.Minute)
			f := startFleetProcess(b, p.grpcAddr, streams, xds.FeatureResourceTTL)
			time.Sleep(2 * time.Second) // first responses ACKed
			cpu0, err := CPU(p.cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			got0, bytes0 := f.received(), p.sentBytes(b)
			time.Sleep(window)
			cpu1, err := CPU(p.cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			heartbeats, sent := f.received()-got0, p.sentBytes(b)-bytes0
			f.stop()
			p.stop(b)
			if !withTTL {
				perRound[i] = cpu1 - cpu0 // at rest over the window, for comparison
				continue
			}
			rounds = float64(heartbeats) / streams
			if rounds < 1 {
				b.Fatalf("%d heartbeats in %s to %d streams: not one round", heartbeats, window, streams)
			}
			perRound[i] = time.Duration(float64(cpu1-cpu0) / rounds)
			bytesPerRound = sent / rounds
		}
		b.ReportMetric(ms(perRound[1]), "CPU-ms/round")
		b.ReportMetric(float64(perRound[1].Microseconds())/streams, "CPU-µs/stream-round")
		b.ReportMetric(rounds, "rounds")
		b.ReportMetric(bytesPerRound/(1<<20), "MiB/round")
		b.ReportMetric(ms(perRound[0]), "CPU-ms-at-rest-without-TTL")
	}
}

// sentBytes is the bytes of every response the bridge sent (mcpbridge_message_size_bytes, role
// source), from its /metrics.
func (p *bridgeProcess) sentBytes(b *testing.B) float64 {
	b.Helper()
	resp, err := http.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	total := 0.0
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "mcpbridge_message_size_bytes_sum{") && strings.Contains(line, `role="source"`) {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				total += v
			}
		}
	}
	return total
}
