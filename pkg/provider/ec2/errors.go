package ec2

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/smithy-go"
)

// The kinds of EC2 failure. Every error this package returns for an EC2
// answer is an *Error wrapping exactly one of them, and every fleet error in
// a Result carries one, so callers pick retry, fallback or drop with
// errors.Is and never look at AWS error codes themselves.
var (
	// ErrCapacity: AWS has no capacity for this instance type in this zone
	// now (InsufficientInstanceCapacity and friends). Try other capacity
	// pools, or the same one in a few minutes.
	ErrCapacity = errors.New("insufficient capacity")
	// ErrUnsupported: the instance type is not offered in this zone, or not
	// with these options. Retrying the same place cannot help.
	ErrUnsupported = errors.New("unsupported instance type or configuration")
	// ErrQuota: an account quota is exhausted (VcpuLimitExceeded,
	// MaxSpotInstanceCountExceeded, InstanceLimitExceeded). *Error.Limit
	// tells the quota when EC2 names it; a quota of 0 never lets the pool
	// launch until the operator asks AWS for an increase.
	ErrQuota = errors.New("account quota exceeded")
	// ErrSpotPrice: the spot price is above the maximum price. Fall back to
	// on-demand where the pool allows.
	ErrSpotPrice = errors.New("spot price above maximum")
	// ErrThrottled: the EC2 API rate limit (RequestLimitExceeded). Retry the
	// whole request later.
	ErrThrottled = errors.New("ec2 request rate exceeded")
	// ErrInvalid: the request itself is wrong — a missing launch template,
	// AMI or subnet, a bad parameter, missing permissions. Retrying the same
	// request cannot help; the operator must fix the configuration.
	ErrInvalid = errors.New("invalid ec2 request")
	// ErrTransient: an EC2 server error or an unknown code. Retry later.
	ErrTransient = errors.New("transient ec2 error")
)

// Error is one classified EC2 failure: of a whole call, or of one capacity
// pool of a fleet. It never holds user data or credentials: EC2's codes and
// messages name resources and quotas only.
type Error struct {
	// Kind is one of the Err* sentinels above.
	Kind error
	// Code is EC2's error code, e.g. InsufficientInstanceCapacity.
	Code string
	// Message is EC2's message.
	Message string
	// Limit is the quota EC2 named for ErrQuota (e.g. "current vCPU limit of
	// 0"), or -1 when the message does not tell it.
	Limit int
}

// Error renders the code and message.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is matches the error's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Permanent reports whether retrying the same request can never succeed
// without an operator's change: an invalid request, or a quota of zero
// (a new account's G and P instance quota is 0 until raised).
func (e *Error) Permanent() bool {
	return e.Kind == ErrInvalid || (e.Kind == ErrQuota && e.Limit == 0)
}

// codes maps EC2 error codes to kinds. Sources: the EC2 API reference
// "Error codes for the Amazon EC2 API"
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html),
// the throttle codes of the AWS SDK's retryer (Throttling,
// ThrottlingException), and the CreateFleetError codes seen from instant
// fleets (InvalidFleetConfiguration, UnsupportedInstanceType, which that page
// does not list). errors_test.go holds the documented meaning of every code.
var codes = map[string]error{
	"InsufficientInstanceCapacity":                 ErrCapacity,
	"InsufficientCapacity":                         ErrCapacity,
	"InsufficientHostCapacity":                     ErrCapacity,
	"InsufficientReservedInstanceCapacity":         ErrCapacity,
	"InsufficientCapacityOnHost":                   ErrCapacity,
	"InsufficientVolumeCapacity":                   ErrCapacity,
	"UnfulfillableCapacity":                        ErrCapacity,
	"InsufficientFreeAddressesInSubnet":            ErrCapacity,
	"Unsupported":                                  ErrUnsupported,
	"UnsupportedOperation":                         ErrUnsupported,
	"UnsupportedInstanceType":                      ErrUnsupported,
	"InvalidFleetConfiguration":                    ErrUnsupported,
	"InvalidInstanceType":                          ErrUnsupported,
	"InstanceCreditSpecification.NotSupported":     ErrUnsupported,
	"VcpuLimitExceeded":                            ErrQuota,
	"MaxSpotInstanceCountExceeded":                 ErrQuota,
	"MaxSpotFleetRequestCountExceeded":             ErrQuota,
	"InstanceLimitExceeded":                        ErrQuota,
	"SpotMaxPriceTooLow":                           ErrSpotPrice,
	"RequestLimitExceeded":                         ErrThrottled,
	"Throttling":                                   ErrThrottled,
	"ThrottlingException":                          ErrThrottled,
	"InvalidParameterValue":                        ErrInvalid,
	"InvalidParameter":                             ErrInvalid,
	"InvalidParameterCombination":                  ErrInvalid,
	"MissingParameter":                             ErrInvalid,
	"InvalidLaunchTemplateName.NotFoundException":  ErrInvalid,
	"InvalidLaunchTemplateId.NotFound":             ErrInvalid,
	"InvalidLaunchTemplateId.VersionNotFound":      ErrInvalid,
	"InvalidLaunchTemplateId.Malformed":            ErrInvalid,
	"InvalidLaunchTemplateName.MalformedException": ErrInvalid,
	"InvalidAMIID.NotFound":                        ErrInvalid,
	"InvalidAMIID.Malformed":                       ErrInvalid,
	"InvalidAMIID.Unavailable":                     ErrInvalid,
	"InvalidSubnetID.NotFound":                     ErrInvalid,
	"InvalidSubnetId.NotFound":                     ErrInvalid,
	"InvalidSubnetID.Malformed":                    ErrInvalid,
	"InvalidGroup.NotFound":                        ErrInvalid,
	"InvalidSecurityGroupID.NotFound":              ErrInvalid,
	"InvalidKeyPair.NotFound":                      ErrInvalid,
	"InvalidInstanceID.NotFound":                   ErrInvalid,
	"InvalidInstanceID.Malformed":                  ErrInvalid,
	"InvalidID":                                    ErrInvalid,
	"UnknownParameter":                             ErrInvalid,
	"InvalidAction":                                ErrInvalid,
	"TagLimitExceeded":                             ErrInvalid,
	"TagPolicyViolation":                           ErrInvalid,
	"InvalidBlockDeviceMapping":                    ErrInvalid,
	"ResourceCountExceeded":                        ErrInvalid,
	"OperationNotPermitted":                        ErrInvalid,
	"UnauthorizedOperation":                        ErrInvalid,
	"AuthFailure":                                  ErrInvalid,
	"OptInRequired":                                ErrInvalid,
	"Blocked":                                      ErrInvalid,
	"PendingVerification":                          ErrInvalid,
	"IdempotentParameterMismatch":                  ErrInvalid,
	"InternalError":                                ErrTransient,
	"InternalFailure":                              ErrTransient,
	"ServerInternal":                               ErrTransient,
	"ServiceUnavailable":                           ErrTransient,
	"Unavailable":                                  ErrTransient,
	"ConcurrentTagAccess":                          ErrTransient,
	"IncorrectInstanceState":                       ErrTransient,
}

