package harness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	errDown := errors.New("connection refused")
	errBad := errors.New("phase Failed")
	tests := []struct {
		name     string
		results  []error // one per call; past the end: the last again
		doneAt   int     // the call that returns true; 0: never
		wantErr  error   // errors.Is the result
		wantText string  // in the message
		wantCall int     // calls made, when it ends before the limit
	}{
		{name: "done at once", doneAt: 1, wantCall: 1},
		{name: "transient errors, then done", results: []error{Retry(errDown), Retry(errDown), nil}, doneAt: 3, wantCall: 3},
		{name: "a plain error ends it", results: []error{Retry(errDown), errBad}, wantErr: errBad, wantCall: 2},
		{name: "time runs out on a transient error, which is named", results: []error{Retry(errDown)}, wantErr: errDown, wantText: "last transient error: connection refused"},
		{name: "time runs out, nothing transient", results: []error{nil}, wantErr: context.DeadlineExceeded, wantText: "gave up after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := PollEvery(context.Background(), time.Millisecond, 50*time.Millisecond, func(context.Context) (bool, error) {
				calls++
				var e error
				if len(tt.results) > 0 {
					e = tt.results[min(calls, len(tt.results))-1]
				}
				return calls == tt.doneAt, e
			})
			if tt.wantErr == nil && err != nil {
				t.Fatalf("error %v, want none", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want one that is %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not say %q", err, tt.wantText)
			}
			if tt.wantCall > 0 && calls != tt.wantCall {
				t.Errorf("%d calls, want %d", calls, tt.wantCall)
			}
		})
	}
	if Retry(nil) != nil {
		t.Errorf("Retry(nil) = %v, want nil", Retry(nil))
	}
}
