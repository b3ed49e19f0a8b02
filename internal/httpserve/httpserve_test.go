package httpserve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/internal/testenv"
)

// guard ends when a test stops waiting for what the server must do and
// reports that the server never did it (instead of hanging): at
// testenv.AwaitDeadline, never after a guess of the machine's speed.
func guard(t *testing.T) <-chan struct{} {
	ctx, cancel := testenv.AwaitContext(t)
	t.Cleanup(cancel)
	return ctx.Done()
}

// serve starts New(h, o) on a loopback port and returns its address.
func serve(t *testing.T, h http.Handler, o Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(h, o)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// post sends a POST with a body and returns the status.
func post(addr, body string) (int, error) {
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// startSlowPost opens a connection and sends a POST's headers with a
// Content-Length of 100 and only the first 10 bytes of its body.
func startSlowPost(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	return c
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	srv := New(http.NotFoundHandler(), Options{})
	for _, c := range []struct {
		name string
		got  time.Duration
	}{{"ReadHeaderTimeout", srv.ReadHeaderTimeout}, {"ReadTimeout", srv.ReadTimeout}, {"WriteTimeout", srv.WriteTimeout}, {"IdleTimeout", srv.IdleTimeout}} {
		if c.got <= 0 {
			t.Errorf("%s is %v: unbounded", c.name, c.got)
		}
	}
	if srv.ReadTimeout > 10*time.Second || srv.WriteTimeout < srv.ReadTimeout {
		t.Errorf("read %v, write %v: want a read within GitHub's 10 s and a write no shorter", srv.ReadTimeout, srv.WriteTimeout)
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes >= http.DefaultMaxHeaderBytes {
		t.Errorf("MaxHeaderBytes %d", srv.MaxHeaderBytes)
	}
}

// TestSlowBodyCutOff: a client that sends part of its body and stops is
// cut off by the read timeout; the handler's read fails.
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}), Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: time.Minute, IdleTimeout: time.Minute})
	startSlowPost(t, addr)
	select {
	case err := <-readErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("the handler's read ended with %v, want a timeout", err)
		}
	case <-guard(t):
		t.Fatal("a body that stopped arriving was never cut off")
	}
}

// TestIdleConnectionClosed: a kept-alive connection with no next request
// is closed by the idle timeout, not kept as long as the read timeout.
func TestIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
		Options{ReadTimeout: time.Hour, WriteTimeout: time.Hour, IdleTimeout: 100 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if deadline, ok := testenv.AwaitDeadline(t); ok {
		_ = c.SetReadDeadline(deadline)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the idle connection: %v, want the server to close it (EOF)", err)
	}
}

// TestBodiesBounded: with two bodies being read, a third request is
// refused with 503 and Retry-After; once one ends, the next is served.
func TestBodiesBounded(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 4)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		_, _ = io.ReadAll(r.Body)
	}), Options{Bodies: 2, BodyWait: -1, ReadTimeout: time.Hour, WriteTimeout: time.Hour})
	slow := []net.Conn{startSlowPost(t, addr), startSlowPost(t, addr)}
	<-started
	<-started
	resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third body while two are read: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// The first slow client sends the rest of its body: its slot frees.
	fmt.Fprint(slow[0], strings.Repeat("x", 90))
	if _, err := http.ReadResponse(bufio.NewReader(slow[0]), nil); err != nil {
		t.Fatal(err)
	}
	if code, err := post(addr, "x"); err != nil || code != http.StatusOK {
		t.Errorf("after a slot freed: %d %v, want 200", code, err)
	}
}

// TestOverBoundWaits: a request over the bound waits for a slot and is
// served when one frees.
func TestOverBoundWaits(t *testing.T) {
	t.Parallel()
	release, inFirst, waiting := make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	first := true
	o := Options{Bodies: 1, BodyWait: time.Hour, waiting: func() { waiting <- struct{}{} }}
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if first { // one request at a time runs here: Bodies is 1
			first = false
			close(inFirst)
			<-release
		}
	}), o)
	done := make(chan int, 2)
	go func() { code, _ := post(addr, "a"); done <- code }()
	<-inFirst
	go func() { code, _ := post(addr, "b"); done <- code }()
	select {
	case <-waiting:
	case code := <-done:
		t.Fatalf("a request finished (%d) while the only slot was held", code)
	case <-guard(t):
		t.Fatal("the second request never waited for the slot")
	}
	close(release)
	for range 2 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("status %d, want 200 for both", code)
		}
	}
}

// TestMaxBodyBytes: a body over MaxBodyBytes reads as *http.MaxBytesError.
func TestMaxBodyBytes(t *testing.T) {
	t.Parallel()
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tooLarge *http.MaxBytesError
		if _, err := io.ReadAll(r.Body); errors.As(err, &tooLarge) {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		}
	}), Options{MaxBodyBytes: 8})
	for _, c := range []struct {
		name, body string
		want       int
	}{{"under", "12345678", http.StatusOK}, {"over", "123456789", http.StatusRequestEntityTooLarge}} {
		if code, err := post(addr, c.body); err != nil || code != c.want {
			t.Errorf("%s the limit: %d %v, want %d", c.name, code, err, c.want)
		}
	}
}
