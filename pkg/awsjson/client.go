// Package awsjson sends the few AWS JSON 1.0 requests on the webhook's hot
// path — SQS SendMessage and DynamoDB UpdateItem, PutItem and
// TransactWriteItems — as HTTP requests built by hand, instead of through the
// AWS SDK's per-call middleware stack. The SDK spends 50–70 µs of CPU on each
// of these calls on the development machine (building the stack, resolving
// the endpoint, serializing by schema, checksums, retry bookkeeping), most of
// what a webhook delivery cost; a hand-built request costs a fraction of it,
// most of that the signature.
//
// Only the request building and the response decoding are by hand. The rest
// is the SDK's own, taken from the SDK client it stands in for, so that it
// behaves as that client would:
//
//   - signing: the SDK's SigV4 signer (aws/signer/v4), with the client's
//     credentials provider (cached: aws.CredentialsCache);
//   - the endpoint: the client's endpoint resolver, asked once per container
//     (region, FIPS, dual-stack, AWS_ENDPOINT_URL_*, account-based DynamoDB
//     endpoints);
//   - the HTTP client: the client's;
//   - retries: the client's retryer (attempts, jittered backoff, the retry
//     token bucket, which errors are retryable: throttling, 5xx, connection
//     errors), stopping early when the context's deadline would pass
//     during a backoff;
//   - errors: the SDK's types, wrapped as the SDK wraps them
//     (smithy.OperationError → awshttp.ResponseError → the service's
//     exception type, e.g. *types.ConditionalCheckFailedException), so that
//     callers classify them with errors.As exactly as before.
//
// DynamoDB and SQS implement the SDK client's method signatures (the
// interfaces declared by pkg/store and pkg/queue), so the adapters and their
// conformance suites do not change. A request using a field the hand encoder
// does not write is sent by the SDK client instead, never silently dropped.
//
// What the SDK does that this package does not: clock-skew correction of the
// signing time after a skew error (Lambda's clock is kept by AWS), the
// SDK's metrics and tracing hooks, and its user-agent details.
package awsjson

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// contentType is the AWS JSON 1.0 protocol's, which SQS and DynamoDB speak.
const contentType = "application/x-amz-json-1.0"

// userAgent names the sender in CloudTrail and AWS support cases.
var userAgent = []string{"skiff-awsjson aws-sdk-go-v2/" + aws.SDKVersion}

// errorDecoder turns an error answer into the service's API error: code is
// the error's short code (ConditionalCheckFailedException), h and body the
// whole answer, for what some services and exceptions carry besides.
type errorDecoder func(code, message string, h http.Header, body []byte) error

// client sends one service's requests: sign, send, retry, check, decode
// errors. It is safe for concurrent use.
type client struct {
	serviceID   string // the SDK's ServiceID, in errors ("DynamoDB", "SQS")
	target      string // X-Amz-Target prefix, with its dot ("DynamoDB_20120810.")
	signingName string // SigV4 service name ("dynamodb", "sqs")
	region      string
	url         string
	http        aws.HTTPClient
	creds       aws.CredentialsProvider
	signer      *v4.Signer
	retryer     aws.RetryerV2
	headers     map[string][]string // fixed headers of every request (values shared, never modified)
	crc32       bool                // check X-Amz-Crc32 on answers (DynamoDB)
	decodeError errorDecoder
	now         func() time.Time
}

// clientConfig is what a client is built from: mostly the SDK client's
// resolved options.
type clientConfig struct {
	serviceID, target, signingName, region string
	endpoint                               url.URL
	http                                   aws.HTTPClient
	creds                                  aws.CredentialsProvider
	retryer                                aws.Retryer
	signer                                 *v4.Signer
	headers                                map[string]string
	crc32                                  bool
	decodeError                            errorDecoder
}

func newClient(c clientConfig) (*client, error) {
	if c.creds == nil {
		return nil, fmt.Errorf("%s: no credentials provider (anonymous requests are not supported)", c.serviceID)
	}
	if c.endpoint.Scheme != "http" && c.endpoint.Scheme != "https" || c.endpoint.Host == "" {
		return nil, fmt.Errorf("%s: endpoint %q is not an http(s) URL", c.serviceID, c.endpoint.String())
	}
	creds := c.creds
	if !aws.IsCredentialsProvider(creds, (*aws.CredentialsCache)(nil)) {
		creds = aws.NewCredentialsCache(creds)
	}
	if c.http == nil {
		c.http = awshttp.NewBuildableClient()
	}
	if c.retryer == nil {
		c.retryer = retry.NewStandard()
	}
	if c.signer == nil {
		c.signer = v4.NewSigner()
	}
	u := c.endpoint
	if u.Path == "" {
		u.Path = "/"
	}
	headers := map[string][]string{
		"Content-Type": {contentType},
		"User-Agent":   userAgent,
	}
	for k, v := range c.headers {
		headers[http.CanonicalHeaderKey(k)] = []string{v}
	}
	return &client{
		serviceID: c.serviceID, target: c.target, signingName: c.signingName, region: c.region,
		url: u.String(), http: c.http, creds: creds, signer: c.signer, retryer: retryerV2(c.retryer),
		headers: headers, crc32: c.crc32, decodeError: c.decodeError, now: time.Now,
	}, nil
}

