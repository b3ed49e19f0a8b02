package testenv

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The credentials and region AWSConfig gives every client; the SigV4
// verifier expects them.
const (
	TestAccessKeyID     = "skiff-test-key"
	TestSecretAccessKey = "skiff-test-secret"
	TestRegion          = "us-east-1"
)

// SigV4Want is what a verified request must have been signed with.
type SigV4Want struct {
	AccessKeyID, SecretAccessKey string
	Region, Service              string
	// Now is the verifier's clock; a signature more than 15 minutes away
	// from it is refused, as AWS refuses it. Zero: time.Now.
	Now time.Time
}

// sigV4Unsigned are the headers a request may carry unsigned: those the
// SigV4 signing process leaves out by definition (the signature itself,
// the user agent, tracing), and those Go's HTTP transport adds after the
// request is signed.
var sigV4Unsigned = map[string]bool{
	"authorization": true, "user-agent": true, "x-amzn-trace-id": true, "expect": true,
	"transfer-encoding": true, "content-length": true, "x-forwarded-for": true,
}

// VerifySigV4 checks the Signature Version 4 signature of a received
// request as AWS does, computing it independently of the SDK's signer
// (the documented algorithm, over crypto/hmac and crypto/sha256): the
// credential scope names want's key, region and service and the
// X-Amz-Date's day; every header the request carries is signed (but the
// ones SigV4 leaves out, and an Accept-Encoding: gzip Go's transport adds
// after signing), and so are Host and X-Amz-Date; the signature over the
// canonical request, body included, is the one want's secret gives.
func VerifySigV4(r *http.Request, body []byte, want SigV4Want) error {
	auth, err := parseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	date := r.Header.Get("X-Amz-Date")
	now := want.Now
	if now.IsZero() {
		now = time.Now()
	}
	if err := checkSignedAt(date, now); err != nil {
		return err
	}
	if err := auth.checkScope(date, want); err != nil {
		return err
	}
	if err := auth.checkSignedHeaders(r.Header); err != nil {
		return err
	}
	canon, err := canonicalRequest(r, body, auth)
	if err != nil {
		return err
	}
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + strings.Join(auth.scope[1:], "/") + "\n" + hexSHA256([]byte(canon))
	key := []byte("AWS4" + want.SecretAccessKey)
	for _, part := range auth.scope[1:] {
		key = hmacSHA256(key, part)
	}
	sig := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(sig), []byte(auth.signature)) {
		return fmt.Errorf("signature %s, want %s; canonical request:\n%s", auth.signature, sig, canon)
	}
	return nil
}

// sigV4Auth is an Authorization header's parts.
type sigV4Auth struct {
	scope         []string // key/date/region/service/aws4_request
	signedHeaders string   // as written: lower-case, ;-separated
	signed        []string // signedHeaders split
	signature     string
}

// parseAuthorization reads an AWS4-HMAC-SHA256 Authorization header.
func parseAuthorization(auth string) (sigV4Auth, error) {
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return sigV4Auth{}, fmt.Errorf("authorization %q is not AWS4-HMAC-SHA256", auth)
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 {
		return sigV4Auth{}, fmt.Errorf("credential %q is not key/date/region/service/aws4_request", fields["Credential"])
	}
	return sigV4Auth{scope: scope, signedHeaders: fields["SignedHeaders"],
		signed: strings.Split(fields["SignedHeaders"], ";"), signature: fields["Signature"]}, nil
}

// checkSignedAt refuses an X-Amz-Date more than 15 minutes from now.
func checkSignedAt(date string, now time.Time) error {
	signedAt, err := time.Parse("20060102T150405Z", date)
	if err != nil {
		return fmt.Errorf("X-Amz-Date %q: %w", date, err)
	}
	if d := now.Sub(signedAt); d > 15*time.Minute || d < -15*time.Minute {
		return fmt.Errorf("signed at %s, %s away from now", signedAt, d)
	}
	return nil
}

// checkScope refuses a credential of another key, day, region or service.
func (a sigV4Auth) checkScope(date string, want SigV4Want) error {
	scope := a.scope
	switch {
	case scope[0] != want.AccessKeyID:
		return fmt.Errorf("signed with key %q, want %q", scope[0], want.AccessKeyID)
	case scope[1] != date[:8]:
		return fmt.Errorf("credential scope day %s is not X-Amz-Date's %s", scope[1], date[:8])
	case scope[2] != want.Region || scope[3] != want.Service || scope[4] != "aws4_request":
		return fmt.Errorf("credential scope %s/%s/%s, want %s/%s/aws4_request", scope[2], scope[3], scope[4], want.Region, want.Service)
	}
	return nil
}

