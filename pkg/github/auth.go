package github

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	gh "github.com/google/go-github/v62/github"
)

// Token lifetimes and margins.
const (
	// jwtBackdate protects against clock drift between us and GitHub
	// (GitHub's advice: iat 60 seconds in the past).
	jwtBackdate = 60 * time.Second
	// jwtLifetime is under GitHub's 10-minute maximum for exp, counted from now.
	jwtLifetime = 9 * time.Minute
	// jwtReuse is how long a signed JWT is reused before signing another,
	// leaving over a minute of validity for the slowest call.
	jwtReuse = 7 * time.Minute
	// tokenMargin: an installation or registration token (valid one hour) is
	// replaced this long before it expires, so no call starts with a token
	// about to lapse mid-request or mid-boot.
	tokenMargin = 5 * time.Minute
	// mintTimeout bounds a token mint shared by concurrent callers.
	mintTimeout = 30 * time.Second
	// discoveryTTL: how long the set of Apps installed on an account is trusted.
	discoveryTTL = time.Hour
	// discoveryRetry: how long a failed discovery is not tried again. Calls with an
	// installation id from a webhook go on with it meanwhile; without one they fail
	// fast with the discovery's error instead of each paying up to 4 requests and
	// seconds of backoff while GitHub is failing.
	discoveryRetry = time.Minute
)

// ParsePrivateKey parses a GitHub App private key in PEM form (PKCS#1
// "RSA PRIVATE KEY", as GitHub issues it, or PKCS#8). Its errors never
// contain key material.
func ParsePrivateKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("parsing private key: no PEM block found")
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, errors.New("parsing private key: malformed PKCS#1 RSA key")
		}
		return k, nil
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, errors.New("parsing private key: malformed PKCS#8 key")
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, errors.New("parsing private key: not an RSA key (GitHub Apps use RS256)")
		}
		return rk, nil
	default:
		return nil, fmt.Errorf("parsing private key: unexpected PEM block %q", block.Type)
	}
}

type appState struct {
	App
	mu     sync.Mutex
	jwt    string
	jwtExp time.Time
}

// token returns the App's JWT, signing a new one when the cached one is old.
func (a *appState) token(now time.Time) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.jwt != "" && now.Before(a.jwtExp.Add(-(jwtLifetime - jwtReuse))) {
		return a.jwt, nil
	}
	claims := jwt.RegisteredClaims{
		Issuer:    strconv.FormatInt(a.ID, 10),
		IssuedAt:  jwt.NewNumericDate(now.Add(-jwtBackdate)),
		ExpiresAt: jwt.NewNumericDate(now.Add(jwtLifetime)),
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(a.Key)
	if err != nil {
		return "", fmt.Errorf("signing App %d JWT: %w", a.ID, err)
	}
	a.jwt, a.jwtExp = s, now.Add(jwtLifetime)
	return s, nil
}

func (a *appState) drop() {
	a.mu.Lock()
	a.jwt = ""
	a.mu.Unlock()
}

// install is what the client knows about one installation. Its fields are
// guarded by Client.mu.
type install struct {
	id      int64
	app     *appState // nil until known (several Apps, id from a webhook)
	account string
	token   string
	expires time.Time
	rl      rateState
}

// account is the set of installations (one per App) on one owner.
type account struct {
	installs   []*install
	discovered time.Time
	err        error // the last discovery failed with err (installs then unknown)
}

// credential returns the Authorization bearer value for rq.
func (c *Client) credential(ctx context.Context, rq *call) (string, error) {
	if rq.auth == authApp {
		return rq.app.token(c.now())
	}
	return c.installationToken(ctx, rq.inst)
}

func (c *Client) dropCredential(rq *call) {
	if rq.auth == authApp {
		rq.app.drop()
		return
	}
	c.mu.Lock()
	rq.inst.token = ""
	c.mu.Unlock()
}

