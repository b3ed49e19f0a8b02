package ec2fake

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// APIVersion is the EC2 Query API version the handler speaks (the SDK's).
const APIVersion = "2016-11-15"

// xmlns is the namespace of EC2's answers.
const xmlns = "http://ec2.amazonaws.com/doc/" + APIVersion + "/"

// maxBody bounds a request body: a CreateFleet with 40 overrides and tags is
// a few tens of kilobytes.
const maxBody = 1 << 20

// Handler serves the fake over HTTP with the EC2 Query protocol, as the AWS
// SDK for Go v2 speaks it (POST, form-encoded Action=…&Version=2016-11-15,
// XML answers, EC2's error document with its HTTP status): CreateFleet,
// DescribeInstances, TerminateInstances, CreateTags, StopInstances and
// StartInstances. It decodes
// the form into the SDK's input, runs the same logic as the in-process calls
// (faults, capacity, idempotency, latency included) and encodes the SDK's
// output. A parameter it does not model is refused with UnknownParameter,
// so a new field sent by skiff cannot pass unnoticed. Requests are not
// signature-checked.
func (f *Fake) Handler() http.Handler {
	var seq atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := fmt.Sprintf("5e0f0000-0000-4000-8000-%012d", seq.Add(1))
		if r.Method != http.MethodPost {
			writeError(w, rid, apiErr("InvalidAction", "the EC2 Query API takes POST requests"))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			writeError(w, rid, apiErr("InvalidParameterValue", "unreadable or oversized request body"))
			return
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			writeError(w, rid, apiErr("InvalidParameterValue", "malformed form body"))
			return
		}
		q := newQuery(form)
		action := q.val("Action")
		if v := q.val("Version"); v != APIVersion {
			writeError(w, rid, apiErr("InvalidParameterValue", fmt.Sprintf("unsupported API version %q", v)))
			return
		}
		var out any
		switch action {
		case "CreateFleet":
			out, err = answer(r.Context(), q, decodeCreateFleet(q), f.CreateFleet, func(o *sdkec2.CreateFleetOutput) any {
				return encodeCreateFleet(rid, o)
			})
		case "DescribeInstances":
			in := &sdkec2.DescribeInstancesInput{InstanceIds: q.strs("InstanceId"), Filters: q.filters("Filter"),
				MaxResults: q.i32("MaxResults"), NextToken: q.str("NextToken")}
			out, err = answer(r.Context(), q, in, f.DescribeInstances, func(o *sdkec2.DescribeInstancesOutput) any {
				return encodeDescribeInstances(rid, o)
			})
		case "TerminateInstances":
			in := &sdkec2.TerminateInstancesInput{InstanceIds: q.strs("InstanceId")}
			out, err = answer(r.Context(), q, in, f.TerminateInstances, func(o *sdkec2.TerminateInstancesOutput) any {
				return encodeTerminateInstances(rid, o)
			})
		case "StopInstances":
			in := &sdkec2.StopInstancesInput{InstanceIds: q.strs("InstanceId")}
			out, err = answer(r.Context(), q, in, f.StopInstances, func(o *sdkec2.StopInstancesOutput) any {
				return encodeStateChanges("StopInstancesResponse", rid, o.StoppingInstances)
			})
		case "StartInstances":
			in := &sdkec2.StartInstancesInput{InstanceIds: q.strs("InstanceId")}
			out, err = answer(r.Context(), q, in, f.StartInstances, func(o *sdkec2.StartInstancesOutput) any {
				return encodeStateChanges("StartInstancesResponse", rid, o.StartingInstances)
			})
		case "CreateTags":
			in := &sdkec2.CreateTagsInput{Resources: q.strs("ResourceId"), Tags: q.tags("Tag")}
			out, err = answer(r.Context(), q, in, f.CreateTags, func(*sdkec2.CreateTagsOutput) any {
				return &xmlCreateTagsResponse{Xmlns: xmlns, RequestID: rid, Return: true}
			})
		default:
			err = apiErr("InvalidAction", fmt.Sprintf("The action %s is not valid for this web service.", action))
		}
		if err != nil {
			writeError(w, rid, err)
			return
		}
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		_, _ = io.WriteString(w, xml.Header)
		_ = xml.NewEncoder(w).Encode(out)
	})
}

