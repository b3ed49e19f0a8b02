package queue_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/queue/queuetest"
)

func jobN(id int64) queue.Job {
	j := queuetest.ValidJob()
	j.JobID = id
	return j
}

func TestMemorySend(t *testing.T) {
	t.Parallel()
	boom := errors.New("queue unavailable")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	invalidJob := jobN(3)
	invalidJob.Pool = ""
	type send struct {
		ctx     context.Context
		job     queue.Job
		setErr  error // applied before the send
		wantErr error
	}
	ok := context.Background()
	cases := []struct {
		name  string
		sends []send
		want  []int64 // job ids kept, in order
	}{
		{"keeps jobs in order", []send{{ok, jobN(1), nil, nil}, {ok, jobN(2), nil, nil}, {ok, jobN(1), nil, nil}}, []int64{1, 2, 1}},
		{"invalid job is refused", []send{{ok, invalidJob, nil, queue.ErrInvalidJob}, {ok, jobN(4), nil, nil}}, []int64{4}},
		{"canceled context", []send{{canceled, jobN(5), nil, context.Canceled}}, nil},
		{"injected error, then accepting again", []send{
			{ok, jobN(6), boom, boom}, {ok, jobN(7), nil, nil}}, []int64{7}},
		{"invalid job is refused before the injected error", []send{{ok, invalidJob, boom, queue.ErrInvalidJob}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &queue.Memory{}
			for i, s := range tc.sends {
				m.SetErr(s.setErr)
				if err := m.Send(s.ctx, s.job); !errors.Is(err, s.wantErr) {
					t.Fatalf("send %d: %v, want %v", i, err, s.wantErr)
				}
			}
			var got []int64
			for _, j := range m.Jobs() {
				got = append(got, j.JobID)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("jobs %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMemoryKeepsCopies(t *testing.T) {
	t.Parallel()
	m := &queue.Memory{}
	j := queuetest.ValidJob()
	if err := m.Send(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	j.Labels[0] = "changed-by-caller"
	got := m.Jobs()
	got[0] = jobN(99)
	if again := m.Jobs(); !reflect.DeepEqual(again, []queue.Job{queuetest.ValidJob()}) {
		t.Errorf("Jobs = %+v, want the job as sent", again)
	}
}

func TestMemoryReset(t *testing.T) {
	t.Parallel()
	m := &queue.Memory{}
	m.SetErr(errors.New("down"))
	if err := m.Send(t.Context(), jobN(1)); err == nil {
		t.Fatal("Send with an injected error succeeded")
	}
	m.Reset()
	if err := m.Send(t.Context(), jobN(2)); err != nil {
		t.Fatalf("Send after Reset: %v", err)
	}
	if got := m.Jobs(); len(got) != 1 || got[0].JobID != 2 {
		t.Errorf("Jobs after Reset = %+v, want only job 2", got)
	}
}

func TestMemoryConcurrentSends(t *testing.T) {
	t.Parallel()
	const senders = 50
	m := &queue.Memory{}
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			if err := m.Send(context.Background(), jobN(int64(i+1))); err != nil {
				t.Errorf("Send: %v", err)
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, j := range m.Jobs() {
		seen[j.JobID] = true
	}
	if len(seen) != senders || len(m.Jobs()) != senders {
		t.Errorf("%d distinct of %d jobs kept, want %d of %d", len(seen), len(m.Jobs()), senders, senders)
	}
}

func TestMemoryJobsAreCopies(t *testing.T) {
	t.Parallel()
	var m queue.Memory
	job := queue.Job{JobID: 1, RunID: 2, Repository: "o/r", Pool: "p", Labels: []string{"self-hosted", "gpu"}}
	if err := m.Send(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	m.Jobs()[0].Labels[1] = "changed"
	job.Labels[0] = "changed too"
	if got := m.Jobs()[0].Labels; got[0] != "self-hosted" || got[1] != "gpu" {
		t.Fatalf("stored labels changed through a copy: %q", got)
	}
}
