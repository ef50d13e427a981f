package scale

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A fleet of delta streams runs in a process of its own (this test binary, started again with
// fleetEnv set), as proxies on other machines would: in the benchmark's process, its
// thousand receiving goroutines would share one Go scheduler with the producer whose latency
// is measured, and the producer's wake-ups would wait behind theirs.

const fleetEnv = "MCPBRIDGE_SCALE_FLEET" // "ADDRESS STREAMS [CLIENT_FEATURE...]": be a fleet

func TestMain(m *testing.M) {
	if spec := os.Getenv(fleetEnv); spec != "" {
		os.Exit(runFleet(spec))
	}
	os.Exit(m.Run())
}

// runFleet is the fleet process: it opens the streams, says "ready" on stdout once each has
// its first response, reports the responses received on stdout every 100 ms, and stops on
// SIGTERM or when stdin closes.
func runFleet(spec string) int {
	fields := strings.Fields(spec)
	if len(fields) < 2 {
		fmt.Fprintln(os.Stderr, "fleet: bad", fleetEnv, spec)
		return 2
	}
	streams, err := strconv.Atoi(fields[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet: bad", fleetEnv, spec)
		return 2
	}
	f, err := openDeltaFleet(fields[0], streams, fields[2:]...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 1
	}
	fmt.Println("ready")
	done := make(chan os.Signal, 1)
	signal.Notify(done, syscall.SIGTERM)
	go func() { bufio.NewReader(os.Stdin).ReadString('\n'); done <- syscall.SIGTERM }()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			f.stop()
			return 0
		case <-t.C:
			fmt.Println(f.responses.Load())
		}
	}
}

// fleetProcess is a fleet of streams in a process of its own.
type fleetProcess struct {
	cmd       *exec.Cmd
	stdin     interface{ Close() error }
	responses chan int64
}

func startFleetProcess(b *testing.B, addr string, streams int, features ...string) *fleetProcess {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", fleetEnv, addr, streams, strings.Join(features, " ")))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	f := &fleetProcess{cmd: cmd, stdin: stdin, responses: make(chan int64, 1)}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		cmd.Process.Kill()
		b.Fatalf("the fleet did not start: %q", lines.Text())
	}
	go func() {
		for lines.Scan() {
			if n, err := strconv.ParseInt(lines.Text(), 10, 64); err == nil {
				select {
				case <-f.responses:
				default:
				}
				f.responses <- n
			}
		}
	}()
	return f
}

// received is how many responses the fleet had received at its last report.
func (f *fleetProcess) received() int64 {
	select {
	case n := <-f.responses:
		f.responses <- n
		return n
	case <-time.After(time.Second):
		return 0
	}
}

func (f *fleetProcess) stop() {
	f.stdin.Close()
	f.cmd.Wait()
}