// installationToken returns a cached token for in, or mints one; concurrent
// callers for the same installation share one mint.
func (c *Client) installationToken(ctx context.Context, in *install) (string, error) {
	c.mu.Lock()
	if in.token != "" && c.now().Before(in.expires.Add(-tokenMargin)) {
		t := in.token
		c.mu.Unlock()
		return t, nil
	}
	c.mu.Unlock()
	v, err := shared(ctx, &c.flights, "token/"+strconv.FormatInt(in.id, 10), mintTimeout, func(ctx context.Context) (any, error) {
		c.mu.Lock()
		if in.token != "" && c.now().Before(in.expires.Add(-tokenMargin)) {
			t := in.token
			c.mu.Unlock()
			return t, nil // minted by a flight that just finished
		}
		apps := c.apps
		if in.app != nil {
			apps = []*appState{in.app}
		}
		c.mu.Unlock()
		var lastErr error
		for _, a := range apps {
			tok, exp, err := c.mint(ctx, a, in.id)
			if errors.Is(err, ErrNotFound) {
				lastErr = err
				continue // uninstalled, or it belongs to another App
			}
			if err != nil {
				return nil, err
			}
			c.mu.Lock()
			in.app, in.token, in.expires = a, tok, exp
			c.mu.Unlock()
			c.log.Debug("minted installation token", "installation_id", in.id, "app_id", a.ID, "expires_at", exp)
			return tok, nil
		}
		return nil, fmt.Errorf("minting token for installation %d: %w: %w", in.id, ErrNotInstalled, lastErr)
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

func (c *Client) mint(ctx context.Context, a *appState, id int64) (string, time.Time, error) {
	ctx, rq := asApp(ctx, "create_installation_token", a)
	// An empty object, not go-github's null for nil options: the endpoint's
	// body is an optional object (a token for every repository the
	// installation can reach, with all its permissions).
	t, _, err := c.gh.Apps.CreateInstallationToken(ctx, id, &gh.InstallationTokenOptions{})
	if err != nil {
		return "", time.Time{}, callError(rq, err)
	}
	if t.GetToken() == "" || t.GetExpiresAt().IsZero() {
		return "", time.Time{}, fmt.Errorf("github %s: answer has no token or no valid expires_at", rq.op)
	}
	return t.GetToken(), t.GetExpiresAt().Time, nil
}

// installFor picks the installation a call on owner (and repo) acts as.
// hint is the installation id from a webhook payload, 0 if unknown. With one
// App and a hint, no lookup is made. Otherwise the Apps installed on the
// account are discovered (once per hour) and the one with the most remaining
// budget is used.
func (c *Client) installFor(ctx context.Context, hint int64, owner, repo string) (*install, error) {
	if hint != 0 && len(c.apps) == 1 {
		return c.installRecord(hint, c.apps[0], owner), nil
	}
	acct, err := c.account(ctx, owner, repo)
	if err != nil && hint == 0 {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hint != 0 {
		in := c.installLocked(hint, nil, owner)
		if acct == nil {
			return in, nil // discovery failed: act as the hinted installation
		}
		found := false
		for _, x := range acct.installs {
			found = found || x == in
		}
		if !found {
			acct.installs = append(acct.installs, in)
		}
	}
	if acct == nil || len(acct.installs) == 0 {
		return nil, fmt.Errorf("finding installation for %s: %w", owner, ErrNotInstalled)
	}
	return c.pickLocked(acct.installs), nil
}

func (c *Client) installRecord(id int64, app *appState, owner string) *install {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.installLocked(id, app, owner)
}

func (c *Client) installLocked(id int64, app *appState, owner string) *install {
	in := c.installs[id]
	if in == nil {
		in = &install{id: id}
		c.installs[id] = in
	}
	if in.app == nil && app != nil {
		in.app = app
	}
	if in.account == "" {
		in.account = normalizeOwner(owner)
	}
	return in
}

// pickLocked returns the installation with the most remaining budget; ties go
// round-robin so that Apps with equal budgets share the load.
func (c *Client) pickLocked(ins []*install) *install {
	if len(ins) == 1 {
		return ins[0]
	}
	now := c.now()
	best, bestLeft := []*install{}, -1
	for _, in := range ins {
		left := in.rl.left(now)
		switch {
		case left > bestLeft:
			best, bestLeft = []*install{in}, left
		case left == bestLeft:
			best = append(best, in)
		}
	}
	c.rr++
	return best[int(c.rr%uint64(len(best)))]
}

// account returns the installations of every configured App on owner,
// discovering them with App JWT calls at most once per discoveryTTL.
func (c *Client) account(ctx context.Context, owner, repo string) (*account, error) {
	if owner == "" {
		return nil, errors.New("finding installation: no owner given")
	}
	key := normalizeOwner(owner)
	c.mu.Lock()
	a := c.accounts[key]
	switch {
	case a != nil && a.err != nil && c.now().Sub(a.discovered) < discoveryRetry:
		c.mu.Unlock()
		return nil, fmt.Errorf("finding installation for %s (as found %s ago): %w",
			owner, c.now().Sub(a.discovered).Round(time.Second), a.err)
	case a != nil && a.err == nil && c.now().Sub(a.discovered) < discoveryTTL:
		c.mu.Unlock()
		return a, nil
	}
	c.mu.Unlock()
	v, err := shared(ctx, &c.flights, "account/"+key+"/"+repo, mintTimeout, func(ctx context.Context) (any, error) {
		var found []Installation
		for _, app := range c.apps {
			inst, err := c.lookupInstallation(ctx, app, owner, repo)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				if ctx.Err() == nil { // a failure of GitHub's, not a cancelled flight
					c.mu.Lock()
					defer c.mu.Unlock()
					if old := c.accounts[key]; old != nil && old.err == nil {
						// Keep the stale but known installations a minute more.
						old.discovered = c.now().Add(discoveryRetry - discoveryTTL)
						return old, nil
					}
					c.accounts[key] = &account{discovered: c.now(), err: err}
				}
				return nil, err
			}
			found = append(found, inst)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		acct := &account{discovered: c.now()}
		for _, f := range found {
			acct.installs = append(acct.installs, c.installLocked(f.ID, c.appByID[f.AppID], owner))
		}
		if len(found) == 0 {
			// Remembered for discoveryRetry too: no App is installed there (yet).
			acct.err = ErrNotInstalled
		}
		c.accounts[key] = acct
		return acct, nil
	})
	if err != nil {
		return nil, fmt.Errorf("finding installation for %s: %w", owner, err)
	}
	return v.(*account), nil
}

// lookupInstallation asks GitHub, as app, for its installation on the
// organization owner, then on the repository owner/repo when given.
func (c *Client) lookupInstallation(ctx context.Context, app *appState, owner, repo string) (Installation, error) {
	inst, err := c.getInstallation(ctx, app, owner, "")
	if errors.Is(err, ErrNotFound) && repo != "" {
		inst, err = c.getInstallation(ctx, app, owner, repo)
	}
	return inst, err
}

// getInstallation is GET /orgs/{org}/installation (repo empty) or
// GET /repos/{owner}/{repo}/installation, as app.
func (c *Client) getInstallation(ctx context.Context, app *appState, owner, repo string) (Installation, error) {
	var (
		in  *gh.Installation
		err error
		rq  *call
	)
	if repo == "" {
		ctx, rq = asApp(ctx, "get_org_installation", app)
		in, _, err = c.gh.Apps.FindOrganizationInstallation(ctx, seg(owner))
	} else {
		ctx, rq = asApp(ctx, "get_repo_installation", app)
		in, _, err = c.gh.Apps.FindRepositoryInstallation(ctx, seg(owner), seg(repo))
	}
	if err != nil {
		return Installation{}, callError(rq, err)
	}
	out := Installation{ID: in.GetID(), AppID: in.GetAppID(), Account: in.GetAccount().GetLogin(), TargetType: in.GetTargetType()}
	if out.AppID == 0 {
		out.AppID = app.ID
	}
	return out, nil
}

// OrgInstallation finds the installation of the first configured App that is
// installed on the organization (GET /orgs/{org}/installation, as the App).
// It returns an error matching ErrNotInstalled when none is.
func (c *Client) OrgInstallation(ctx context.Context, org string) (Installation, error) {
	return c.findInstallation(ctx, org, "")
}

// RepoInstallation finds the installation of the first configured App that
// can reach the repository (GET /repos/{owner}/{repo}/installation, as the
// App). It returns an error matching ErrNotInstalled when none can.
func (c *Client) RepoInstallation(ctx context.Context, owner, repo string) (Installation, error) {
	return c.findInstallation(ctx, owner, repo)
}

func (c *Client) findInstallation(ctx context.Context, owner, repo string) (Installation, error) {
	for _, app := range c.apps {
		inst, err := c.getInstallation(ctx, app, owner, repo)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return Installation{}, fmt.Errorf("finding installation for %s: %w", Scope{owner, repo}, err)
		}
		c.installRecord(inst.ID, c.appByID[inst.AppID], owner)
		return inst, nil
	}
	return Installation{}, fmt.Errorf("finding installation for %s: %w", Scope{owner, repo}, ErrNotInstalled)
}
