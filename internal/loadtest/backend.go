package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstore"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/userdata"
)

// Store names where the harness keeps skiff's state.
type Store string

// The stores.
const (
	// StoreMemory: the in-memory adapters (store.Memory, ledger.Memory,
	// LaunchMemory, metrics.MemoryRecords): fast, no emulator.
	StoreMemory Store = "memory"
	// StoreDynalite: the DynamoDB adapters against dynalite. It does not
	// serve today: dynalite has no TransactWriteItems, which the ledger's
	// Reserve needs, so every launch fails (kept to show it, and for when
	// the ledger has a transaction-free path).
	StoreDynalite Store = "dynalite"
	// StoreMoto: the DynamoDB adapters against moto, with transactions: the
	// webhook's lifecycle writes are one TransactWriteItems, as in AWS.
	StoreMoto Store = "moto"
)

// backend is skiff's state as the services see it: the ports of the
// store, the runner ledger, the launch state, the waiting room, the registration table and
// the metrics records; take reads an instance's registration item as its
// boot script does (read and delete, once: a warm machine's job's item is a
// second item under the same key, written after it read its warm one).
type backend struct {
	records   store.Store
	lifecycle store.LifecycleRecorder // nil: the webhook's one-item-at-a-time default
	ledger    interface {
		ledger.Ledger
		ledger.Interruptions
	}
	// peek is the ledger as the harness reads it for its checks of warm
	// machines: the same records, its calls not counted among skiff's.
	peek     ledger.Ledger
	launches ledger.Launches
	room     room.Store
	regs     ec2.Registrations
	metrics  metrics.Records
	take     func(ctx context.Context, arn string) (reg regItem, ok bool, err error)
	calls    func() map[string]int // store calls by operation; nil: not counted
}

func newBackend(t testing.TB, kind Store, now func() time.Time) (*backend, error) {
	switch kind {
	case StoreMemory:
		return memoryBackend(now), nil
	case StoreDynalite:
		return dynamoBackend(t, testenv.Dynalite(t), false, now)
	case StoreMoto:
		return dynamoBackend(t, testenv.Moto(t), true, now)
	}
	return nil, fmt.Errorf("unknown store %q (memory, dynalite or moto)", kind)
}

func memoryBackend(now func() time.Time) *backend {
	st := store.NewMemory()
	st.SetClock(now)
	regs := &memoryRegistrations{items: map[string]userdata.Registration{}}
	led := ledger.NewMemory(now)
	return &backend{records: st, ledger: led, peek: led, launches: ledger.NewLaunchMemory(), room: room.NewMemory(),
		regs: regs, metrics: &metrics.MemoryRecords{}, take: regs.take}
}

// regItem is what a boot script reads of its registration item: the mode,
// a job's JIT configuration (mode jit), a warm machine's kind, name and end
// of its wait (mode warm).
type regItem struct {
	Mode, JITConfig, WarmKind, RunnerName string
	WarmUntil                             time.Time
}

// memoryRegistrations is the registration table in memory.
type memoryRegistrations struct {
	mu    sync.Mutex
	items map[string]userdata.Registration
}

func (m *memoryRegistrations) Put(_ context.Context, r userdata.Registration) error {
	if err := r.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	m.items[r.InstanceARN] = r
	m.mu.Unlock()
	return nil
}

func (m *memoryRegistrations) take(_ context.Context, arn string) (regItem, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.items[arn]
	delete(m.items, arn)
	return regItem{Mode: r.Mode, JITConfig: r.JITConfig, WarmKind: r.WarmKind, RunnerName: r.RunnerName, WarmUntil: r.WarmUntil}, ok, nil
}

var tableSeq atomic.Int64

