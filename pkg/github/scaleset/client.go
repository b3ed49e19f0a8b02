// Package scaleset is skiff's client of GitHub's runner scale sets: the
// protocol through which a listener takes its jobs by long-polling GitHub,
// outbound HTTPS only, with no webhook to receive.
//
// The calls, in the order a listener makes them:
//
//	registration token (REST, cached an hour by pkg/github)
//	  └─► POST {api}/actions/runner-registration  Authorization: RemoteAuth <token>
//	        → the Actions service URL and its admin token (a JWT; refreshed
//	          a minute before its exp, and at once after a 401)
//	runner group by name ─► scale set get / create / update / delete
//	session create (409: another client holds one) ─► long poll of the
//	  message queue (200 a message, 202 nothing new, 401: refresh the
//	  session and poll again) ─► acquirejobs ─► generatejitconfig per
//	  runner ─► DELETE of each message once handled ─► session delete
//
// Every Actions service call carries api-version=6.0-preview. The package
// knows nothing of pools or queues: package listener drives it.
package scaleset

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skiffci/skiff/pkg/github"
)

// Errors a caller picks its course by (errors.Is).
var (
	// ErrConflict: the scale set already has an active session (or the
	// name is taken): HTTP 409.
	ErrConflict = errors.New("scaleset: conflict")
	// ErrNotFound: no such scale set, session or runner group.
	ErrNotFound = errors.New("scaleset: not found")
	// ErrTokenExpired: the session's queue token (or the admin token) has
	// expired: HTTP 401.
	ErrTokenExpired = errors.New("scaleset: token expired")
	// ErrMalformed: a message the client cannot parse (MalformedError
	// carries its id, so that it can be acknowledged and skipped).
	ErrMalformed = errors.New("scaleset: malformed message")
)

// apiVersion is the Actions service's API version the scale-set calls use.
const apiVersion = "6.0-preview"

// adminMargin is how long before the admin token's exp it is refreshed:
// a call in flight never carries a token that expires under it.
const adminMargin = time.Minute

// Registrar mints registration tokens; *github.Client implements it (and
// caches the token for most of its hour).
type Registrar interface {
	RegistrationToken(ctx context.Context, inst int64, scope github.Scope) (github.RegistrationToken, error)
}

var _ Registrar = (*github.Client)(nil)

// Options configure a Client. All but HTTP, Now and Logger are required.
type Options struct {
	// APIURL is GitHub's REST root (https://api.github.com, or
	// https://HOST/api/v3 on GHES); WebURL its web root (https://github.com),
	// which the registration names the organization under.
	APIURL, WebURL string
	// Org is the organization whose runner groups hold the scale sets, and
	// Installation the App's installation on it.
	Org          string
	Installation int64
	Registrar    Registrar
	// HTTP sends every request (default: a client without a timeout; each
	// call has its own through its context, and a long poll lasts up to
	// about 50 s).
	HTTP   *http.Client
	Now    func() time.Time
	Logger *slog.Logger
}

// Client is a scale-set client for one organization. Safe for concurrent use.
type Client struct {
	o  Options
	mu sync.Mutex
	// The admin connection: the Actions service URL and its token.
	serviceURL string
	admin      string
	adminExp   time.Time
}

