// Package tlsserver serves TLS from certificate, key and CA files and reloads them when they
// change on disk, so that a rotated certificate (cert-manager, a kubelet-mounted Secret) is
// served without a restart. New handshakes use the newest good files; open connections keep
// the session they made. A change that cannot be loaded (a file half written, a key that does
// not match) keeps the last good files serving and is logged and reported.
//
// It is a foundation package: configuration in (Config), a *tls.Config out (TLSConfig), and
// Run to watch the files until its context ends.
package tlsserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/fswatch"
)

// Options configure a Server.
type Options struct {
	// Key is where Config is in the configuration ("grpc.tls"); errors and logs name it.
	Key    string
	Config Config
	// NextProtos are the ALPN protocols offered. gRPC's credentials add h2 themselves; an
	// HTTP server wants "h2" and "http/1.1".
	NextProtos []string
	// Debounce gathers a burst of file events into one reload; zero reloads at once. The
	// bridge passes its own (app's tlsDebounce): it is not a configuration key.
	Debounce time.Duration
	Logger   *slog.Logger
	// Reloaded, if set, is called after each attempt to load changed files: nil when the new
	// files serve, else why the last good ones still do.
	Reloaded func(error)
}

// Server holds the TLS configuration built from the newest good files.
type Server struct {
	opts    Options
	auth    tls.ClientAuthType
	current atomic.Pointer[loaded]
	running atomic.Bool
	// failing is whether the last reload failed, so that files put back as they were are
	// reported as good again. Run's goroutine alone uses it.
	failing bool
}

// loaded is one good load: the config every new handshake gets, and the bytes it was built
// from, so that an event that changed nothing is not a reload.
type loaded struct {
	config *tls.Config
	files  contents
}

type contents struct{ cert, key, ca []byte }

func (c contents) equal(o contents) bool {
	return bytes.Equal(c.cert, o.cert) && bytes.Equal(c.key, o.key) && bytes.Equal(c.ca, o.ca)
}

// New validates the configuration and loads the files. Its error names the key and the file.
func New(opts Options) (*Server, error) {
	if err := opts.Config.Validate(opts.Key); err != nil {
		return nil, err
	}
	if !opts.Config.Enabled() {
		return nil, fmt.Errorf("%s: no cert_file and key_file: nothing to serve", opts.Key)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	auth, _ := opts.Config.clientAuthType(opts.Key) // validated
	s := &Server{opts: opts, auth: auth}
	l, err := s.load()
	if err != nil {
		return nil, err
	}
	s.current.Store(l)
	s.logLoaded("TLS files loaded", l)
	return s, nil
}

// TLSConfig is the configuration to serve with. It is a shell: every handshake gets the
// config of the newest good files (GetConfigForClient), built once per reload and shared.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: s.opts.NextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current.Load().config, nil
		},
	}
}

// Certificate is the server certificate new handshakes are given.
func (s *Server) Certificate() *x509.Certificate { return s.current.Load().config.Certificates[0].Leaf }

// Run follows the files until ctx ends, then returns nil. They are watched through their
// directories (internal/fswatch): kubelet updates a mounted Secret by renaming a "..data"
// symlink beside them, and an editor or a deployment tool by renaming a new file over the
// old, and a watch on the old file would see neither.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%s: Run called twice", s.opts.Key)
	}
	w, err := fswatch.New(fswatch.Options{Paths: s.files(), Debounce: s.opts.Debounce})
	if err != nil {
		return fmt.Errorf("%s: %w", s.opts.Key, err)
	}
	// A change made between New and the start of the watch would otherwise wait for the next.
	s.reload()
	if err := w.Run(ctx, s.changed); err != nil {
		return fmt.Errorf("%s: %w", s.opts.Key, err)
	}
	return nil
}

// changed reloads after a burst of changes to the files. After a watch error (events lost)
// the files are looked at again all the same.
func (s *Server) changed(c fswatch.Change) {
	for _, err := range c.Errors {
		s.opts.Logger.Warn("TLS file watcher error", "key", s.opts.Key, "error", err)
	}
	s.reload()
}