// do sends the operation op with the JSON body, retrying as the retryer
// says, and returns the body of its 2xx answer. Errors are wrapped as the
// SDK wraps them: *smithy.OperationError around the attempt's error.
func (c *client) do(ctx context.Context, op string, body []byte) ([]byte, error) {
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	maxAttempts := c.retryer.MaxAttempts()
	releaseRetry := nopRelease
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, c.opError(op, &smithy.CanceledError{Err: err})
		}
		releaseAttempt, err := c.retryer.GetAttemptToken(ctx)
		if err != nil {
			return nil, c.opError(op, fmt.Errorf("failed to get retry Send token, %w", err))
		}
		out, err := c.attempt(ctx, op, body, payloadHash)
		_ = releaseRetry(err)
		_ = releaseAttempt(err)
		if err == nil {
			return out, nil
		}
		if !c.retryer.IsErrorRetryable(err) {
			return nil, c.opError(op, err)
		}
		if maxAttempts > 0 && attempt >= maxAttempts {
			return nil, c.opError(op, &retry.MaxAttemptsError{Attempt: attempt, Err: err})
		}
		var tokenErr error
		releaseRetry, tokenErr = c.retryer.GetRetryToken(ctx, err)
		if tokenErr != nil {
			return nil, c.opError(op, errors.Join(err, tokenErr))
		}
		delay, delayErr := c.retryer.RetryDelay(attempt, err)
		if delayErr != nil {
			return nil, c.opError(op, delayErr)
		}
		if deadline, ok := ctx.Deadline(); ok && c.now().Add(delay).After(deadline) {
			// The next attempt could not start before the caller gives up.
			return nil, c.opError(op, err)
		}
		if err := sleep(ctx, delay); err != nil {
			return nil, c.opError(op, &aws.RequestCanceledError{Err: err})
		}
	}
}

// attempt makes one signed request and reads its answer.
func (c *client) attempt(ctx context.Context, op string, body []byte, payloadHash string) ([]byte, error) {
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to retrieve credentials: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building %s request: %w", op, err)
	}
	h := make(http.Header, len(c.headers)+5)
	for k, v := range c.headers {
		h[k] = v
	}
	h["X-Amz-Target"] = []string{c.target + op}
	req.Header = h
	if err := c.signer.SignHTTP(ctx, creds, req, payloadHash, c.signingName, c.region, c.now().UTC()); err != nil {
		return nil, fmt.Errorf("signing %s request: %w", op, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		err = &smithyhttp.RequestSendError{Err: err}
		if ctx.Err() != nil {
			err = &smithy.CanceledError{Err: ctx.Err()}
		}
		return nil, err
	}
	out, err := readBody(resp)
	if err != nil {
		return nil, &smithy.DeserializationError{Err: fmt.Errorf("reading %s answer: %w", op, err)}
	}
	if c.crc32 {
		if err := checkCRC32(resp.Header, out); err != nil {
			return nil, &smithy.DeserializationError{Err: err}
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return out, nil
	}
	code, message := errorCode(resp.Header, out)
	apiErr := c.decodeError(code, message, resp.Header, out)
	return nil, &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: apiErr},
		RequestID:     resp.Header.Get("X-Amzn-Requestid"),
	}
}

func (c *client) opError(op string, err error) error {
	return &smithy.OperationError{ServiceID: c.serviceID, OperationName: op, Err: err}
}

// exchange sends one operation's encoded body (encErr: its encoding failed)
// and decodes the answer; an encoding or decoding error is wrapped as the
// SDK wraps its own, an error of the call comes back as do returned it.
func exchange[T any](ctx context.Context, c *client, op string, body []byte, encErr error, decode func([]byte) (T, error)) (T, error) {
	var zero T
	if encErr != nil {
		return zero, c.opError(op, encErr)
	}
	answer, err := c.do(ctx, op, body)
	if err != nil {
		return zero, err
	}
	out, err := decode(answer)
	if err != nil {
		return zero, c.opError(op, err)
	}
	return out, nil
}

// readBodyLimit bounds an answer read into memory. The hot path's answers
// are under 1 KiB; DynamoDB items are at most 400 KB, and a transaction's
// cancellation reasons carry at most 100 of them only when asked to.
const readBodyLimit = 64 << 20

func readBody(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	if n := resp.ContentLength; n >= 0 && n <= readBodyLimit {
		out := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, readBodyLimit+1))
	if err == nil && len(out) > readBodyLimit {
		err = fmt.Errorf("answer over %d bytes", readBodyLimit)
	}
	return out, err
}

// checkCRC32 checks DynamoDB's X-Amz-Crc32 header (the CRC-32 of the body
// as sent), when the answer carries one, as the SDK's DynamoDB client does.
func checkCRC32(h http.Header, body []byte) error {
	v := h.Get("X-Amz-Crc32")
	if v == "" {
		return nil
	}
	want, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return fmt.Errorf("unable to parse checksum header %v, %w", v, err)
	}
	if got := crc32.ChecksumIEEE(body); uint64(got) != want {
		return fmt.Errorf("response did not match expected checksum, %d, %d", want, got)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func nopRelease(error) error { return nil }

// retryerV2 adapts a retryer without GetAttemptToken, as the SDK does.
func retryerV2(r aws.Retryer) aws.RetryerV2 {
	if v, ok := r.(aws.RetryerV2); ok {
		return v
	}
	return legacyRetryer{r}
}

type legacyRetryer struct{ aws.Retryer }

func (r legacyRetryer) GetAttemptToken(context.Context) (func(error) error, error) {
	return r.GetInitialToken(), nil
}