// New returns a client; nothing is called until the first request.
func New(o Options) (*Client, error) {
	switch {
	case o.APIURL == "" || o.WebURL == "":
		return nil, errors.New("scaleset: APIURL and WebURL are required")
	case o.Org == "":
		return nil, errors.New("scaleset: Org is required")
	case o.Registrar == nil:
		return nil, errors.New("scaleset: Registrar is required")
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.APIURL, o.WebURL = strings.TrimRight(o.APIURL, "/"), strings.TrimRight(o.WebURL, "/")
	return &Client{o: o}, nil
}

// Org is the client's organization.
func (c *Client) Org() string { return c.o.Org }

// connection returns the Actions service URL and admin token, registering
// again when the token is within adminMargin of its exp (or force).
func (c *Client) connection(ctx context.Context, force bool) (string, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !force && c.admin != "" && c.o.Now().Before(c.adminExp.Add(-adminMargin)) {
		return c.serviceURL, c.admin, nil
	}
	tok, err := c.o.Registrar.RegistrationToken(ctx, c.o.Installation, github.OrgScope(c.o.Org))
	if err != nil {
		return "", "", fmt.Errorf("registering with the Actions service: %w", err)
	}
	body, _ := json.Marshal(map[string]string{"url": c.o.WebURL + "/" + c.o.Org, "runner_event": "register"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.o.APIURL+"/actions/runner-registration", bytes.NewReader(body))
	if err != nil {
		return "", "", fmt.Errorf("registering with the Actions service: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "RemoteAuth "+tok.Token.Reveal())
	var out struct {
		URL   string `json:"url"`
		Token string `json:"token"`
	}
	if err := c.send(req, http.StatusOK, &out); err != nil {
		return "", "", fmt.Errorf("registering with the Actions service: %w", err)
	}
	if out.URL == "" || out.Token == "" {
		return "", "", errors.New("registering with the Actions service: the answer has no URL or token")
	}
	exp, err := tokenExpiry(out.Token)
	if err != nil {
		return "", "", fmt.Errorf("registering with the Actions service: %w", err)
	}
	c.serviceURL, c.admin, c.adminExp = out.URL, out.Token, exp
	return c.serviceURL, c.admin, nil
}

// tokenExpiry reads a JWT's exp claim without verifying it (the client
// only needs to know when to refresh).
func tokenExpiry(jwt string) (time.Time, error) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("reading the admin token's expiry: not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, errors.New("reading the admin token's expiry: claims not base64url")
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil || claims.Exp == 0 {
		return time.Time{}, errors.New("reading the admin token's expiry: no exp claim")
	}
	return time.Unix(claims.Exp, 0), nil
}

// service makes one Actions service call with the admin token, and after
// a 401 registers again and makes it once more.
func (c *Client) service(ctx context.Context, method, path string, query url.Values, in any, want int, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		base, tok, err := c.connection(ctx, attempt > 0)
		if err != nil {
			return err
		}
		u, err := url.JoinPath(base, path)
		if err != nil {
			return err
		}
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("api-version", apiVersion)
		req, err := http.NewRequestWithContext(ctx, method, u+"?"+q.Encode(), bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		err = c.send(req, want, out)
		if errors.Is(err, ErrTokenExpired) && attempt == 0 {
			continue
		}
		return err
	}
}

// send makes req and decodes a want answer into out (when not nil);
// another status is an error classified by its status.
func (c *Client) send(req *http.Request, want int, out any) error {
	resp, err := c.o.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, redactURL(req.URL), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", req.Method, redactURL(req.URL), err)
	}
	if resp.StatusCode != want {
		return statusError(req, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", req.Method, redactURL(req.URL), err)
	}
	return nil
}

// redactURL is a request's URL without its query (no token is ever in one,
// but a path is all a log needs).
func redactURL(u *url.URL) string { return u.Scheme + "://" + u.Host + u.Path }

// statusError classifies an unexpected answer.
func statusError(req *http.Request, status int, body []byte) error {
	var ex struct {
		TypeName string `json:"typeName"`
		Message  string `json:"message"`
	}
	_ = json.Unmarshal(body, &ex)
	msg := ex.Message
	if len(msg) > 200 {
		msg = msg[:200]
	}
	var kind error
	switch status {
	case http.StatusUnauthorized:
		kind = ErrTokenExpired
	case http.StatusConflict:
		kind = ErrConflict
	case http.StatusNotFound:
		kind = ErrNotFound
	default:
		kind = errors.New("unexpected status")
	}
	return fmt.Errorf("%s %s: %d %s: %w", req.Method, redactURL(req.URL), status, msg, kind)
}

// RunnerGroup is a runner group as the Actions service names it.
type RunnerGroup struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	IsDefault bool   `json:"isDefaultGroup"`
}

// RunnerGroupByName finds the organization's runner group name.
func (c *Client) RunnerGroupByName(ctx context.Context, name string) (RunnerGroup, error) {
	var out struct {
		Count int           `json:"count"`
		Value []RunnerGroup `json:"value"`
	}
	if err := c.service(ctx, http.MethodGet, "_apis/runtime/runnergroups/", url.Values{"groupName": {name}}, nil, http.StatusOK, &out); err != nil {
		return RunnerGroup{}, fmt.Errorf("finding runner group %s: %w", name, err)
	}
	for _, g := range out.Value {
		if strings.EqualFold(g.Name, name) {
			return g, nil
		}
	}
	return RunnerGroup{}, fmt.Errorf("finding runner group %s: %w", name, ErrNotFound)
}

// Label is a scale set's label.
type Label struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// ScaleSet is a runner scale set.
type ScaleSet struct {
	ID            int64       `json:"id,omitempty"`
	Name          string      `json:"name,omitempty"`
	RunnerGroupID int64       `json:"runnerGroupId,omitempty"`
	Labels        []Label     `json:"labels,omitempty"`
	Statistics    *Statistics `json:"statistics,omitempty"`
}

// LabelNames are the scale set's label names.
func (s ScaleSet) LabelNames() []string {
	out := make([]string, len(s.Labels))
	for i, l := range s.Labels {
		out[i] = l.Name
	}
	return out
}

// Statistics are a scale set's counts. TotalAssignedJobs (acquired,
// waiting for a runner or running) is how many runners it needs: a
// message carries at most 50 job messages and a job may be reassigned,
// so counting messages is no substitute.
type Statistics struct {
	TotalAvailableJobs     int `json:"totalAvailableJobs"`
	TotalAcquiredJobs      int `json:"totalAcquiredJobs"`
	TotalAssignedJobs      int `json:"totalAssignedJobs"`
	TotalRunningJobs       int `json:"totalRunningJobs"`
	TotalRegisteredRunners int `json:"totalRegisteredRunners"`
	TotalBusyRunners       int `json:"totalBusyRunners"`
	TotalIdleRunners       int `json:"totalIdleRunners"`
}

func systemLabels(names []string) []Label {
	out := make([]Label, len(names))
	for i, n := range names {
		out[i] = Label{Type: "System", Name: n}
	}
	return out
}

// ScaleSet returns the scale set name in group, or ErrNotFound.
func (c *Client) ScaleSet(ctx context.Context, group int64, name string) (ScaleSet, error) {
	var out struct {
		Count int        `json:"count"`
		Value []ScaleSet `json:"value"`
	}
	q := url.Values{"runnerGroupId": {strconv.FormatInt(group, 10)}, "name": {name}}
	if err := c.service(ctx, http.MethodGet, "_apis/runtime/runnerscalesets", q, nil, http.StatusOK, &out); err != nil {
		return ScaleSet{}, fmt.Errorf("finding scale set %s: %w", name, err)
	}
	switch len(out.Value) {
	case 0:
		return ScaleSet{}, fmt.Errorf("finding scale set %s: %w", name, ErrNotFound)
	case 1:
		return out.Value[0], nil
	}
	return ScaleSet{}, fmt.Errorf("finding scale set %s: %d scale sets have that name", name, len(out.Value))
}

// CreateScaleSet creates a scale set named name in group, with labels.
func (c *Client) CreateScaleSet(ctx context.Context, group int64, name string, labels []string) (ScaleSet, error) {
	var out ScaleSet
	in := ScaleSet{Name: name, RunnerGroupID: group, Labels: systemLabels(labels)}
	if err := c.service(ctx, http.MethodPost, "_apis/runtime/runnerscalesets", nil, in, http.StatusOK, &out); err != nil {
		return ScaleSet{}, fmt.Errorf("creating scale set %s: %w", name, err)
	}
	return out, nil
}

// UpdateScaleSet sets scale set id's name, group and labels.
func (c *Client) UpdateScaleSet(ctx context.Context, id, group int64, name string, labels []string) (ScaleSet, error) {
	var out ScaleSet
	in := ScaleSet{Name: name, RunnerGroupID: group, Labels: systemLabels(labels)}
	if err := c.service(ctx, http.MethodPatch, "_apis/runtime/runnerscalesets/"+strconv.FormatInt(id, 10), nil, in, http.StatusOK, &out); err != nil {
		return ScaleSet{}, fmt.Errorf("updating scale set %s: %w", name, err)
	}
	return out, nil
}

// DeleteScaleSet deletes scale set id; one already gone is not an error.
func (c *Client) DeleteScaleSet(ctx context.Context, id int64) error {
	err := c.service(ctx, http.MethodDelete, "_apis/runtime/runnerscalesets/"+strconv.FormatInt(id, 10), nil, nil, http.StatusNoContent, nil)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("deleting scale set %d: %w", id, err)
	}
	return nil
}

// JITConfig is a runner's just-in-time configuration from its scale set.
type JITConfig struct {
	RunnerID   int64
	RunnerName string
	// Encoded is the configuration run.sh --jitconfig takes: a secret.
	Encoded github.Secret
}

// GenerateJITConfig registers a runner named name in scale set id.
func (c *Client) GenerateJITConfig(ctx context.Context, id int64, name string) (JITConfig, error) {
	var out struct {
		Runner struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		} `json:"runner"`
		Encoded string `json:"encodedJITConfig"`
	}
	in := map[string]string{"name": name, "workFolder": "_work"}
	path := "_apis/runtime/runnerscalesets/" + strconv.FormatInt(id, 10) + "/generatejitconfig"
	if err := c.service(ctx, http.MethodPost, path, nil, in, http.StatusOK, &out); err != nil {
		return JITConfig{}, fmt.Errorf("generating the JIT configuration of %s: %w", name, err)
	}
	if out.Encoded == "" || out.Runner.ID == 0 {
		return JITConfig{}, fmt.Errorf("generating the JIT configuration of %s: the answer has no runner or configuration", name)
	}
	return JITConfig{RunnerID: out.Runner.ID, RunnerName: out.Runner.Name, Encoded: github.Secret(out.Encoded)}, nil
}