// checkSignedHeaders refuses a signed-header list that is unsorted, leaves
// out host or x-amz-date, or leaves out a header that is sent (but those
// the SDK leaves unsigned).
func (a sigV4Auth) checkSignedHeaders(h http.Header) error {
	if !slices.IsSorted(a.signed) {
		return fmt.Errorf("signed headers %q are not sorted", a.signedHeaders)
	}
	for _, must := range []string{"host", "x-amz-date"} {
		if !slices.Contains(a.signed, must) {
			return fmt.Errorf("%s is not signed (signed: %s)", must, a.signedHeaders)
		}
	}
	for k, v := range h {
		lk := strings.ToLower(k)
		if sigV4Unsigned[lk] || lk == "accept-encoding" && len(v) == 1 && v[0] == "gzip" {
			continue
		}
		if !slices.Contains(a.signed, lk) {
			return fmt.Errorf("header %s is sent but not signed (signed: %s)", k, a.signedHeaders)
		}
	}
	return nil
}

// canonicalRequest is the request as Signature Version 4 hashes it.
func canonicalRequest(r *http.Request, body []byte, a sigV4Auth) (string, error) {
	var canon strings.Builder
	canon.WriteString(r.Method + "\n")
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	canon.WriteString(path + "\n")
	canon.WriteString(canonicalQuery(r.URL.Query()) + "\n")
	for _, h := range a.signed {
		var vals []string
		switch h {
		case "host":
			vals = []string{r.Host}
		case "content-length":
			vals = []string{strconv.FormatInt(r.ContentLength, 10)}
		default:
			vals = r.Header.Values(h)
			if len(vals) == 0 {
				return "", fmt.Errorf("signed header %s is not sent", h)
			}
		}
		for i, v := range vals {
			vals[i] = strings.Join(strings.Fields(v), " ")
		}
		canon.WriteString(h + ":" + strings.Join(vals, ",") + "\n")
	}
	canon.WriteString("\n" + a.signedHeaders + "\n")
	canon.WriteString(hexSHA256(body))
	return canon.String(), nil
}

func canonicalQuery(q url.Values) string {
	var parts []string
	for k, vs := range q {
		for _, v := range vs {
			parts = append(parts, sigV4Escape(k)+"="+sigV4Escape(v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}

// sigV4Escape percent-encodes everything but the unreserved characters.
func sigV4Escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func hexSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// SigV4Proxy starts, for t, a reverse proxy to an emulator's endpoint that
// lets through only requests signed as AWS requires (VerifySigV4, with
// AWSConfig's credentials and region, the service named by X-Amz-Target).
// The emulators skiff tests against do not check signatures; behind the
// proxy, a request that AWS would refuse fails the test (t.Errorf) and is
// answered 403 InvalidSignatureException. It returns the proxy's endpoint
// and the count of the requests it let through, by operation.
func SigV4Proxy(t testing.TB, target string) (endpoint string, verified *OpCount) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("emulator endpoint %q: %v", target, err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	verified = &OpCount{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = VerifySigV4(r, body, SigV4Want{
				AccessKeyID: TestAccessKeyID, SecretAccessKey: TestSecretAccessKey,
				Region: TestRegion, Service: serviceOf(r.Header.Get("X-Amz-Target")),
			})
		}
		if err != nil {
			t.Errorf("a request AWS would refuse (%s %s): %v", r.Header.Get("X-Amz-Target"), r.URL, err)
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusForbidden)
			_, _ = fmt.Fprintf(w, `{"__type":"com.amazon.coral.service#InvalidSignatureException","message":%q}`, "signature refused by the test proxy")
			return
		}
		_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		verified.add(op)
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, verified
}

// OpCount counts requests by operation (SendMessage, UpdateItem, ...). It
// is safe for concurrent use.
type OpCount struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *OpCount) add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = map[string]int{}
	}
	c.ops[op]++
}

// Take returns the counts since the last Take, and starts again from zero.
func (c *OpCount) Take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = nil
	return out
}

// serviceOf is the SigV4 service name of an AWS JSON request's target.
func serviceOf(target string) string {
	switch {
	case strings.HasPrefix(target, "DynamoDB_"):
		return "dynamodb"
	case strings.HasPrefix(target, "AmazonSQS."):
		return "sqs"
	}
	return "unknown service " + target
}
