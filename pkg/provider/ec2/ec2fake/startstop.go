package ec2fake

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/skiffci/skiff/pkg/provider/ec2"
)

// StopInstances and StartInstances as EC2 answers them. Sources: the EC2
// API reference (StopInstances, StartInstances, InstanceStateChange) and
// the answers of EC2 quoted in public projects' issue trackers:
//
//   - a stop of a terminated instance: IncorrectInstanceState "This
//     instance 'i-…' is not in a state from which it can be stopped."
//   - a stop of an instance still pending from its launch: IncorrectInstanceState
//     "Instance 'i-…' cannot be stopped as it has never reached the
//     'running' state."
//   - a stop of a spot instance a fleet launched (a one-time spot request):
//     UnsupportedOperation "You can't stop the Spot Instance 'i-…' because it
//     is associated with a one-time Spot Instance request. You can only stop
//     Spot Instances associated with persistent Spot Instance requests."
//   - a start of an instance that is stopping, shutting down or terminated:
//     IncorrectInstanceState "The instance 'i-…' is not in a state from
//     which it can be started."
//   - a stop of a stopped instance, and a start of a running one, succeed
//     and change nothing: the answer's current state is the previous one.
//
// EC2 fails the whole call on the first id it refuses; so does the fake,
// changing nothing.

// transition is an instance on its way to the state it settles in.
type transition struct {
	to string
	at time.Time
}

// SetStateDelays sets how long, by the fake's clock (SetClock), an
// instance stays stopping after StopInstances and pending after
// StartInstances before a call that reads it sees it stopped or running.
// The default, 0, settles it at the first such call.
func (f *Fake) SetStateDelays(stop, start time.Duration) {
	f.mu.Lock()
	f.stopDelay, f.startDelay = stop, start
	f.mu.Unlock()
}

// settle moves the instances whose stop or start is over to their end
// state; the caller holds f.mu.
func (f *Fake) settle() {
	now := f.now()
	for id, tr := range f.moving {
		if now.Before(tr.at) {
			continue
		}
		f.instances[id].State = tr.to
		if tr.to == "running" {
			f.ran[id] = true
		}
		delete(f.moving, id)
	}
}

// StopInstances implements ec2.API: running instances go stopping, then
// stopped (see the package doc and SetStateDelays).
func (f *Fake) StopInstances(ctx context.Context, in *sdkec2.StopInstancesInput, _ ...func(*sdkec2.Options)) (*sdkec2.StopInstancesOutput, error) {
	if err := f.enter(ctx, "StopInstances"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	if in.DryRun != nil || in.Force != nil || in.Hibernate != nil || in.SkipOsShutdown != nil {
		return nil, apiErr("InvalidParameterValue", "the fake models neither DryRun, Force, Hibernate nor SkipOsShutdown")
	}
	if err := f.changeable(in.InstanceIds); err != nil {
		return nil, err
	}
	f.settle()
	for _, id := range in.InstanceIds {
		inst := f.instances[id]
		switch {
		case inst.State == "terminated" || inst.State == "shutting-down":
			return nil, apiErr("IncorrectInstanceState", fmt.Sprintf("This instance '%s' is not in a state from which it can be stopped.", id))
		case inst.State == "pending" && !f.ran[id]:
			return nil, apiErr("IncorrectInstanceState", fmt.Sprintf("Instance '%s' cannot be stopped as it has never reached the 'running' state.", id))
		case inst.Spot:
			return nil, apiErr("UnsupportedOperation", fmt.Sprintf("You can't stop the Spot Instance '%s' because it is associated with "+
				"a one-time Spot Instance request. You can only stop Spot Instances associated with persistent Spot Instance requests.", id))
		}
	}
	out := &sdkec2.StopInstancesOutput{}
	for _, id := range in.InstanceIds {
		out.StoppingInstances = append(out.StoppingInstances, f.move(id, "stopping", "stopped", f.stopDelay,
			"running", "pending"))
	}
	return out, nil
}

// StartInstances implements ec2.API: stopped instances go pending, then
// running (see the package doc and SetStateDelays).
func (f *Fake) StartInstances(ctx context.Context, in *sdkec2.StartInstancesInput, _ ...func(*sdkec2.Options)) (*sdkec2.StartInstancesOutput, error) {
	if err := f.enter(ctx, "StartInstances"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	if in.DryRun != nil || in.AdditionalInfo != nil {
		return nil, apiErr("InvalidParameterValue", "the fake models neither DryRun nor AdditionalInfo")
	}
	if err := f.changeable(in.InstanceIds); err != nil {
		return nil, err
	}
	f.settle()
	for _, id := range in.InstanceIds {
		switch inst := f.instances[id]; inst.State {
		case "stopped":
			key := ec2.PlaceKey(inst.InstanceType, inst.Subnet, inst.Spot)
			if code := f.poolErrors[key]; code != "" {
				return nil, apiErr(code, message(code, inst.InstanceType, inst.Zone))
			}
		case "pending", "running":
		default:
			return nil, apiErr("IncorrectInstanceState", fmt.Sprintf("The instance '%s' is not in a state from which it can be started.", id))
		}
	}
	out := &sdkec2.StartInstancesOutput{}
	for _, id := range in.InstanceIds {
		out.StartingInstances = append(out.StartingInstances, f.move(id, "pending", "running", f.startDelay, "stopped"))
	}
	return out, nil
}

// changeable checks a stop or start's ids: at least one, all known; the
// caller holds f.mu.
func (f *Fake) changeable(ids []string) error {
	if len(ids) == 0 {
		return apiErr("MissingParameter", "The request must contain the parameter InstanceId")
	}
	return f.known(ids, false)
}

// move puts instance id, when its state is one of from, on its way through
// via to to (settling after delay), and returns the state change EC2
// reports; an instance in any other state (already stopped or stopping, for
// a stop) keeps it, and the change says so. The caller holds f.mu and has
// checked the move is allowed.
func (f *Fake) move(id, via, to string, delay time.Duration, from ...string) types.InstanceStateChange {
	inst := f.instances[id]
	prev := inst.State
	for _, s := range from {
		if prev == s {
			inst.State = via
			f.moving[id] = transition{to: to, at: f.now().Add(delay)}
			break
		}
	}
	return types.InstanceStateChange{
		InstanceId:    aws.String(id),
		PreviousState: &types.InstanceState{Name: types.InstanceStateName(prev), Code: aws.Int32(stateCode(prev))},
		CurrentState:  &types.InstanceState{Name: types.InstanceStateName(inst.State), Code: aws.Int32(stateCode(inst.State))},
	}
}
