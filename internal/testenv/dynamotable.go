package testenv

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skiffci/skiff/pkg/store/dynamostore"
)

var nameSeq atomic.Int64

// Unique returns prefix-<n>, with n new in this test binary: the name of
// something a test creates in an emulator the binary shares (a table, a
// queue, a secret), so that tests running in parallel, and a test run again
// under -count, each create their own.
func Unique(prefix string) string {
	return prefix + "-" + strconv.FormatInt(nameSeq.Add(1), 10)
}

// NewTable creates a fresh state table (dynamostore.CreateTable) named
// Unique(prefix) in the emulator client speaks to, and returns its name.
func NewTable(t testing.TB, client *dynamodb.Client, prefix string) string {
	t.Helper()
	table := Unique(prefix)
	ctx, cancel := AwaitContext(t)
	defer cancel()
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	return table
}

// The binary's one client for each DynamoDB emulator, made on first use.
var (
	dynaliteClient = emulatorClient{start: Dynalite}
	motoClient     = emulatorClient{start: Moto}
)

// emulatorClient is a DynamoDB client for an emulator the test binary
// starts once.
type emulatorClient struct {
	start  func(testing.TB) string
	once   sync.Once
	client *dynamodb.Client
}

// table creates a fresh state table in the emulator and returns the
// client for it and the table's name.
func (e *emulatorClient) table(t testing.TB, prefix string) (*dynamodb.Client, string) {
	t.Helper()
	endpoint := e.start(t)
	e.once.Do(func() { e.client = DynamoClient(t, endpoint) })
	return e.client, NewTable(t, e.client, prefix)
}

// DynaliteTable creates a fresh state table named prefix-<n> in the test
// binary's dynalite (see Dynalite: the package's TestMain calls Main) and
// returns the binary's client for it and the table's name.
func DynaliteTable(t testing.TB, prefix string) (*dynamodb.Client, string) {
	t.Helper()
	return dynaliteClient.table(t, prefix)
}

// MotoTable is DynaliteTable on the test binary's moto, which emulates
// TransactWriteItems (dynalite does not).
func MotoTable(t testing.TB, prefix string) (*dynamodb.Client, string) {
	t.Helper()
	return motoClient.table(t, prefix)
}