// reload loads the files and, if they changed and are good, serves them. A failure keeps the
// last good config. Only Run's goroutine calls it.
func (s *Server) reload() {
	l, err := s.load()
	unchanged := err == nil && l.files.equal(s.current.Load().files)
	switch {
	case unchanged && !s.failing:
		return // an event that changed none of our files
	case unchanged:
		s.opts.Logger.Info("TLS files good again: the ones serving", "key", s.opts.Key)
	case err != nil:
		attrs := []any{"key", s.opts.Key, "error", err}
		var fe *FileError
		if errors.As(err, &fe) {
			attrs = append(attrs, "file", fe.Path)
		}
		s.opts.Logger.Warn("TLS files not reloaded; the last good ones still serve", attrs...)
	default:
		s.current.Store(l)
		s.logLoaded("TLS files reloaded", l)
	}
	s.failing = err != nil
	if s.opts.Reloaded != nil {
		s.opts.Reloaded(err)
	}
}

func (s *Server) logLoaded(msg string, l *loaded) {
	leaf := l.config.Certificates[0].Leaf
	attrs := []any{"key", s.opts.Key, "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.Text(16),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "client_auth", s.opts.Config.clientAuth()}
	if time.Now().After(leaf.NotAfter) {
		s.opts.Logger.Warn(msg+"; the certificate has expired: clients will refuse it", attrs...)
		return
	}
	s.opts.Logger.Info(msg, attrs...)
}

// files are the files the configuration names.
func (s *Server) files() []string {
	var out []string
	for _, f := range []string{s.opts.Config.CertFile, s.opts.Config.KeyFile, s.opts.Config.ClientCAFile} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// FileError is a file that cannot be read or used; its message names the key and the file.
type FileError struct {
	Key, Path string
	Err       error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s %s: %v", e.Key, e.Path, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// loadAttempts bounds the reads of one load while its files keep changing under it.
const loadAttempts = 3

// load reads the files and builds the config every handshake will share. A kubelet mount
// swaps all its files at once, but a load that reads between the swap and its other files
// sees a key that is not the certificate's: when a build fails and the files now read
// differently, it was such a torn read, and the files are read again.
func (s *Server) load() (*loaded, error) {
	files, err := s.readAll()
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		cfg, err := s.build(files)
		if err == nil {
			return &loaded{config: cfg, files: files}, nil
		}
		if attempt == loadAttempts {
			return nil, err
		}
		again, readErr := s.readAll()
		if readErr != nil || again.equal(files) {
			return nil, err // what is on disk now is what failed (a read error waits for the next event)
		}
		files = again // they changed under the last read: build what is there now
	}
}

func (s *Server) readAll() (contents, error) {
	c := s.opts.Config
	var files contents
	var err error
	if files.cert, err = s.read("cert_file", c.CertFile); err != nil {
		return contents{}, err
	}
	if files.key, err = s.read("key_file", c.KeyFile); err != nil {
		return contents{}, err
	}
	if files.ca, err = s.read("client_ca_file", c.ClientCAFile); err != nil {
		return contents{}, err
	}
	return files, nil
}

// afterRead, where a test sets it, runs after each file is read: the moment a rotation may
// land between two files.
var afterRead atomic.Pointer[func(field string)]

func (s *Server) read(field, path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if hook := afterRead.Load(); hook != nil {
		(*hook)(field)
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		err = pathErr.Err // the path is in the message already
	}
	if err != nil {
		return nil, s.fileError(field, path, err)
	}
	return data, nil
}

func (s *Server) fileError(field, path string, err error) error {
	return &FileError{Key: s.opts.Key + "." + field, Path: path, Err: err}
}

func (s *Server) build(files contents) (*tls.Config, error) {
	c := s.opts.Config
	if _, err := certificates(files.cert); err != nil {
		return nil, s.fileError("cert_file", c.CertFile, err)
	}
	pair, err := tls.X509KeyPair(files.cert, files.key)
	if err != nil {
		// Also a key that is not the certificate's: a rotation seen between its two files.
		return nil, s.fileError("key_file", c.KeyFile, fmt.Errorf("%v (certificate %s)", err, c.CertFile))
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   s.auth,
		NextProtos:   s.opts.NextProtos,
	}
	if c.ClientCAFile != "" {
		cas, err := certificates(files.ca)
		if err != nil {
			return nil, s.fileError("client_ca_file", c.ClientCAFile, err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		for _, ca := range cas {
			cfg.ClientCAs.AddCert(ca)
		}
	}
	return cfg, nil
}

// certificates parses every PEM certificate in data. Unlike x509.CertPool.AppendCertsFromPEM,
// which skips what it cannot parse, it refuses a file with a broken or cut-short block: a CA
// bundle caught half written must not silently lose CAs.
func certificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %s, not a CERTIFICATE", len(out)+1, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(out)+1, err)
		}
		out = append(out, cert)
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, fmt.Errorf("PEM block %d is cut short or malformed (a file being written?)", len(out)+1)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return out, nil
}
