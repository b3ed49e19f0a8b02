package main

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/ghsim"
	"github.com/skiffci/skiff/pkg/secret/smsecret"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestBootstrapSize(t *testing.T) {
	t.Parallel()
	testenv.CheckBootstrapSize(t)
}

// canary is the setup secret: it must appear in no output of the function.
const canary = "canary-setup-secret-rie-5b0f3e2a91"

const domain = "abc123.lambda-url.us-east-1.on.aws"

func urlEvent(method, path, query, body string, cookies []string) events.LambdaFunctionURLRequest {
	var ev events.LambdaFunctionURLRequest
	ev.RawPath, ev.RawQueryString, ev.Body, ev.Cookies = path, query, body, cookies
	ev.Headers = map[string]string{"content-type": "application/x-www-form-urlencoded", "host": "evil.example"}
	ev.RequestContext.DomainName = domain
	ev.RequestContext.HTTP.Method = method
	return ev
}

// TestBootstrapUnderRIE runs the built function under the runtime
// emulator against Secrets Manager on moto and the GitHub simulator: the
// form, a wrong secret, the start (cookie and redirect_url on the Function
// URL's own domain, not the Host header), GitHub's confirmation, the
// callback with the cookie; the App lands in the secrets; then the page is
// closed. The setup secret never appears in the function's output.
func TestBootstrapUnderRIE(t *testing.T) {
	moto := testenv.Moto(t)
	sm := secretsmanager.NewFromConfig(testenv.AWSConfig(t), func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(moto) })
	ctx := context.Background()
	create := func(name, value string) string {
		out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(testenv.Unique("rie-" + name)), SecretString: aws.String(value)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.ARN)
	}
	setupARN, keyARN, hookARN := create("setup", canary), create("key", "placeholder0123456789"), create("hook", "placeholder0123456789")
	sim := ghsim.New(ghsim.Options{})
	t.Cleanup(sim.Close)
	sim.AddOrg("acme")

	fn := testenv.StartRIE(t, testenv.BuildLambda(t, runtime.GOARCH), testenv.LambdaEnv(
		"AWS_ENDPOINT_URL_SECRETS_MANAGER="+moto,
		"SKIFF_SETUP_SECRET_ARN="+setupARN, "SKIFF_GITHUB_PRIVATE_KEY_ARN="+keyARN, "SKIFF_WEBHOOK_SECRET_ARN="+hookARN,
		"SKIFF_WEBHOOK_URL=https://hook123.lambda-url.us-east-1.on.aws/",
		"SKIFF_GITHUB_URL="+sim.WebURL(), "SKIFF_GITHUB_API_URL="+sim.URL(),
	))
	if got := fn.InvokeURL(t, urlEvent("GET", "/", "", "", nil)); got.StatusCode != 200 || !strings.Contains(got.Body, `name="key"`) ||
		!strings.Contains(got.Headers["content-security-policy"], "default-src 'none'") {
		t.Fatalf("form: %d %v\n%s", got.StatusCode, got.Headers, got.Body)
	}
	if got := fn.InvokeURL(t, urlEvent("POST", "/start", "", "key=wrong-secret-0123456789&org=acme", nil)); got.StatusCode != 403 {
		t.Errorf("wrong secret: %d", got.StatusCode)
	}
	start := fn.InvokeURL(t, urlEvent("POST", "/start", "", url.Values{"key": {canary}, "org": {"acme"}}.Encode(), nil))
	if start.StatusCode != 200 || len(start.Cookies) != 1 {
		t.Fatalf("start: %d cookies %v\n%s", start.StatusCode, start.Cookies, start.Body)
	}
	m := regexp.MustCompile(`action="[^"]*\?state=([^"]+)"`).FindStringSubmatch(start.Body)
	mf := regexp.MustCompile(`name="manifest" value="([^"]+)"`).FindStringSubmatch(start.Body)
	if m == nil || mf == nil {
		t.Fatalf("no manifest form:\n%s", start.Body)
	}
	unescape := strings.NewReplacer("&amp;", "&", "&#34;", `"`, "&quot;", `"`, "&#43;", "+").Replace
	state, _ := url.QueryUnescape(unescape(m[1]))
	manifest := unescape(mf[1])
	if !strings.Contains(manifest, `"redirect_url":"https://`+domain+`/callback"`) {
		t.Errorf("manifest does not send GitHub back to the Function URL: %s", manifest)
	}
	back := confirm(t, sim, state, manifest)
	cookie := strings.SplitN(start.Cookies[0], ";", 2)[0]
	if got := fn.InvokeURL(t, urlEvent("GET", "/callback", back.RawQuery, "", nil)); got.StatusCode != 400 {
		t.Errorf("callback without the cookie: %d, want 400", got.StatusCode)
	}
	done := fn.InvokeURL(t, urlEvent("GET", "/callback", back.RawQuery, "", []string{cookie}))
	if done.StatusCode != 200 || !strings.Contains(done.Body, "GitHub App created") {
		t.Fatalf("callback: %d\n%s\n%s", done.StatusCode, done.Body, fn.Out.String())
	}
	keys, err := smsecret.Fetch(ctx, sm, keyARN)
	if err != nil {
		t.Fatal(err)
	}
	apps, err := github.ParseAppKeys(nil, keys)
	if err != nil || len(apps) != 1 || apps[0].ID != sim.CreatedApps()[0].ID {
		t.Errorf("key secret holds %v (%v)", apps, err)
	}
	if got := fn.InvokeURL(t, urlEvent("GET", "/", "", "", nil)); got.StatusCode != 409 {
		t.Errorf("the page after setup: %d, want 409", got.StatusCode)
	}
	if strings.Contains(fn.Out.String(), canary) {
		t.Error("the setup secret appeared in the function's output")
	}
}

// confirm is the operator's click on GitHub's new-App page for acme.
func confirm(t *testing.T, sim *ghsim.Server, state, manifest string) *url.URL {
	t.Helper()
	c := noRedirectClient()
	resp, err := c.PostForm(sim.WebURL()+"/organizations/acme/settings/apps/new/confirm?"+url.Values{"state": {state}}.Encode(),
		url.Values{"manifest": {manifest}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != 302 {
		t.Fatalf("confirm: %d %v", resp.StatusCode, err)
	}
	return back
}

func noRedirectClient() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
