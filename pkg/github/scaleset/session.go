package scaleset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Session is one message session of a scale set: its message queue and
// the queue token, refreshed after a 401. Safe for concurrent use.
type Session struct {
	c          *Client
	ScaleSetID int64
	// ID is the session's id: kept by the caller so that a session left by
	// a crash can be deleted at the next start.
	ID string

	mu       sync.Mutex
	queueURL string
	token    string
	// Statistics are the scale set's at the session's creation.
	Statistics Statistics
}

type sessionJSON struct {
	SessionID       string     `json:"sessionId"`
	OwnerName       string     `json:"ownerName"`
	MessageQueueURL string     `json:"messageQueueUrl"`
	QueueToken      string     `json:"messageQueueAccessToken"`
	Statistics      Statistics `json:"statistics"`
}

func sessionsPath(id int64) string {
	return "_apis/runtime/runnerscalesets/" + strconv.FormatInt(id, 10) + "/sessions"
}

// CreateSession opens the scale set's message session for owner (a name
// for people: host and process). ErrConflict: another session is active.
func (c *Client) CreateSession(ctx context.Context, scaleSet int64, owner string) (*Session, error) {
	var out sessionJSON
	if err := c.service(ctx, http.MethodPost, sessionsPath(scaleSet), nil, map[string]string{"ownerName": owner}, http.StatusOK, &out); err != nil {
		return nil, fmt.Errorf("creating the session of scale set %d: %w", scaleSet, err)
	}
	if out.SessionID == "" || out.MessageQueueURL == "" || out.QueueToken == "" {
		return nil, fmt.Errorf("creating the session of scale set %d: the answer lacks its id, queue or token", scaleSet)
	}
	return &Session{c: c, ScaleSetID: scaleSet, ID: out.SessionID, queueURL: out.MessageQueueURL, token: out.QueueToken,
		Statistics: out.Statistics}, nil
}

// DeleteSession ends session id of the scale set; one already gone is
// not an error.
func (c *Client) DeleteSession(ctx context.Context, scaleSet int64, id string) error {
	err := c.service(ctx, http.MethodDelete, sessionsPath(scaleSet)+"/"+url.PathEscape(id), nil, nil, http.StatusNoContent, nil)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("deleting session %s: %w", id, err)
	}
	return nil
}

// Close deletes the session.
func (s *Session) Close(ctx context.Context) error { return s.c.DeleteSession(ctx, s.ScaleSetID, s.ID) }

// Refresh gets the session a new queue token.
func (s *Session) Refresh(ctx context.Context) error {
	var out sessionJSON
	if err := s.c.service(ctx, http.MethodPatch, sessionsPath(s.ScaleSetID)+"/"+url.PathEscape(s.ID), nil, nil, http.StatusOK, &out); err != nil {
		return fmt.Errorf("refreshing session %s: %w", s.ID, err)
	}
	if out.QueueToken == "" {
		return fmt.Errorf("refreshing session %s: the answer has no token", s.ID)
	}
	s.mu.Lock()
	s.token = out.QueueToken
	if out.MessageQueueURL != "" {
		s.queueURL = out.MessageQueueURL
	}
	s.mu.Unlock()
	return nil
}

// queue makes one message-queue call with the queue token; after a 401 it
// refreshes the session and makes it once more.
func (s *Session) queue(ctx context.Context, method, suffix string, query url.Values, hdr http.Header, want []int) (int, []byte, error) {
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		u, tok := s.queueURL+suffix, s.token
		s.mu.Unlock()
		if len(query) > 0 {
			u += "?" + query.Encode()
		}
		req, err := http.NewRequestWithContext(ctx, method, u, nil)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Accept", "application/json; api-version="+apiVersion)
		for k, v := range hdr {
			req.Header[k] = v
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		status, body, err := s.c.raw(req, want)
		if errors.Is(err, ErrTokenExpired) && attempt == 0 {
			if rerr := s.Refresh(ctx); rerr != nil {
				return 0, nil, rerr
			}
			continue
		}
		return status, body, err
	}
}

// raw makes req and returns its status and body when the status is one
// of want.
func (c *Client) raw(req *http.Request, want []int) (int, []byte, error) {
	resp, err := c.o.HTTP.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", req.Method, redactURL(req.URL), err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(nil, resp.Body, 8<<20)); err != nil {
		return 0, nil, fmt.Errorf("%s %s: reading the answer: %w", req.Method, redactURL(req.URL), err)
	}
	for _, w := range want {
		if resp.StatusCode == w {
			return w, buf.Bytes(), nil
		}
	}
	return 0, nil, statusError(req, resp.StatusCode, buf.Bytes())
}

// GetMessage long-polls the queue for the oldest message not deleted,
// telling the service the last message handled; (nil, nil) is 202,
// nothing new. maxCapacity (X-ScaleSetMaxCapacity) is how many runners
// the listener can run. A message that cannot be parsed is a
// *MalformedError.
func (s *Session) GetMessage(ctx context.Context, lastMessageID int64, maxCapacity int) (*Message, error) {
	q := url.Values{}
	if lastMessageID > 0 {
		q.Set("lastMessageId", strconv.FormatInt(lastMessageID, 10))
	}
	hdr := http.Header{HeaderMaxCapacity: {strconv.Itoa(maxCapacity)}}
	status, body, err := s.queue(ctx, http.MethodGet, "", q, hdr, []int{http.StatusOK, http.StatusAccepted})
	if err != nil {
		return nil, fmt.Errorf("getting a message of scale set %d: %w", s.ScaleSetID, err)
	}
	if status == http.StatusAccepted {
		return nil, nil
	}
	return ParseMessage(body)
}

