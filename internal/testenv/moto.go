package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/schemas"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
)

// MotoInstall says how to install moto, the Python AWS emulator (DynamoDB
// with transactions, EC2, EventBridge, SQS, CloudWatch, …), at the version
// the tests were checked against.
const MotoInstall = `pip install "moto[server]==5.2.1"`

var moto sharedServer[string]

// Moto returns the base URL of the test binary's moto server, starting it
// on first use on a port of 127.0.0.1 that the kernel picks. One server
// serves every test of the binary and every AWS service moto emulates
// (the SDK routes by its request signature, so DynamoDB, SQS, EC2,
// EventBridge and CloudWatch clients can all share the endpoint); Main
// stops it, so the package must call Main from TestMain. Tests isolate
// themselves with resources of their own (a table, a queue). A missing
// python3 or moto skips or fails the test (see Missing).
func Moto(t testing.TB) string {
	t.Helper()
	needMain(t, "Moto")
	python := LookTool(t, "python3", "install Python 3.9 or later, then "+MotoInstall)
	if err := exec.Command(python, "-c", "import moto.server").Run(); err != nil {
		Missing(t, "moto", MotoInstall)
		return ""
	}
	return moto.get(t, "moto", func(ctx context.Context) (string, error) { return startMoto(ctx, python) })
}

// motoScript runs the application `python3 -m moto.server -H 127.0.0.1`
// runs, with two differences. It listens on the port the kernel picks and
// prints it (with -m moto.server the port must be chosen before the server
// binds it, a race with every other test on the machine), and exits when
// its stdin closes: the test binary holds the other end, so moto ends with
// it however it ends (even a test timeout, which skips Main). And it
// serves one request at a time: moto 5.2.1 does not isolate concurrent
// requests (two TransactWriteItems racing on one item both pass their
// conditions, and an ADD is lost), while DynamoDB serialises the writes of
// an item. Serving requests in turn is a stricter order than DynamoDB's,
// and still interleaves callers request by request, which is what
// conditional writes and their retries are about.
//
// One more difference, for speed only: moto 5.2.1 backs up a transaction's
// tables by deep-copying each whole table for every item of every
// TransactWriteItems, which makes a long run quadratic in the table (1,000
// jobs of the fault harness did not finish in 20 minutes). The script backs
// up only the items the transaction names and puts them back if moto
// cancels it, which is what moto's whole-table restore amounts to when
// requests are served one at a time; the store's conformance suites (their
// cancelled transactions included) run against it.
const motoScript = `
import copy, sys, threading
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
import moto.dynamodb.models as ddb
from moto.dynamodb.models.table import Table

class _TableNotCopied:
    def __getattr__(self, name):
        return getattr(copy, name)
    @staticmethod
    def deepcopy(x, memo=None):
        return x if isinstance(x, Table) else copy.deepcopy(x, memo)

ddb.copy = _TableNotCopied()
_transact = ddb.DynamoDBBackend.transact_write_items

def _named_items(backend, transact_items):
    saved = []
    for entry in transact_items:
        _, op = next(iter(entry.items()))
        name = op.get("TableName")
        if name not in backend.tables:
            continue
        table = backend.tables[name]
        key = op.get("Key")
        if key is None and "Item" in op:
            key = {table.hash_key_attr: op["Item"].get(table.hash_key_attr)}
            if table.range_key_attr is not None:
                key[table.range_key_attr] = op["Item"].get(table.range_key_attr)
        try:
            item = backend.get_item(name, key)
        except Exception:
            continue  # a malformed key: moto refuses the transaction before writing it
        saved.append((name, key, copy.deepcopy(item.to_json()["Attributes"]) if item else None))
    return saved

def transact_write_items(self, transact_items):
    saved = _named_items(self, transact_items)
    try:
        return _transact(self, transact_items)
    except Exception:
        for name, key, attrs in reversed(saved):
            if attrs is None:
                self.delete_item(name, key)
            else:
                self.put_item(name, attrs)
        raise

ddb.DynamoDBBackend.transact_write_items = transact_write_items
server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=False)
threading.Thread(target=server.serve_forever, daemon=True).start()
print("moto listening on port %d" % server.server_address[1], flush=True)
sys.stdin.read()
`

func startMoto(ctx context.Context, python string) (string, error) {
	return startServer(ctx, "moto", exec.Command(python, "-c", motoScript), motoAnswers)
}

// motoAnswers checks that the server answers HTTP: its reset endpoint
// answers without credentials (and resets nothing yet).
func motoAnswers(endpoint string) error {
	resp, err := http.Post(endpoint+"/moto-api/reset", "application/json", bytes.NewReader(nil))
	if err != nil {
		return fmt.Errorf("asking moto: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("asking moto: status %s", resp.Status)
	}
	return nil
}

// CloudWatchClient is a real CloudWatch client for an emulator's endpoint.
// It speaks the AWS JSON 1.0 protocol: the SDK's default for CloudWatch is
// Smithy RPC v2 CBOR, which moto 5.2.1 does not understand (it answers 404);
// JSON 1.0 and Query both work. Real CloudWatch accepts all three. Request
// compression is off: moto fails on the SDK's gzip-encoded PutMetricData
// bodies (over 10 KiB) with a 500 ("Not a gzipped file").
func CloudWatchClient(t testing.TB, endpoint string) *cloudwatch.Client {
	t.Helper()
	return cloudwatch.NewFromConfig(AWSConfig(t), func(o *cloudwatch.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Protocol = awsjson.New10(schemas.GraniteServiceVersion20100801)
		o.DisableRequestCompression = true
	})
}
