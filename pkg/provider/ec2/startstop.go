package ec2

import (
	"context"
	"errors"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// StateChange is what one StopInstances or StartInstances did to an
// instance: its state before the call and right after it, in EC2's names
// (a stop answers stopping, a start pending; the end states come later).
type StateChange struct {
	Previous, Current string
}

// maxStateIDs bounds the ids of one StopInstances or StartInstances call.
// EC2 documents at most 1,000 ids a call for TerminateInstances and
// recommends smaller batches; stop and start are held to the same bound.
const maxStateIDs = 1000

// stateOp is StopInstances or StartInstances, reduced to what Stop and
// Start share.
type stateOp struct {
	gerund string
	call   func(ctx context.Context, ids []string) ([]types.InstanceStateChange, error)
	// goneOK: an instance EC2 no longer knows, or refuses because it is
	// terminated or shutting down, is not an error (Stop).
	goneOK bool
}

// Stop stops running instances and returns what EC2 did to each (by id).
// Stopping an instance already stopping or stopped changes nothing and is
// no error (EC2's own answer); an instance that is gone — unknown to EC2,
// terminated or shutting down — is not an error either, and is absent from
// the answer. EC2 fails a whole call for one id it refuses (unknown, in a
// state it cannot stop from, a spot instance of a one-time request): the
// ids of that call are then stopped one by one, so that one never spares
// the others, and the refusals that are not "gone" are returned, each an
// *Error (IncorrectInstanceState for an instance still pending from its
// launch, UnsupportedOperation for a spot instance). A failure of a whole
// call (throttling, a server error) ends Stop with that error.
func (l *Launcher) Stop(ctx context.Context, ids []string) (map[string]StateChange, error) {
	return l.change(ctx, ids, stateOp{gerund: "stopping instances", goneOK: true,
		call: func(ctx context.Context, ids []string) ([]types.InstanceStateChange, error) {
			out, err := l.api.StopInstances(ctx, &sdkec2.StopInstancesInput{InstanceIds: ids})
			if err != nil {
				return nil, err
			}
			return out.StoppingInstances, nil
		}})
}

// Start starts stopped instances and returns what EC2 did to each (by id):
// pending, then running. Starting one already pending or running changes
// nothing and is no error. Unlike Stop, an id EC2 does not know, or an
// instance it cannot start (stopping, shutting down, terminated:
// IncorrectInstanceState), is an error; it does not spare the other ids,
// which are then started one by one. InsufficientInstanceCapacity (no
// capacity of the instance's type in its zone right now) fails the call:
// ErrCapacity.
func (l *Launcher) Start(ctx context.Context, ids []string) (map[string]StateChange, error) {
	return l.change(ctx, ids, stateOp{gerund: "starting instances",
		call: func(ctx context.Context, ids []string) ([]types.InstanceStateChange, error) {
			out, err := l.api.StartInstances(ctx, &sdkec2.StartInstancesInput{InstanceIds: ids})
			if err != nil {
				return nil, err
			}
			return out.StartingInstances, nil
		}})
}

func (l *Launcher) change(ctx context.Context, ids []string, op stateOp) (map[string]StateChange, error) {
	out := make(map[string]StateChange, len(ids))
	var errs []error
	for batch := range slices.Chunk(ids, maxStateIDs) {
		changes, err := op.call(ctx, batch)
		switch {
		case err == nil:
			record(out, changes)
			continue
		case !perInstance(err):
			return out, classifyCall(op.gerund, err)
		case len(batch) == 1:
			if err := l.refused(ctx, op, batch[0], err); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		for _, id := range batch {
			changes, err := op.call(ctx, []string{id})
			switch {
			case err == nil:
				record(out, changes)
			case !perInstance(err):
				return out, errors.Join(append(errs, classifyCall(op.gerund, err))...)
			default:
				if err := l.refused(ctx, op, id, err); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) == 1 {
		return out, errs[0]
	}
	return out, errors.Join(errs...)
}

func record(out map[string]StateChange, changes []types.InstanceStateChange) {
	name := func(s *types.InstanceState) string {
		if s == nil {
			return ""
		}
		return string(s.Name)
	}
	for _, c := range changes {
		out[aws.ToString(c.InstanceId)] = StateChange{Previous: name(c.PreviousState), Current: name(c.CurrentState)}
	}
}

// perInstance reports whether EC2 refused a stop or start for one of its
// ids rather than as a whole.
func perInstance(err error) bool {
	switch errorCode(err) {
	case "InvalidInstanceID.NotFound", "IncorrectInstanceState", "UnsupportedOperation":
		return true
	}
	return false
}

// refused is what EC2's refusal err to change the one instance id means:
// nil when op accepts a gone instance and id is gone (unknown, or refused
// for a state it only leaves to be deleted), else the classified error.
func (l *Launcher) refused(ctx context.Context, op stateOp, id string, err error) error {
	if op.goneOK {
		switch errorCode(err) {
		case "InvalidInstanceID.NotFound":
			return nil
		case "IncorrectInstanceState":
			// Terminated, shutting down — or still pending from its launch,
			// which is no reason to pass: ask which.
			states, derr := l.States(ctx, []string{id})
			if derr != nil {
				return derr
			}
			if st, ok := states[id]; !ok || st.State == "terminated" || st.State == "shutting-down" {
				return nil
			}
		}
	}
	return classifyCall(op.gerund, err)
}

// errorCode is the EC2 error code of an SDK call's error, or of a
// classified one (*Error); "" for another error.
func errorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var api interface{ ErrorCode() string }
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}
