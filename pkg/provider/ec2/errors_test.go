package ec2

import (
	"errors"
	"fmt"
	"testing"
)

// codeTable is the expected kind of every code in codes, each with the
// meaning EC2 documents for it. Unless a row says otherwise the source is the
// EC2 API reference, "Error codes for the Amazon EC2 API":
// https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
// (CreateFleetError.errorCode refers to the same page). TestCodeTable fails
// on a code in codes without a row here, so a new code cannot go untested.
var codeTable = []struct {
	code string
	kind error
}{
	// ErrCapacity: AWS is short of something right now; other pools, or the
	// same one later, can succeed.

	// "There is not enough capacity to fulfill your request ... wait for
	// additional capacity ... or try different instance types."
	{"InsufficientInstanceCapacity", ErrCapacity},
	// "There is not enough capacity to fulfill your import instance request.
	// You can wait for additional capacity to become available."
	{"InsufficientCapacity", ErrCapacity},
	// "There is not enough capacity to fulfill your Dedicated Host request."
	{"InsufficientHostCapacity", ErrCapacity},
	// "Not enough available Reserved Instances to satisfy your minimum
	// request ... or wait for additional capacity to become available."
	{"InsufficientReservedInstanceCapacity", ErrCapacity},
	// "There is not enough capacity on the Dedicated Host to launch or start
	// the instance."
	{"InsufficientCapacityOnHost", ErrCapacity},
	// "There is not enough capacity to fulfill your EBS volume provision
	// request ... a different availability zone, or ... wait."
	{"InsufficientVolumeCapacity", ErrCapacity},
	// "At this time there isn't enough spare capacity to fulfill your request
	// for Spot Instances ... include additional instance types ... Zones."
	{"UnfulfillableCapacity", ErrCapacity},
	// "The specified subnet does not contain enough free private IP addresses
	// to fulfill your request." Other subnets may have room.
	{"InsufficientFreeAddressesInSubnet", ErrCapacity},

	// ErrUnsupported: this instance type, zone or option combination cannot
	// launch; other pools can.

	// "The specified request is unsupported. For example, ... launch an
	// instance in an Availability Zone that currently has constraints on that
	// instance type."
	{"Unsupported", ErrUnsupported},
	// Not on the error-codes page: a CreateFleetError code instant fleets
	// return per place with the message "Your requested instance
	// type (trn1.2xlarge) is not supported in your requested Availability
	// Zone" (field reports in public projects' issue trackers). That is one
	// place EC2 cannot serve, not a request only the operator can
	// fix: other pools and the on-demand fallback may still launch.
	{"InvalidFleetConfiguration", ErrUnsupported},
	// "The specified request includes an unsupported operation ... launch an
	// instance type that is not supported by the specified AMI."
	{"UnsupportedOperation", ErrUnsupported},
	// Not on the error-codes page: a CreateFleetError code seen from instant
	// fleets; the kind follows its name.
	{"UnsupportedInstanceType", ErrUnsupported},
	// "The instance type is not supported for this request."
	{"InvalidInstanceType", ErrUnsupported},
	// "The specified instance does not use CPU credits for CPU usage; only T2
	// instances use CPU credits" — an option this instance type lacks.
	{"InstanceCreditSpecification.NotSupported", ErrUnsupported},

	// ErrQuota: an account limit that only AWS can raise.

	// "You've reached the limit on the number of vCPUs ... assigned to the
	// running instances in your account ... increase your On-Demand instance
	// limits and try again."
	{"VcpuLimitExceeded", ErrQuota},
	// "You've reached the limit on the number of Spot Instances that you can
	// launch. The limit depends on the instance type."
	{"MaxSpotInstanceCountExceeded", ErrQuota},
	// "You've reached one or both of these limits: the total number of Spot
	// Fleet requests ..., or the total number of instances in all Spot Fleets
	// for the AWS Region (the target capacity)."
	{"MaxSpotFleetRequestCountExceeded", ErrQuota},
	// "You've reached the limit on the number of instances you can run
	// concurrently ... increase your On-Demand Instance limit."
	{"InstanceLimitExceeded", ErrQuota},

	// ErrSpotPrice.

	// "The request can't be fulfilled yet because your maximum price is below
	// the Spot price."
	{"SpotMaxPriceTooLow", ErrSpotPrice},

	// ErrThrottled.

	// "The maximum request rate permitted by the Amazon EC2 APIs has been
	// exceeded for your account ... use an increasing or variable sleep
	// interval between requests."
	{"RequestLimitExceeded", ErrThrottled},
	// Not on the EC2 page: generic AWS throttle codes, in the SDK's
	// DefaultThrottleErrorCodes (aws-sdk-go-v2 aws/retry/standard.go).
	{"Throttling", ErrThrottled},
	{"ThrottlingException", ErrThrottled},

	// ErrInvalid: the request or the account is wrong; the same request
	// cannot succeed until the operator changes something.

	// "A value specified in a parameter is not valid, is unsupported, or
	// cannot be used."
	{"InvalidParameterValue", ErrInvalid},
	// "A parameter specified in a request is not valid, is unsupported, or
	// cannot be used ... a security group and subnet that are in different
	// VPCs."
	{"InvalidParameter", ErrInvalid},
	// "Indicates an incorrect combination of parameters, or a missing
	// parameter."
	{"InvalidParameterCombination", ErrInvalid},
	// "The request is missing a required parameter."
	{"MissingParameter", ErrInvalid},
	// "The specified launch template name does not exist."
	{"InvalidLaunchTemplateName.NotFoundException", ErrInvalid},
	// "The specified launch template ID does not exist."
	{"InvalidLaunchTemplateId.NotFound", ErrInvalid},
	// "The specified launch template version does not exist."
	{"InvalidLaunchTemplateId.VersionNotFound", ErrInvalid},
	// "The ID for the launch template is malformed."
	{"InvalidLaunchTemplateId.Malformed", ErrInvalid},
	// "The specified launch template name is invalid."
	{"InvalidLaunchTemplateName.MalformedException", ErrInvalid},
	// "The specified AMI doesn't exist."
	{"InvalidAMIID.NotFound", ErrInvalid},
	// "The specified AMI ID is malformed."
	{"InvalidAMIID.Malformed", ErrInvalid},
	// "The specified AMI has been deregistered and is no longer available, or
	// is not in a state from which you can launch an instance."
	{"InvalidAMIID.Unavailable", ErrInvalid},
	// "InvalidSubnetID.NotFound or InvalidSubnetId.NotFound: The specified
	// subnet does not exist." EC2 spells it both ways.
	{"InvalidSubnetID.NotFound", ErrInvalid},
	{"InvalidSubnetId.NotFound", ErrInvalid},
	// "The specified subnet ID is malformed."
	{"InvalidSubnetID.Malformed", ErrInvalid},
	// "The specified security group does not exist." (The page adds that a
	// just-created group may not have propagated; skiff's are not new.)
	{"InvalidGroup.NotFound", ErrInvalid},
	// "The specified security group does not exist."
	{"InvalidSecurityGroupID.NotFound", ErrInvalid},
	// "The specified key pair name does not exist."
	{"InvalidKeyPair.NotFound", ErrInvalid},
	// "The specified instance does not exist." (For the ids skiff asks about,
	// fleet.go handles a not-yet-visible or long-gone instance itself.)
	{"InvalidInstanceID.NotFound", ErrInvalid},
	// "The specified instance ID is malformed."
	{"InvalidInstanceID.Malformed", ErrInvalid},
	// "The specified ID for the resource you are trying to tag is not valid."
	{"InvalidID", ErrInvalid},
	// "An unknown or unrecognized parameter was supplied."
	{"UnknownParameter", ErrInvalid},
	// "The action or operation requested is not valid."
	{"InvalidAction", ErrInvalid},
	// "You've reached the limit on the number of tags that you can assign to
	// the specified resource." A fixed limit, not a quota to raise.
	{"TagLimitExceeded", ErrInvalid},
	// "You attempted to create or update a resource with tags that are not
	// compliant with the tag policy requirements for this account."
	{"TagPolicyViolation", ErrInvalid},
	// "A block device mapping parameter is not valid."
	{"InvalidBlockDeviceMapping", ErrInvalid},
	// "You have exceeded the number of resources allowed for this request ...
	// break up your request into smaller requests."
	{"ResourceCountExceeded", ErrInvalid},
	// "The specified operation is not allowed ... terminate an instance that
	// has termination protection enabled."
	{"OperationNotPermitted", ErrInvalid},
	// "You are not authorized to perform this operation. Check your IAM
	// policies."
	{"UnauthorizedOperation", ErrInvalid},
	// "The provided credentials could not be validated."
	{"AuthFailure", ErrInvalid},
	// "You are not authorized to use the requested service. Ensure that you
	// have subscribed to the service."
	{"OptInRequired", ErrInvalid},
	// "Your account is currently blocked. Contact Support."
	{"Blocked", ErrInvalid},
	// "Your account is pending verification. Until the verification process
	// is complete, you may not be able to carry out requests."
	{"PendingVerification", ErrInvalid},
	// "The request uses the same client token as a previous, but
	// non-identical request."
	{"IdempotentParameterMismatch", ErrInvalid},

	// ErrTransient: server errors and documented retry-later conditions.

	// "An internal error has occurred. Retry your request."
	{"InternalError", ErrTransient},
	// "The request processing has failed because of an unknown error,
	// exception, or failure."
	{"InternalFailure", ErrTransient},
	// "An internal error has occurred. Retry your request."
	{"ServerInternal", ErrTransient},
	// "The request has failed due to a temporary failure of the server."
	{"ServiceUnavailable", ErrTransient},
	// "The server is overloaded and can't handle the request."
	{"Unavailable", ErrTransient},
	// "You can't run simultaneous commands to modify a tag for a specific
	// resource. Allow sufficient wait time ..., then retry your request."
	{"ConcurrentTagAccess", ErrTransient},
	// The instance's state does not allow the action now. StopInstances and
	// StartInstances answer it for an instance that is terminated, shutting
	// down, stopping, or pending from its launch (field reports in public
	// projects' issue trackers: "The instance 'i-…' is not in a state from
	// which it can be started."). States move on by themselves: a stopping
	// instance can start once stopped. Never the request's or the operator's
	// fault, so not ErrInvalid; fleet.go reads it per instance.
	{"IncorrectInstanceState", ErrTransient},
}