// answer is one action's answer: once q has read the request (a parameter
// the fake does not model, or a malformed one, is refused before op runs),
// op's output as encode makes it XML.
func answer[I, O any](ctx context.Context, q *query, in I, op func(context.Context, I, ...func(*sdkec2.Options)) (O, error), encode func(O) any) (any, error) {
	if err := q.finish(); err != nil {
		return nil, err
	}
	o, err := op(ctx, in)
	if err != nil {
		return nil, err
	}
	return encode(o), nil
}

// Serve starts the handler on a loopback port for the test's duration and
// returns its URL (an SDK client's BaseEndpoint, or AWS_ENDPOINT_URL_EC2).
func (f *Fake) Serve(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// status is the HTTP status EC2 answers an error code with: 503 for
// throttling and unavailability, 500 for internal errors, 401/403 for
// authentication and authorization, 400 for the other client errors.
func status(code string) int {
	switch code {
	case "RequestLimitExceeded", "Unavailable", "ServiceUnavailable":
		return http.StatusServiceUnavailable
	case "InternalError", "InternalFailure":
		return http.StatusInternalServerError
	case "AuthFailure":
		return http.StatusUnauthorized
	case "UnauthorizedOperation", "OptInRequired", "Blocked":
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

type xmlErrorResponse struct {
	XMLName   xml.Name   `xml:"Response"`
	Errors    []xmlError `xml:"Errors>Error"`
	RequestID string     `xml:"RequestID"`
}

type xmlError struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

func writeError(w http.ResponseWriter, rid string, err error) {
	code, msg := "InternalError", "An internal error has occurred"
	var api smithy.APIError
	switch {
	case errors.As(err, &api):
		code, msg = api.ErrorCode(), api.ErrorMessage()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code, msg = "RequestCanceled", "the request ended before the answer"
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status(code))
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(xmlErrorResponse{Errors: []xmlError{{Code: code, Message: msg}}, RequestID: rid})
}

// query reads an EC2 Query form: members of lists are Name.1, Name.2, …,
// structures Name.Field. It remembers the keys read, so that finish can
// refuse the ones the fake does not model.
type query struct {
	form     url.Values
	prefixes map[string]bool
	used     map[string]bool
	err      error
}

func newQuery(form url.Values) *query {
	q := &query{form: form, prefixes: map[string]bool{}, used: map[string]bool{}}
	for k := range form {
		for i := range k {
			if k[i] == '.' {
				q.prefixes[k[:i]] = true
			}
		}
		q.prefixes[k] = true
	}
	return q
}

func (q *query) fail(code, format string, args ...any) {
	if q.err == nil {
		q.err = apiErr(code, fmt.Sprintf(format, args...))
	}
}

// val returns the value of key, "" when absent.
func (q *query) val(key string) string {
	q.used[key] = true
	return q.form.Get(key)
}

// has reports whether key or any of its fields is present.
func (q *query) has(key string) bool { return q.prefixes[key] }

func (q *query) str(key string) *string {
	if _, ok := q.form[key]; !ok {
		return nil
	}
	return aws.String(q.val(key))
}

func (q *query) i32(key string) *int32 {
	s := q.str(key)
	if s == nil {
		return nil
	}
	n, err := strconv.ParseInt(*s, 10, 32)
	if err != nil {
		q.fail("InvalidParameterValue", "Value (%s) for parameter %s is invalid. Expected an integer.", *s, key)
		return nil
	}
	return aws.Int32(int32(n))
}

func (q *query) f64(key string) *float64 {
	s := q.str(key)
	if s == nil {
		return nil
	}
	n, err := strconv.ParseFloat(*s, 64)
	if err != nil {
		q.fail("InvalidParameterValue", "Value (%s) for parameter %s is invalid. Expected a number.", *s, key)
		return nil
	}
	return aws.Float64(n)
}

func (q *query) boolean(key string) *bool {
	s := q.str(key)
	if s == nil {
		return nil
	}
	b, err := strconv.ParseBool(*s)
	if err != nil {
		q.fail("InvalidParameterValue", "Value (%s) for parameter %s is invalid. Expected a boolean.", *s, key)
		return nil
	}
	return aws.Bool(b)
}

// count is how many members the list key has (key.1 … key.n).
func (q *query) count(key string) int {
	n := 0
	for q.has(key + "." + strconv.Itoa(n+1)) {
		n++
	}
	return n
}

func member(key string, i int) string { return key + "." + strconv.Itoa(i+1) }

// members reads the list key (key.1 … key.n), each member with read given
// the member's key; nil when the list is absent, as the SDK leaves it, so
// that a decoded input equals the one the SDK sent.
func members[T any](q *query, key string, read func(member string) T) []T {
	n := q.count(key)
	if n == 0 {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = read(member(key, i))
	}
	return out
}

func (q *query) strs(key string) []string { return members(q, key, q.val) }

func (q *query) tags(key string) []types.Tag {
	return members(q, key, func(p string) types.Tag {
		return types.Tag{Key: q.str(p + ".Key"), Value: q.str(p + ".Value")}
	})
}

func (q *query) filters(key string) []types.Filter {
	return members(q, key, func(p string) types.Filter {
		return types.Filter{Name: q.str(p + ".Name"), Values: q.strs(p + ".Value")}
	})
}

// finish reports the first malformed value, or the first parameter that
// was not read.
func (q *query) finish() error {
	if q.err != nil {
		return q.err
	}
	var unknown []string
	for k := range q.form {
		if !q.used[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return apiErr("UnknownParameter", fmt.Sprintf("The parameter %s is not recognized (the fake does not model it)", unknown[0]))
	}
	return nil
}

func decodeCreateFleet(q *query) *sdkec2.CreateFleetInput {
	in := &sdkec2.CreateFleetInput{
		ClientToken: q.str("ClientToken"),
		Type:        types.FleetType(q.val("Type")),
		DryRun:      q.boolean("DryRun"),
	}
	for i := range q.count("LaunchTemplateConfigs") {
		p := member("LaunchTemplateConfigs", i)
		var c types.FleetLaunchTemplateConfigRequest
		if s := p + ".LaunchTemplateSpecification"; q.has(s) {
			c.LaunchTemplateSpecification = &types.FleetLaunchTemplateSpecificationRequest{
				LaunchTemplateId:   q.str(s + ".LaunchTemplateId"),
				LaunchTemplateName: q.str(s + ".LaunchTemplateName"),
				Version:            q.str(s + ".Version"),
			}
		}
		for j := range q.count(p + ".Overrides") {
			c.Overrides = append(c.Overrides, decodeOverride(q, member(p+".Overrides", j)))
		}
		in.LaunchTemplateConfigs = append(in.LaunchTemplateConfigs, c)
	}
	if p := "TargetCapacitySpecification"; q.has(p) {
		in.TargetCapacitySpecification = &types.TargetCapacitySpecificationRequest{
			TotalTargetCapacity:       q.i32(p + ".TotalTargetCapacity"),
			OnDemandTargetCapacity:    q.i32(p + ".OnDemandTargetCapacity"),
			SpotTargetCapacity:        q.i32(p + ".SpotTargetCapacity"),
			DefaultTargetCapacityType: types.DefaultTargetCapacityType(q.val(p + ".DefaultTargetCapacityType")),
		}
	}
	if p := "SpotOptions"; q.has(p) {
		in.SpotOptions = &types.SpotOptionsRequest{
			AllocationStrategy:           types.SpotAllocationStrategy(q.val(p + ".AllocationStrategy")),
			InstanceInterruptionBehavior: types.SpotInstanceInterruptionBehavior(q.val(p + ".InstanceInterruptionBehavior")),
			MaxTotalPrice:                q.str(p + ".MaxTotalPrice"),
			MinTargetCapacity:            q.i32(p + ".MinTargetCapacity"),
			SingleAvailabilityZone:       q.boolean(p + ".SingleAvailabilityZone"),
			SingleInstanceType:           q.boolean(p + ".SingleInstanceType"),
		}
	}
	if p := "OnDemandOptions"; q.has(p) {
		in.OnDemandOptions = &types.OnDemandOptionsRequest{
			AllocationStrategy:     types.FleetOnDemandAllocationStrategy(q.val(p + ".AllocationStrategy")),
			MaxTotalPrice:          q.str(p + ".MaxTotalPrice"),
			MinTargetCapacity:      q.i32(p + ".MinTargetCapacity"),
			SingleAvailabilityZone: q.boolean(p + ".SingleAvailabilityZone"),
			SingleInstanceType:     q.boolean(p + ".SingleInstanceType"),
		}
	}
	for i := range q.count("TagSpecification") {
		p := member("TagSpecification", i)
		in.TagSpecifications = append(in.TagSpecifications, types.TagSpecification{
			ResourceType: types.ResourceType(q.val(p + ".ResourceType")),
			Tags:         q.tags(p + ".Tag"),
		})
	}
	return in
}

func decodeOverride(q *query, p string) types.FleetLaunchTemplateOverridesRequest {
	o := types.FleetLaunchTemplateOverridesRequest{
		InstanceType:     types.InstanceType(q.val(p + ".InstanceType")),
		SubnetId:         q.str(p + ".SubnetId"),
		AvailabilityZone: q.str(p + ".AvailabilityZone"),
		ImageId:          q.str(p + ".ImageId"),
		MaxPrice:         q.str(p + ".MaxPrice"),
		Priority:         q.f64(p + ".Priority"),
		WeightedCapacity: q.f64(p + ".WeightedCapacity"),
	}
	for k := range q.count(p + ".BlockDeviceMapping") {
		b := member(p+".BlockDeviceMapping", k)
		m := types.FleetBlockDeviceMappingRequest{DeviceName: q.str(b + ".DeviceName"), NoDevice: q.str(b + ".NoDevice"),
			VirtualName: q.str(b + ".VirtualName")}
		if e := b + ".Ebs"; q.has(e) {
			m.Ebs = &types.FleetEbsBlockDeviceRequest{
				DeleteOnTermination: q.boolean(e + ".DeleteOnTermination"),
				Encrypted:           q.boolean(e + ".Encrypted"),
				Iops:                q.i32(e + ".Iops"),
				KmsKeyId:            q.str(e + ".KmsKeyId"),
				SnapshotId:          q.str(e + ".SnapshotId"),
				Throughput:          q.i32(e + ".Throughput"),
				VolumeSize:          q.i32(e + ".VolumeSize"),
				VolumeType:          types.VolumeType(q.val(e + ".VolumeType")),
			}
		}
		o.BlockDeviceMappings = append(o.BlockDeviceMappings, m)
	}
	if r := p + ".InstanceRequirements"; q.has(r) {
		ir := &types.InstanceRequirementsRequest{}
		if q.has(r + ".VCpuCount") {
			ir.VCpuCount = &types.VCpuCountRangeRequest{Min: q.i32(r + ".VCpuCount.Min"), Max: q.i32(r + ".VCpuCount.Max")}
		}
		if q.has(r + ".MemoryMiB") {
			ir.MemoryMiB = &types.MemoryMiBRequest{Min: q.i32(r + ".MemoryMiB.Min"), Max: q.i32(r + ".MemoryMiB.Max")}
		}
		if q.has(r + ".AcceleratorCount") {
			ir.AcceleratorCount = &types.AcceleratorCountRequest{Min: q.i32(r + ".AcceleratorCount.Min"), Max: q.i32(r + ".AcceleratorCount.Max")}
		}
		for _, v := range q.strs(r + ".AcceleratorType") {
			ir.AcceleratorTypes = append(ir.AcceleratorTypes, types.AcceleratorType(v))
		}
		for _, v := range q.strs(r + ".AcceleratorManufacturer") {
			ir.AcceleratorManufacturers = append(ir.AcceleratorManufacturers, types.AcceleratorManufacturer(v))
		}
		for _, v := range q.strs(r + ".AcceleratorName") {
			ir.AcceleratorNames = append(ir.AcceleratorNames, types.AcceleratorName(v))
		}
		ir.AllowedInstanceTypes = q.strs(r + ".AllowedInstanceType")
		ir.ExcludedInstanceTypes = q.strs(r + ".ExcludedInstanceType")
		o.InstanceRequirements = ir
	}
	return o
}

// The XML answers. Element names are EC2's (lowerCamelCase, lists as
// <xSet><item>…</item></xSet>), as the SDK's ec2query deserializers read them.

type xmlCreateFleetResponse struct {
	XMLName   xml.Name           `xml:"CreateFleetResponse"`
	Xmlns     string             `xml:"xmlns,attr"`
	RequestID string             `xml:"requestId"`
	FleetID   string             `xml:"fleetId,omitempty"`
	Errors    []xmlFleetError    `xml:"errorSet>item"`
	Instances []xmlFleetInstance `xml:"fleetInstanceSet>item"`
}

type xmlFleetError struct {
	LTO       *xmlLTO `xml:"launchTemplateAndOverrides,omitempty"`
	Lifecycle string  `xml:"lifecycle,omitempty"`
	Code      string  `xml:"errorCode"`
	Message   string  `xml:"errorMessage"`
}

type xmlFleetInstance struct {
	LTO              *xmlLTO  `xml:"launchTemplateAndOverrides,omitempty"`
	Lifecycle        string   `xml:"lifecycle,omitempty"`
	InstanceIDs      []string `xml:"instanceIds>item"`
	InstanceType     string   `xml:"instanceType,omitempty"`
	SubnetID         string   `xml:"subnetId,omitempty"`
	AvailabilityZone string   `xml:"availabilityZone,omitempty"`
}

type xmlLTO struct {
	Spec      *xmlLTSpec    `xml:"launchTemplateSpecification,omitempty"`
	Overrides *xmlOverrides `xml:"overrides,omitempty"`
}

type xmlLTSpec struct {
	ID      string `xml:"launchTemplateId,omitempty"`
	Name    string `xml:"launchTemplateName,omitempty"`
	Version string `xml:"version,omitempty"`
}

type xmlOverrides struct {
	InstanceType     string `xml:"instanceType,omitempty"`
	MaxPrice         string `xml:"maxPrice,omitempty"`
	SubnetID         string `xml:"subnetId,omitempty"`
	AvailabilityZone string `xml:"availabilityZone,omitempty"`
	WeightedCapacity string `xml:"weightedCapacity,omitempty"`
	Priority         string `xml:"priority,omitempty"`
	ImageID          string `xml:"imageId,omitempty"`
}

func encodeLTO(l *types.LaunchTemplateAndOverridesResponse) *xmlLTO {
	if l == nil {
		return nil
	}
	out := &xmlLTO{}
	if s := l.LaunchTemplateSpecification; s != nil {
		out.Spec = &xmlLTSpec{ID: aws.ToString(s.LaunchTemplateId), Name: aws.ToString(s.LaunchTemplateName), Version: aws.ToString(s.Version)}
	}
	if o := l.Overrides; o != nil {
		num := func(v *float64) string {
			if v == nil {
				return ""
			}
			return strconv.FormatFloat(*v, 'f', -1, 64)
		}
		out.Overrides = &xmlOverrides{
			InstanceType: string(o.InstanceType), MaxPrice: aws.ToString(o.MaxPrice), SubnetID: aws.ToString(o.SubnetId),
			AvailabilityZone: aws.ToString(o.AvailabilityZone), WeightedCapacity: num(o.WeightedCapacity),
			Priority: num(o.Priority), ImageID: aws.ToString(o.ImageId),
		}
	}
	return out
}

func encodeCreateFleet(rid string, o *sdkec2.CreateFleetOutput) *xmlCreateFleetResponse {
	out := &xmlCreateFleetResponse{Xmlns: xmlns, RequestID: rid, FleetID: aws.ToString(o.FleetId)}
	for _, e := range o.Errors {
		out.Errors = append(out.Errors, xmlFleetError{LTO: encodeLTO(e.LaunchTemplateAndOverrides), Lifecycle: string(e.Lifecycle),
			Code: aws.ToString(e.ErrorCode), Message: aws.ToString(e.ErrorMessage)})
	}
	for _, i := range o.Instances {
		out.Instances = append(out.Instances, xmlFleetInstance{LTO: encodeLTO(i.LaunchTemplateAndOverrides), Lifecycle: string(i.Lifecycle),
			InstanceIDs: i.InstanceIds, InstanceType: string(i.InstanceType), SubnetID: aws.ToString(i.SubnetId),
			AvailabilityZone: aws.ToString(i.AvailabilityZone)})
	}
	return out
}

type xmlState struct {
	Code int32  `xml:"code"`
	Name string `xml:"name"`
}

func encodeState(s *types.InstanceState) *xmlState {
	if s == nil {
		return nil
	}
	return &xmlState{Code: aws.ToInt32(s.Code), Name: string(s.Name)}
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlDescribeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type xmlReservation struct {
	ID        string        `xml:"reservationId"`
	OwnerID   string        `xml:"ownerId"`
	Instances []xmlInstance `xml:"instancesSet>item"`
}

type xmlInstance struct {
	ID           string    `xml:"instanceId"`
	InstanceType string    `xml:"instanceType"`
	State        *xmlState `xml:"instanceState"`
	Placement    *struct {
		AvailabilityZone string `xml:"availabilityZone"`
	} `xml:"placement,omitempty"`
	SubnetID   string   `xml:"subnetId,omitempty"`
	LaunchTime string   `xml:"launchTime,omitempty"`
	Lifecycle  string   `xml:"instanceLifecycle,omitempty"`
	Tags       []xmlTag `xml:"tagSet>item"`
}

func encodeDescribeInstances(rid string, o *sdkec2.DescribeInstancesOutput) *xmlDescribeInstancesResponse {
	out := &xmlDescribeInstancesResponse{Xmlns: xmlns, RequestID: rid, NextToken: aws.ToString(o.NextToken)}
	for _, r := range o.Reservations {
		xr := xmlReservation{ID: aws.ToString(r.ReservationId), OwnerID: aws.ToString(r.OwnerId)}
		for _, i := range r.Instances {
			xi := xmlInstance{ID: aws.ToString(i.InstanceId), InstanceType: string(i.InstanceType), State: encodeState(i.State),
				SubnetID: aws.ToString(i.SubnetId), Lifecycle: string(i.InstanceLifecycle)}
			if i.Placement != nil {
				xi.Placement = &struct {
					AvailabilityZone string `xml:"availabilityZone"`
				}{aws.ToString(i.Placement.AvailabilityZone)}
			}
			if i.LaunchTime != nil {
				xi.LaunchTime = i.LaunchTime.UTC().Format("2006-01-02T15:04:05.000Z")
			}
			for _, t := range i.Tags {
				xi.Tags = append(xi.Tags, xmlTag{Key: aws.ToString(t.Key), Value: aws.ToString(t.Value)})
			}
			xr.Instances = append(xr.Instances, xi)
		}
		out.Reservations = append(out.Reservations, xr)
	}
	return out
}

// xmlStateChangesResponse is the answer of TerminateInstances,
// StopInstances and StartInstances; XMLName's value names it.
type xmlStateChangesResponse struct {
	XMLName   xml.Name
	Xmlns     string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Changes   []xmlStateChange `xml:"instancesSet>item"`
}

type xmlStateChange struct {
	ID       string    `xml:"instanceId"`
	Current  *xmlState `xml:"currentState"`
	Previous *xmlState `xml:"previousState"`
}

func encodeTerminateInstances(rid string, o *sdkec2.TerminateInstancesOutput) *xmlStateChangesResponse {
	return encodeStateChanges("TerminateInstancesResponse", rid, o.TerminatingInstances)
}

// encodeStateChanges is the answer of TerminateInstances, StopInstances
// or StartInstances (the element name tells which): the instances' state
// changes in an instancesSet.
func encodeStateChanges(name, rid string, changes []types.InstanceStateChange) *xmlStateChangesResponse {
	out := &xmlStateChangesResponse{XMLName: xml.Name{Local: name}, Xmlns: xmlns, RequestID: rid}
	for _, c := range changes {
		out.Changes = append(out.Changes, xmlStateChange{ID: aws.ToString(c.InstanceId), Current: encodeState(c.CurrentState),
			Previous: encodeState(c.PreviousState)})
	}
	return out
}

type xmlCreateTagsResponse struct {
	XMLName   xml.Name `xml:"CreateTagsResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}