// DeleteMessage acknowledges message id: it is handled and is not
// delivered again.
func (s *Session) DeleteMessage(ctx context.Context, id int64) error {
	if _, _, err := s.queue(ctx, http.MethodDelete, "/"+strconv.FormatInt(id, 10), nil, nil, []int{http.StatusNoContent}); err != nil {
		return fmt.Errorf("acknowledging message %d: %w", id, err)
	}
	return nil
}

// AcquireJobs acquires the jobs of the runner request ids for the scale
// set and returns those it got.
func (s *Session) AcquireJobs(ctx context.Context, requestIDs []int64) ([]int64, error) {
	body, _ := json.Marshal(requestIDs)
	path := "_apis/runtime/runnerscalesets/" + strconv.FormatInt(s.ScaleSetID, 10) + "/acquirejobs"
	for attempt := 0; ; attempt++ {
		base, _, err := s.c.connection(ctx, false)
		if err != nil {
			return nil, err
		}
		u, _ := url.JoinPath(base, path)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"?api-version="+apiVersion, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		req.Header.Set("Authorization", "Bearer "+s.token)
		s.mu.Unlock()
		req.Header.Set("Content-Type", "application/json")
		_, b, err := s.c.raw(req, []int{http.StatusOK})
		if errors.Is(err, ErrTokenExpired) && attempt == 0 {
			if rerr := s.Refresh(ctx); rerr != nil {
				return nil, rerr
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("acquiring jobs: %w", err)
		}
		var out struct {
			Value []int64 `json:"value"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("acquiring jobs: decoding the answer: %w", err)
		}
		return out.Value, nil
	}
}

// HeaderMaxCapacity tells the service how many runners the listener can run
// at once, with each poll, so that it assigns no more jobs than that.
const HeaderMaxCapacity = "X-ScaleSetMaxCapacity"

// Message is one queue message: the scale set's statistics at delivery
// and its job messages, in the order GitHub sent them.
type Message struct {
	ID         int64
	Statistics Statistics
	Jobs       []JobMessage
}

// The job message types.
const (
	JobAvailable = "JobAvailable"
	JobAssigned  = "JobAssigned"
	JobStarted   = "JobStarted"
	JobCompleted = "JobCompleted"
)

// JobMessage is one job's event. JobID is GitHub's id of the job (its
// workflow job id on github.com as the simulator sends it).
type JobMessage struct {
	Type            string    `json:"messageType"`
	RunnerRequestID int64     `json:"runnerRequestId"`
	RepositoryName  string    `json:"repositoryName"`
	OwnerName       string    `json:"ownerName"`
	JobID           string    `json:"jobId"`
	WorkflowRef     string    `json:"jobWorkflowRef"`
	DisplayName     string    `json:"jobDisplayName"`
	WorkflowRunID   int64     `json:"workflowRunId"`
	EventName       string    `json:"eventName"`
	RequestLabels   []string  `json:"requestLabels"`
	QueueTime       time.Time `json:"queueTime"`
	RunnerID        int64     `json:"runnerId"`
	RunnerName      string    `json:"runnerName"`
	// Result is a JobCompleted's: succeeded, failed, canceled, ...
	Result string `json:"result"`
}

// MalformedError is a message that could not be parsed; ID is its id
// when the envelope could be read (0 otherwise).
type MalformedError struct {
	ID  int64
	Err error
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("message %d: %v: %v", e.ID, ErrMalformed, e.Err)
}

// Unwrap makes errors.Is(err, ErrMalformed) hold.
func (e *MalformedError) Unwrap() []error { return []error{ErrMalformed, e.Err} }

// ParseMessage parses a queue message: an envelope whose body is a JSON
// string holding the array of job messages. Job messages of types it
// does not know are skipped.
func ParseMessage(b []byte) (*Message, error) {
	var env struct {
		MessageID   int64       `json:"messageId"`
		MessageType string      `json:"messageType"`
		Body        string      `json:"body"`
		Statistics  *Statistics `json:"statistics"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, &MalformedError{Err: fmt.Errorf("decoding the envelope: %w", err)}
	}
	if env.MessageType != "RunnerScaleSetJobMessages" {
		return nil, &MalformedError{ID: env.MessageID, Err: fmt.Errorf("message type %q", env.MessageType)}
	}
	if env.Statistics == nil {
		return nil, &MalformedError{ID: env.MessageID, Err: errors.New("no statistics")}
	}
	m := &Message{ID: env.MessageID, Statistics: *env.Statistics}
	if env.Body == "" {
		return m, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(env.Body), &raw); err != nil {
		return nil, &MalformedError{ID: env.MessageID, Err: fmt.Errorf("decoding the job messages: %w", err)}
	}
	for _, r := range raw {
		var j JobMessage
		if err := json.Unmarshal(r, &j); err != nil {
			return nil, &MalformedError{ID: env.MessageID, Err: fmt.Errorf("decoding a job message: %w", err)}
		}
		switch j.Type {
		case JobAvailable, JobAssigned, JobStarted, JobCompleted:
			m.Jobs = append(m.Jobs, j)
		}
	}
	return m, nil
}
