// Package httpserve builds skiff's HTTP servers (the webhook of `skiff
// local`, the page of `skiff setup`) with timeouts on every phase of a
// connection and a bound on the request bodies read at once.
//
// A client that trickles its headers or its body, or that keeps an idle
// connection open, holds a goroutine and a socket; one that sends many
// bodies at once holds up to the handler's body limit each. The timeouts
// end the first; Bodies bounds the second. A request over the bound waits
// for a slot up to BodyWait, then is answered 503 with Retry-After: GitHub
// records a failed delivery, which skiff's reconciler redelivers.
package httpserve

import (
	"net/http"
	"strconv"
	"time"
)

// Defaults of Options. GitHub gives up on a delivery not answered within
// 10 s, so no phase of a webhook request is worth more than that.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers: a few
	// hundred bytes, which any client sends at once.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading the whole request, body included:
	// GitHub's 10 s answer limit, since a body still arriving after it is
	// for a delivery GitHub already counts as failed.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds the request from its headers to the end
	// of its answer (body read, handling, reply): the read's 10 s plus
	// 5 s for the handler's store write and the reply, so that a handler
	// that has done its work can still say so.
	DefaultWriteTimeout = 15 * time.Second
	// DefaultIdleTimeout closes a kept-alive connection with no request:
	// long enough for a client sending a burst to reuse its connection,
	// short enough that idle sockets do not pile up.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxHeaderBytes: GitHub's headers are under 2 KB; 64 KiB
	// leaves room for proxies' additions, well under net/http's 1 MiB.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultBodies is how many request bodies are read at once. A
	// webhook delivery is handled in milliseconds (one store write), so 32
	// at once serve bursts of hundreds per second; at the webhook's body
	// limit (1 MiB) they hold at most 32 MiB, well inside the 512 MiB the
	// Kubernetes manifest gives skiff.
	DefaultBodies = 32
	// DefaultBodyWait is how long a request waits for a body slot before
	// its 503: half of GitHub's 10 s, leaving the other half to read and
	// handle it once it has a slot.
	DefaultBodyWait = 5 * time.Second
)

// Options configures a server. Zero fields take the defaults.
type Options struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
	// Bodies bounds the requests whose bodies are read at once.
	Bodies int
	// BodyWait is how long a request over Bodies waits for a slot; a
	// negative value refuses it at once.
	BodyWait time.Duration
	// MaxBodyBytes, when positive, cuts every body at that size (the
	// handler then reads an *http.MaxBytesError); zero leaves the limit to
	// the handler.
	MaxBodyBytes int64
	// waiting, when set, is called as a request starts to wait for a slot
	// (tests).
	waiting func()
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&o.ReadTimeout, DefaultReadTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.BodyWait, DefaultBodyWait)
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.Bodies <= 0 {
		o.Bodies = DefaultBodies
	}
	return o
}

// New returns a server for h with o's timeouts and body bound.
func New(h http.Handler, o Options) *http.Server {
	o = o.withDefaults()
	return &http.Server{
		Handler:           Limit(h, o),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
	}
}

// Limit wraps h so that at most o.Bodies requests run at once (a request
// is read by its handler, so this bounds the bodies read at once); one
// over the bound waits up to o.BodyWait, then gets 503. New applies it.
func Limit(h http.Handler, o Options) http.Handler {
	o = o.withDefaults()
	slots := make(chan struct{}, o.Bodies)
	retry := strconv.Itoa(int((o.BodyWait + time.Second - 1) / time.Second))
	if o.BodyWait < 0 {
		retry = "1"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
		default:
			if !wait(slots, o, r) {
				w.Header().Set("Retry-After", retry)
				http.Error(w, "busy: too many requests at once", http.StatusServiceUnavailable)
				return
			}
		}
		defer func() { <-slots }()
		if o.MaxBodyBytes > 0 {
			r.Body = http.MaxBytesReader(w, r.Body, o.MaxBodyBytes)
		}
		h.ServeHTTP(w, r)
	})
}

// wait waits up to o.BodyWait for a slot; false when none came or the
// client went away.
func wait(slots chan struct{}, o Options, r *http.Request) bool {
	if o.BodyWait < 0 {
		return false
	}
	if o.waiting != nil {
		o.waiting()
	}
	t := time.NewTimer(o.BodyWait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-r.Context().Done():
		return false
	}
}