func TestClassifyCodes(t *testing.T) {
	t.Parallel()
	rows := map[string]bool{}
	for _, row := range codeTable {
		if rows[row.code] {
			t.Errorf("%s: two rows", row.code)
		}
		rows[row.code] = true
		if _, ok := codes[row.code]; !ok {
			// Classify would call it ErrTransient by default, so a row for
			// a code missing from the map tests nothing.
			t.Errorf("%s: row for a code not in the codes map", row.code)
		}
		e := Classify(row.code, "message")
		if e.Kind != row.kind || !errors.Is(e, row.kind) {
			t.Errorf("Classify(%q).Kind = %v, want %v", row.code, e.Kind, row.kind)
		}
		if e.Code != row.code || e.Message != "message" {
			t.Errorf("Classify(%q) = %+v, want code and message kept", row.code, e)
		}
	}
	for code := range codes {
		if !rows[code] {
			t.Errorf("%s is in the codes map but has no row in codeTable", code)
		}
	}
}

func TestClassifyUnknownCode(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"SomethingNew", "", "insufficientinstancecapacity"} {
		e := Classify(code, "limit of 0")
		if e.Kind != ErrTransient || e.Limit != -1 || e.Permanent() || Reason(e) != "transient" {
			t.Errorf("Classify(%q) = %+v, want transient, limit -1, not permanent", code, e)
		}
	}
}

func TestQuotaLimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code, msg string
		limit     int
	}{
		{"VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to.", 0},
		{"VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of 32 allows for the instance bucket that the specified instance type belongs to.", 32},
		{"MaxSpotInstanceCountExceeded", "Max spot instance count exceeded", -1},
		{"InstanceLimitExceeded", "", -1},
		// Only quota errors carry a limit.
		{"InsufficientInstanceCapacity", "limit of 5", -1},
		{"TagLimitExceeded", "limit of 50", -1},
	}
	for _, tc := range cases {
		if got := Classify(tc.code, tc.msg).Limit; got != tc.limit {
			t.Errorf("Classify(%q, %q).Limit = %d, want %d", tc.code, tc.msg, got, tc.limit)
		}
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code, msg string
		want      bool
	}{
		{"InvalidParameterValue", "", true},
		{"InvalidLaunchTemplateName.NotFoundException", "", true},
		{"VcpuLimitExceeded", "current vCPU limit of 0 allows", true},
		{"VcpuLimitExceeded", "current vCPU limit of 32 allows", false},
		{"VcpuLimitExceeded", "no number here", false},
		{"InsufficientInstanceCapacity", "", false},
		{"Unsupported", "", false},
		{"SpotMaxPriceTooLow", "", false},
		{"RequestLimitExceeded", "", false},
		{"InternalError", "", false},
	}
	for _, tc := range cases {
		if got := Classify(tc.code, tc.msg).Permanent(); got != tc.want {
			t.Errorf("Classify(%q, %q).Permanent() = %v, want %v", tc.code, tc.msg, got, tc.want)
		}
	}
}

func TestReason(t *testing.T) {
	t.Parallel()
	names := map[error]string{
		ErrCapacity:    "capacity",
		ErrUnsupported: "unsupported",
		ErrQuota:       "quota",
		ErrSpotPrice:   "spot_price",
		ErrThrottled:   "throttled",
		ErrInvalid:     "invalid",
		ErrTransient:   "transient",
	}
	for kind, name := range names {
		e := &Error{Kind: kind, Code: "Code", Limit: -1}
		if got := Reason(e); got != name {
			t.Errorf("Reason(%v) = %q, want %q", kind, got, name)
		}
		if got := Reason(fmt.Errorf("launching fleet: %w", e)); got != name {
			t.Errorf("Reason(wrapped %v) = %q, want %q", kind, got, name)
		}
	}
	// Every kind a code maps to has a name.
	for code, kind := range codes {
		if _, ok := names[kind]; !ok {
			t.Errorf("%s maps to %v, which has no reason name", code, kind)
		}
	}
	if got := Reason(nil); got != "" {
		t.Errorf("Reason(nil) = %q, want empty", got)
	}
	if got := Reason(errors.New("other")); got != "error" {
		t.Errorf("Reason(other) = %q, want error", got)
	}
	if got := Reason(classifyCall("describing instances", errors.New("connection reset"))); got != "transient" {
		t.Errorf("Reason(transport error) = %q, want transient", got)
	}
}