// limitRe finds the quota in messages such as "You have requested more vCPU
// capacity than your current vCPU limit of 0 allows for the instance bucket
// that the specified instance type belongs to."
var limitRe = regexp.MustCompile(`limit of (\d+)`)

// Classify returns the classified form of an EC2 error code and message.
// Unknown codes are ErrTransient: retrying is safer than dropping a job.
func Classify(code, message string) *Error {
	kind, ok := codes[code]
	if !ok {
		kind = ErrTransient
	}
	e := &Error{Kind: kind, Code: code, Message: message, Limit: -1}
	if kind == ErrQuota {
		if m := limitRe.FindStringSubmatch(message); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil {
				e.Limit = n
			}
		}
	}
	return e
}

// classifyCall turns an error returned by an SDK call into an *Error,
// wrapped with the operation's gerund. Anything that is not an EC2 answer
// (a transport error, an ended context) is ErrTransient and keeps its cause.
func classifyCall(op string, err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		return fmt.Errorf("%s: %w", op, Classify(api.ErrorCode(), api.ErrorMessage()))
	}
	return fmt.Errorf("%s: %w: %w", op, ErrTransient, err)
}

// Kind returns the kind of an error from this package (one of the Err*
// sentinels), or nil when err is not an EC2 failure.
func Kind(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if errors.Is(err, ErrTransient) {
		return ErrTransient
	}
	return nil
}

// Reason is the short machine-readable name of an EC2 failure kind for logs
// and metrics: capacity, unsupported, quota, spot_price, throttled, invalid,
// transient; "" for nil.
func Reason(err error) string {
	switch Kind(err) {
	case ErrCapacity:
		return "capacity"
	case ErrUnsupported:
		return "unsupported"
	case ErrQuota:
		return "quota"
	case ErrSpotPrice:
		return "spot_price"
	case ErrThrottled:
		return "throttled"
	case ErrInvalid:
		return "invalid"
	case ErrTransient:
		return "transient"
	}
	if err == nil {
		return ""
	}
	return "error"
}

// quotaClasses map an instance family's leading letters to the class EC2's
// vCPU quotas are named after, longest prefixes first.
var quotaClasses = []struct{ prefix, class string }{
	{"inf", "Inf"}, {"trn", "Trn"}, {"hpc", "HPC"}, {"dl", "DL"}, {"vt", "G and VT"},
	{"g", "G and VT"}, {"p", "P"}, {"f", "F"}, {"x", "X"},
	{"a", standardClass}, {"c", standardClass}, {"d", standardClass}, {"h", standardClass}, {"i", standardClass},
	{"m", standardClass}, {"r", standardClass}, {"t", standardClass}, {"z", standardClass},
}

const standardClass = "Standard (A, C, D, H, I, M, R, T, Z)"

// QuotaName is the name, in Service Quotas (service Amazon EC2), of the vCPU
// quota an instance type counts against: "Running On-Demand G and VT
// instances" on demand, "All G and VT Spot Instance Requests" for spot. It
// is "" for an empty (attribute-based) or unrecognized type.
func QuotaName(instanceType string, spot bool) string {
	family, _, _ := strings.Cut(strings.ToLower(instanceType), ".")
	for _, c := range quotaClasses {
		if family != "" && strings.HasPrefix(family, c.prefix) {
			if spot {
				return "All " + c.class + " Spot Instance Requests"
			}
			return "Running On-Demand " + c.class + " instances"
		}
	}
	return ""
}
