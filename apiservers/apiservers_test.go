package apiservers

import (
	"reflect"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestParseList(t *testing.T) {
	eps, err := ParseList("https://10.0.0.1:6443,https://[fd00::1]:6443,https://api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	want := []Endpoint{
		{"10.0.0.1:6443", "https://10.0.0.1:6443"},
		{"[fd00::1]:6443", "https://[fd00::1]:6443"},
		{"api.example.com:443", "https://api.example.com:443"},
	}
	if !reflect.DeepEqual(eps, want) {
		t.Errorf("ParseList = %v, want %v", eps, want)
	}
	for in, wantErr := range map[string]string{
		"http://10.0.0.1:6443":      `"http://10.0.0.1:6443": want https://host:port`,
		"10.0.0.1:6443":             `"10.0.0.1:6443": want https://host:port`,
		"https://a:1,https://a:1":   `"https://a:1" is listed twice`,
		"https://10.0.0.1:6443/api": "want https://host:port",
		"":                          `"": want https://host:port`,
	} {
		if _, err := ParseList(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseList(%q) error %v, want %q", in, err, wantErr)
		}
	}
}

func TestFromSlices(t *testing.T) {
	https, port := "https", int32(6443)
	yes, no := true, false
	sl := []*discoveryv1.EndpointSlice{{
		Ports: []discoveryv1.EndpointPort{{Name: &https, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
			{Addresses: []string{"10.0.0.1"}},
			{Addresses: []string{"10.0.0.3"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}},
		},
	}, {
		Ports:     []discoveryv1.EndpointPort{{Name: &https, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
	}}
	got := FromSlices(sl)
	want := []Endpoint{{"10.0.0.1:6443", "https://10.0.0.1:6443"}, {"10.0.0.2:6443", "https://10.0.0.2:6443"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromSlices = %v, want %v (not-ready 10.0.0.3 left out, 10.0.0.1 once)", got, want)
	}
}
