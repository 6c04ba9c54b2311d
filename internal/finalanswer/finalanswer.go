// Package finalanswer makes each request's answer the one its caller sees.
// client-go retries a 429 or 5xx that carries Retry-After, up to 10 times and
// silently: a throttled or (re)initialising apiserver then shows as a slow
// request with a later answer, or as a deadline, and a 410 that follows the
// retries is timed from the first attempt. The measurement wants the 429
// itself, at once, to count it and to wait as it asks.
package finalanswer

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Wrap is a rest.Config WrapTransport: it removes Retry-After from 429 and
// 5xx answers (client-go retries only those that carry it) and keeps the
// delay in the answer's Status (details.retryAfterSeconds, read by
// apierrors.SuggestsClientDelay). A Status body already has it; a plain-text
// one (API Priority and Fairness answers "Too many requests, please try
// again later.") is turned into a Status that says the same.
func Wrap(rt http.RoundTripper) http.RoundTripper { return transport{rt} }

type transport struct{ next http.RoundTripper }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.Header.Get("Retry-After") == "" ||
		resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return resp, err
	}
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	resp.Header.Del("Retry-After")
	if isStatus(resp.Header.Get("Content-Type")) {
		return resp, nil
	}
	text, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	st := apierrors.NewGenericServerResponse(resp.StatusCode, req.Method, schema.GroupResource{}, "", strings.TrimSpace(string(text)), secs, true).ErrStatus
	st.APIVersion, st.Kind = "v1", "Status"
	body, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Del("Content-Length")
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return resp, nil
}

// isStatus says whether a body of this type is an encoded object (a Status),
// as the apiserver's own errors are.
func isStatus(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || mt == "application/vnd.kubernetes.protobuf")
}