// dynamoBackend creates a state table and a registration table of their
// own in the emulator and builds the production adapters over a real SDK
// client whose calls are counted.
func dynamoBackend(t testing.TB, endpoint string, transactions bool, now func() time.Time) (*backend, error) {
	counter := &opCounter{header: "X-Amz-Target", next: http.DefaultTransport}
	ddb := dynamodb.NewFromConfig(testenv.AWSConfig(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.HTTPClient = &http.Client{Transport: counter}
	})
	ctx := context.Background()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(tableSeq.Add(1), 10)
	table, regTable := "skiff-load-"+suffix, "skiff-load-reg-"+suffix
	if err := dynamostore.CreateTable(ctx, ddb, table); err != nil {
		return nil, err
	}
	if err := ec2.CreateRegistrationTable(ctx, ddb, regTable); err != nil {
		return nil, err
	}
	st := dynamostore.NewDynamo(ddb, table, dynamostore.WithClock(now))
	uncounted := dynamodb.NewFromConfig(testenv.AWSConfig(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	b := &backend{records: st, ledger: dynamostore.NewLedgerDynamo(ddb, table, dynamostore.WithClock(now)),
		peek:     dynamostore.NewLedgerDynamo(uncounted, table, dynamostore.WithClock(now)),
		launches: dynamostore.NewLaunchDynamo(ddb, table), room: dynamostore.NewRoomDynamo(ddb, table), regs: ec2.NewRegistrationTable(ddb, regTable),
		metrics: recordstore.New(ddb, table, recordstore.WithClock(now)), calls: counter.Snapshot}
	if transactions {
		b.lifecycle = st
	}
	b.take = func(ctx context.Context, arn string) (regItem, bool, error) {
		out, err := ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(regTable),
			Key:          map[string]ddbtypes.AttributeValue{userdata.AttrPK: &ddbtypes.AttributeValueMemberS{Value: arn}},
			ReturnValues: ddbtypes.ReturnValueAllOld})
		if err != nil || len(out.Attributes) == 0 {
			return regItem{}, false, err
		}
		return itemOf(out.Attributes), true, nil
	}
	return b, nil
}

// itemOf reads a registration item's attributes as the boot script does
// (skiff_ddb_attr): strings, and warm_until as epoch seconds.
func itemOf(attrs map[string]ddbtypes.AttributeValue) regItem {
	str := func(name string) string {
		v, _ := attrs[name].(*ddbtypes.AttributeValueMemberS)
		if v == nil {
			return ""
		}
		return v.Value
	}
	r := regItem{Mode: str(userdata.AttrMode), JITConfig: str(userdata.AttrJITConfig), WarmKind: str(userdata.AttrWarmKind),
		RunnerName: str(userdata.AttrRunnerName)}
	if v, ok := attrs[userdata.AttrWarmUntil].(*ddbtypes.AttributeValueMemberN); ok {
		if sec, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
			r.WarmUntil = time.Unix(sec, 0).UTC()
		}
	}
	return r
}

// opCounter is an http.RoundTripper (or, with handler set, an
// http.Handler) that counts requests by operation: the value of a header
// (DynamoDB's X-Amz-Target, without its version prefix) or of the form's
// Action (EC2's Query protocol).
type opCounter struct {
	header  string
	next    http.RoundTripper
	handler http.Handler
	testenv.OpCount
	mu      sync.Mutex
	retries int // requests the SDK sent again (amz-sdk-request attempt > 1)
}

func (c *opCounter) add(op string) {
	if i := strings.LastIndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	c.Add(op)
}

func (c *opCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.add(r.Header.Get(c.header))
	return c.next.RoundTrip(r)
}

// ServeHTTP counts the operation of a request the SDK sends for the first
// time; one it sends again (its amz-sdk-request header says attempt 2 or
// later) counts as a retry. Which requests the SDK retries is not all
// drawn from the seed: besides the fake's own failures, a response the
// client fails to read in time is sent again.
func (c *opCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	form, _ := url.ParseQuery(string(body))
	if attempt := sdkAttempt(r.Header.Get("Amz-Sdk-Request")); attempt > 1 {
		c.mu.Lock()
		c.retries++
		c.mu.Unlock()
	} else {
		c.add(form.Get("Action"))
	}
	c.handler.ServeHTTP(w, r)
}

// sdkAttempt reads the attempt of an amz-sdk-request header
// ("attempt=2; max=3"), 0 without one.
func sdkAttempt(h string) int {
	for _, part := range strings.Split(h, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "attempt="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func (c *opCounter) retried() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retries
}
